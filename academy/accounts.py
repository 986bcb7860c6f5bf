"""Accounts: sign-up, sign-in with a rate limit, and "stay signed in" sessions.

Passwords are hashed with Argon2id (argon2-cffi) and never stored or logged
in clear. The browser keeps only a signed, expiring token that names a
server-side :class:`~academy.models.LoginSession`; signing out revokes it.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, func, select

from academy.models import Learner, LoginSession, SigninFailure, utcnow
from academy.settings import get_settings

_hasher = PasswordHasher()
EMAIL_RE = re.compile(r"^[^@\s<>\"'\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]{1,63})+$")
MIN_PASSWORD = 10
MAX_PASSWORD = 1024


@dataclass
class AccountError(Exception):
    """A refusal the page shows in the learner's language (``code`` is a catalog key)."""

    code: str

    def __str__(self) -> str:
        return self.code


def clean_display_name(name: str) -> str:
    """NFC, single spaces, at most 200 characters, without control or bidi-format
    characters (which would garble the name on pages and certificates)."""
    name = unicodedata.normalize("NFC", name or "")
    name = "".join(ch for ch in name if unicodedata.category(ch) not in ("Cc", "Cf"))
    return " ".join(name.split())[:200]


def normalise_email(email: str) -> str:
    return (email or "").strip().lower()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def check_password(stored_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def sign_up(
    *, session: Session, email: str, password: str, display_name: str = "", language: str = "en"
) -> Learner:
    email = normalise_email(email)
    if not EMAIL_RE.match(email) or len(email) > 254:
        raise AccountError("account.err_email")
    if len(password) < MIN_PASSWORD:
        raise AccountError("account.err_password_short")
    if len(password) > MAX_PASSWORD:
        raise AccountError("account.err_password_long")
    display_name = clean_display_name(display_name)
    password_hash = hash_password(password)  # before any query: no connection held while hashing
    if session.exec(select(Learner).where(Learner.email == email)).first():
        raise AccountError("account.err_duplicate")
    learner = Learner(
        email=email,
        display_name=display_name,
        password_hash=password_hash,
        is_admin=email in get_settings().admin_email_set,
        language=language,
    )
    session.add(learner)
    try:
        session.commit()
    except IntegrityError as exc:  # the same e-mail signed up in another tab meanwhile
        session.rollback()
        raise AccountError("account.err_duplicate") from exc
    session.refresh(learner)
    return learner


def _recent_failures(session: Session, email: str) -> int:
    since = utcnow() - timedelta(seconds=get_settings().signin_window_s)
    stmt = select(func.count()).where(SigninFailure.email == email, SigninFailure.at >= since)
    return session.exec(stmt).one()


def sign_in(*, session: Session, email: str, password: str) -> Learner:
    """The learner for these credentials; rate limited per e-mail address."""
    email = normalise_email(email)
    if _recent_failures(session, email) >= get_settings().signin_max_failures:
        raise AccountError("account.err_rate_limited")
    learner = session.exec(select(Learner).where(Learner.email == email)).first()
    stored_hash = learner.password_hash if learner else _DUMMY_HASH
    session.commit()  # end the read: no connection held while hashing (seconds under load)
    # Hash even for an unknown address so timing does not reveal which exist.
    ok = check_password(stored_hash, password)
    if not (learner and ok):
        session.add(SigninFailure(email=email))
        session.commit()
        raise AccountError("account.err_credentials")
    session.exec(delete(SigninFailure).where(col(SigninFailure.email) == email))
    if email in get_settings().admin_email_set and not learner.is_admin:
        learner.is_admin = True
        session.add(learner)
    session.commit()
    return learner


_DUMMY_HASH = hash_password(secrets.token_hex(16))


def _serializer() -> URLSafeTimedSerializer:
    from academy.keystore import session_secret

    return URLSafeTimedSerializer(session_secret(), salt="dpa-session")


def open_session(*, session: Session, learner_id: int) -> str:
    """Create a server-side session and return the signed token for the browser."""
    days = get_settings().session_days
    row = LoginSession(
        id=secrets.token_urlsafe(24), learner_id=learner_id, expires_at=utcnow() + timedelta(days=days)
    )
    session.add(row)
    session.commit()
    return _serializer().dumps(row.id)


def learner_for_token(*, session: Session, token: str) -> Learner | None:
    """The learner a browser token belongs to, or None if forged, expired or revoked."""
    max_age = get_settings().session_days * 86400
    try:
        session_id = _serializer().loads(token, max_age=max_age)
    except BadSignature:
        return None
    row = session.get(LoginSession, session_id)
    if row is None or row.revoked_at is not None or row.expires_at < utcnow():
        return None
    return session.get(Learner, row.learner_id)


def close_session(*, session: Session, token: str) -> None:
    try:
        session_id = _serializer().loads(token)
    except BadSignature:
        return
    row = session.get(LoginSession, session_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.commit()


def make_admin(*, session: Session, email: str) -> Learner:
    learner = session.exec(select(Learner).where(Learner.email == normalise_email(email))).first()
    if learner is None:
        raise AccountError("account.err_no_such_account")
    learner.is_admin = True
    session.add(learner)
    session.commit()
    return learner
