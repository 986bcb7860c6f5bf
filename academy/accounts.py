"""Accounts: sign-up, sign-in with rate limits, and "stay signed in" sessions.

Passwords are hashed with Argon2id (argon2-cffi) and never stored or logged
in clear. The browser keeps only a signed, expiring token that names a
server-side :class:`~academy.models.LoginSession`; pages look that row up on every
run, so signing out (here or in another tab) ends the session everywhere at its
next interaction.

Rate limits (review F-4, F-15) are counters bumped atomically *before* the
password is checked, so concurrent attempts cannot all pass one check. They
are kept per address from one client, per client and per address in total;
a client is an IP address in one spelling, loopback none (:func:`client_key`,
called by ``app.ui.client``).
Administrator rights never come from an e-mail address (F-8): only the
server's operator grants them (``python -m academy.admin``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import secrets
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from email_validator import EmailNotValidError, validate_email
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import case, delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from academy.errors import UserError
from academy.gate import FairGate
from academy.models import AdminToken, Learner, LoginSession, SigninCounter, utcnow
from academy.settings import get_settings

MIN_PASSWORD = 10
MAX_PASSWORD = 1024
ADMIN_TOKEN_HOURS = 1
def _make_hasher() -> PasswordHasher:
    s = get_settings()
    return PasswordHasher(time_cost=s.argon2_time_cost, memory_cost=s.argon2_memory_kib,
                          parallelism=s.argon2_parallelism)


# Argon2id takes argon2_memory_kib and a core per hash; a burst of sign-ins must not take
# the server's memory and every core with it. Over the cap a caller waits its turn at
# most ARGON2_WAIT_S, then is told "busy" (no attempt is charged).
_hasher = _make_hasher()
_SLOTS = FairGate(get_settings().argon2_max_concurrent or os.cpu_count() or 1)
ARGON2_WAIT_S = get_settings().argon2_wait_s

_log = logging.getLogger(__name__)
EMAIL_MAX = 254  # the longest address SMTP allows (RFC 5321 path limit)


class AccountError(UserError):
    """A refusal the page shows in the learner's language (``key`` in ``account.*``)."""


def joins_here(name: str, i: int) -> bool:
    """Whether ``name[i]`` is a joiner that is part of how the name is written.

    U+200D ZERO WIDTH JOINER and U+200C ZERO WIDTH NON-JOINER are invisible
    but part of how some names are written: a ZWJ glues an emoji sequence
    (👩🏽‍💻), and both choose letter forms in Indic and Arabic scripts. They pass
    between two such characters; anywhere else (between Latin letters, at an
    edge, next to another invisible one) they only make look-alike names.
    The display name (:func:`clean_display_name`) and the certificate name
    (``certificates.names.clean_name``) both ask this one function.
    """
    if name[i] not in "\u200c\u200d" or not 0 < i < len(name) - 1:
        return False

    def complex_script(c: str) -> bool:  # a letter or mark beyond the Latin blocks
        return ord(c) > 0x24F and unicodedata.category(c)[0] in "LM"

    def emoji(c: str) -> bool:  # pictographs, skin tones and the emoji variation selector
        return unicodedata.category(c) in ("So", "Sk") or c == "\ufe0f"

    before, after = name[i - 1], name[i + 1]
    return (complex_script(before) and complex_script(after)) or (
        name[i] == "\u200d" and emoji(before) and emoji(after)
    )


def clean_display_name(name: str) -> str:
    """NFC, single spaces, at most 200 characters, without control or format characters
    (bidi controls, zero-width spaces: they would garble the name on pages and
    certificates), except joiners where they join (:func:`joins_here`, review N-15)."""
    name = unicodedata.normalize("NFC", name or "")
    name = "".join(ch for i, ch in enumerate(name)
                   if unicodedata.category(ch) not in ("Cc", "Cf") or joins_here(name, i))
    return " ".join(name.split())[:200]


# --- e-mail addresses ---------------------------------------------------------------------------


def normalise_email(email: str) -> str:
    """The form an address is stored and looked up in: NFKC (full-width letters become
    ASCII), trimmed, lower case. Sign-in uses it without judging the address."""
    return unicodedata.normalize("NFKC", email or "").strip().lower()


def _script(ch: str) -> str | None:
    """The script of a letter (first word of its Unicode name: LATIN, CYRILLIC, CJK ...);
    None for digits, punctuation and marks, which go with any script."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    # Chinese and Japanese mix Han with kana legitimately; Korean Hangul with Han.
    return "HAN" if first in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL") else first


def _one_script(text: str) -> bool:
    return len({s for s in map(_script, text) if s}) <= 1


def check_email(email: str) -> str:
    """The normalised address, or ``AccountError("account.err_email")``.

    Refuses what would let two visually identical addresses be two accounts
    (review F-16): invisible or format characters (checked before NFKC, which
    keeps them), and letters from more than one script in the local part or a
    domain label (``аdmin`` with a Cyrillic а). Syntax and IDNA rules are
    email-validator's; no DNS look-up is made.
    """
    raw = (email or "").strip()
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn") for ch in raw):
        raise AccountError("account.err_email")
    address = normalise_email(raw)
    if len(address) > EMAIL_MAX:
        raise AccountError("account.err_email")
    try:
        checked = validate_email(address, check_deliverability=False)
    except EmailNotValidError as exc:
        raise AccountError("account.err_email") from exc
    if not _one_script(checked.local_part) or not all(_one_script(label) for label in checked.domain.split(".")):
        raise AccountError("account.err_email")
    return checked.normalized.lower()


# --- passwords ----------------------------------------------------------------------------------


@contextmanager
def _argon2_slot(on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    if not _SLOTS.acquire(timeout=ARGON2_WAIT_S, on_wait=on_wait):
        raise AccountError("account.err_busy")
    try:
        yield
    finally:
        _SLOTS.release()


def hash_password(password: str, *, on_wait: Callable[[], None] | None = None) -> str:
    """An Argon2id hash with the configured parameters, in turn (:class:`FairGate`)."""
    with _argon2_slot(on_wait):
        return _hasher.hash(password)


def check_password(stored_hash: str, password: str, *, on_wait: Callable[[], None] | None = None) -> bool:
    with _argon2_slot(on_wait):
        try:
            return _hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return False


def needs_rehash(stored_hash: str) -> bool:
    """Whether ``stored_hash`` was made with other parameters than today's."""
    try:
        return _hasher.check_needs_rehash(stored_hash)
    except InvalidHashError:
        return True


def _check_new_password(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise AccountError("account.err_password_short")
    if len(password) > MAX_PASSWORD:
        raise AccountError("account.err_password_long")


# --- rate limits --------------------------------------------------------------------------------


def _bump(session: Session, key: str, delta: int = 1) -> int:
    """Add ``delta`` to the counter of ``key`` in one statement and return the new count.

    ``UPDATE … RETURNING`` is atomic on SQLite and PostgreSQL alike: of N
    concurrent callers each sees a different count. A window that has ended
    starts again at ``delta``.
    """
    now = utcnow()
    cutoff = now - timedelta(seconds=get_settings().signin_window_s)
    expired = col(SigninCounter.window_start) < cutoff
    stmt = (
        update(SigninCounter)
        .where(col(SigninCounter.key) == key)
        .values(
            count=case((expired, max(delta, 0)), else_=col(SigninCounter.count) + delta),
            window_start=case((expired, now), else_=col(SigninCounter.window_start)),
        )
        .returning(SigninCounter.count)
    )
    got = session.execute(stmt).scalar_one_or_none()
    if got is None:
        if delta <= 0:
            session.commit()
            return 0
        try:
            with session.begin_nested():
                session.add(SigninCounter(key=key, window_start=now, count=delta))
            got = delta
        except IntegrityError:  # another attempt created it meanwhile
            got = session.execute(stmt).scalar_one()
    session.commit()
    return got


def prune_counters(*, session: Session) -> int:
    """Delete counters whose window has ended (they would restart at 1 anyway), so that
    spraying many addresses does not grow the table for good. Sign-ins call it now and then."""
    cutoff = utcnow() - timedelta(seconds=get_settings().signin_window_s)
    gone = session.execute(delete(SigninCounter).where(col(SigninCounter.window_start) < cutoff)).rowcount
    session.commit()
    return gone


def _reserve(session: Session, limits: list[tuple[str, int]]) -> list[str]:
    """Count one attempt against each (key, limit); refuse if any is over its limit.

    A refused attempt stays counted against the first key (the client's own, or
    the address-from-this-client one);
    the others are given back, so a client hammering an address cannot push the
    address's total over its limit with refused attempts.
    """
    taken: list[str] = []
    for key, limit in limits:
        taken.append(key)
        if _bump(session, key) > limit:
            _release(session, taken[1:])
            per_client = key.startswith(("client:", "signup:"))
            raise AccountError("account.err_rate_limited_client" if per_client else "account.err_rate_limited")
    return taken


def _release(session: Session, keys: list[str]) -> None:
    for key in keys:
        _bump(session, key, -1)


# The client Streamlit reports for localhost. Behind a proxy on the same machine that
# is every visitor at once, so limits *per client* would be limits for everybody (one
# person could lock the whole site out): they apply only to real addresses.
UNKNOWN_CLIENT = "local"
CLIENT_MAX = 64  # characters of a client key (the counters' keys are built from it)
_proxy_warned = threading.Event()


def _loopback_or_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` names, IPv4-mapped IPv6 as its IPv4 address; None if it is no IP."""
    try:
        ip = ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def client_key(peer: str | None, *, forwarded: str | None = None, hops: int = 0,
               ipv6_prefix: int | None = None) -> str:
    """Who is asking, for the per-client limits, in one spelling per client.

    ``peer``: the websocket's peer address as Streamlit reports it (None for
    127.0.0.1 and ::1). ``forwarded``: the X-Forwarded-For header. With
    ``hops`` (``TRUSTED_PROXY_HOPS``) = n > 0 the client is the n-th address
    from the right of that header, the one our own proxy appended (those left
    of it are the client's to forge); without that many, the peer.

    Loopback in every spelling (127.0.0.0/8, ::1, ``::ffff:127.0.0.1``: a
    dual-stack socket reports an IPv4 peer so, review N-5) is
    :data:`UNKNOWN_CLIENT`: it is a proxy on this machine speaking for
    everybody, or the operator. A loopback peer that sends X-Forwarded-For
    while ``hops`` is 0 is such a proxy nobody told us about; that is logged
    as an error once per process. Any other IPv4 address is its compressed form
    (an IPv4-mapped one as IPv4); an IPv6 address is its network of
    ``ipv6_prefix`` bits (default ``CLIENT_IPV6_PREFIX``, 64), as
    ``2001:db8:1:2::/64``: every address of one /64 is one client (review
    2026-12-04 M-1), and 128 keeps each address apart. Text that is no
    address is kept as it came, cut to :data:`CLIENT_MAX` characters.
    """
    peer = peer if isinstance(peer, str) else None  # what a test harness's stand-in reports
    forwarded = forwarded if isinstance(forwarded, str) else None
    if hops > 0:
        parts = [p.strip() for p in (forwarded or "").split(",") if p.strip()]
        if len(parts) >= hops:
            peer = parts[-hops]
    ip = _loopback_or_ip(peer) if peer else None
    if not peer or (ip is not None and ip.is_loopback):
        if hops == 0 and (forwarded or "").strip() and not _proxy_warned.is_set():
            _proxy_warned.set()
            _log.error("a request from a proxy on this machine carries X-Forwarded-For, but "
                       "TRUSTED_PROXY_HOPS is 0: every visitor is one client, so the per-client "
                       "limits are off. Set TRUSTED_PROXY_HOPS to the number of proxies that append "
                       "to X-Forwarded-For (docs/operators/security.md: Clients behind a proxy).")
        return UNKNOWN_CLIENT
    if ip is None:
        return peer.strip()[:CLIENT_MAX]
    if ip.version == 6:
        prefix = get_settings().client_ipv6_prefix if ipv6_prefix is None else ipv6_prefix
        if prefix < 128:
            return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))
    return str(ip)


def _signin_limits(email: str, client: str) -> list[tuple[str, int]]:
    s = get_settings()
    limits = [
        (f"pair:{client}|{email}", s.signin_max_failures),
        (f"address:{email}", s.signin_max_failures_address),
    ]
    if client != UNKNOWN_CLIENT:
        limits.insert(0, (f"client:{client}", s.signin_max_failures_client))
    return limits


# --- sign-up and sign-in ------------------------------------------------------------------------


def sign_up(
    *, session: Session, email: str, password: str, display_name: str = "", language: str = "en",
    client: str = UNKNOWN_CLIENT, on_wait: Callable[[], None] | None = None,
) -> Learner:
    """A new account (never an administrator). Throttled per client; a taken address gets
    the neutral ``err_sign_up_neutral``, not "already exists" (docs/contributors/security-model.md).
    ``on_wait``: called once if the hash has to wait its turn (:class:`FairGate`)."""
    email = check_email(email)
    _check_new_password(password)
    display_name = clean_display_name(display_name)
    if client != UNKNOWN_CLIENT:
        _reserve(session, [(f"signup:{client}", get_settings().signup_max_per_client)])
    password_hash = hash_password(password, on_wait=on_wait)  # before any query: no connection held while hashing
    if session.exec(select(Learner).where(Learner.email == email)).first():
        raise AccountError("account.err_sign_up_neutral")
    learner = Learner(email=email, display_name=display_name, password_hash=password_hash, language=language)
    session.add(learner)
    try:
        session.commit()
    except IntegrityError as exc:  # the same e-mail signed up in another tab meanwhile
        session.rollback()
        raise AccountError("account.err_sign_up_neutral") from exc
    session.refresh(learner)
    return learner


def sign_in(
    *, session: Session, email: str, password: str, client: str = UNKNOWN_CLIENT,
    on_wait: Callable[[], None] | None = None,
) -> Learner:
    """The learner for these credentials.

    The attempt is counted before the password is checked and given back only
    if it succeeds, so attempts still being checked count too. A hash made with
    other Argon2 parameters than today's is replaced by a new one, committed
    with the sign-in (not if the server is too busy to hash it now: the next
    sign-in does). ``on_wait``: called once if the check has to wait its turn.
    """
    email = normalise_email(email)
    if len(email) > EMAIL_MAX:
        # No account has such an address (sign-up refuses it), and the counter keys
        # built from it would not fit their column: the same answer as any wrong one.
        raise AccountError("account.err_credentials")
    if secrets.randbelow(100) == 0:
        prune_counters(session=session)
    taken = _reserve(session, _signin_limits(email, client))
    learner = session.exec(select(Learner).where(Learner.email == email)).first()
    stored_hash = learner.password_hash if learner else _DUMMY_HASH
    session.commit()  # end the read: no connection held while hashing (seconds under load)
    try:
        # Hash even for an unknown address so timing does not reveal which exist.
        ok = check_password(stored_hash, password, on_wait=on_wait)
    except AccountError:  # busy: not the learner's failure
        _release(session, taken)
        raise
    if not (learner and ok):
        raise AccountError("account.err_credentials")
    new_hash = None
    if needs_rehash(stored_hash):
        try:
            new_hash = hash_password(password, on_wait=on_wait)
        except AccountError:  # busy: keep the old hash until the next sign-in
            new_hash = None
    pair = next(key for key in taken if key.startswith("pair:"))
    _release(session, [key for key in taken if key != pair])
    session.exec(update(SigninCounter).where(col(SigninCounter.key) == pair).values(count=0))
    if new_hash is not None:  # unless the password changed meanwhile
        session.exec(update(Learner).where(col(Learner.id) == learner.id,
                                           col(Learner.password_hash) == stored_hash)
                     .values(password_hash=new_hash))
    session.commit()
    if new_hash is not None:
        session.refresh(learner)
    return learner


_DUMMY_HASH = _hasher.hash(secrets.token_hex(16))


# --- sessions -----------------------------------------------------------------------------------


def _serializer() -> URLSafeTimedSerializer:
    from academy.keystore import session_secret

    return URLSafeTimedSerializer(session_secret(), salt="dpa-session")


def _session_id(token: str, max_age: int | None = None) -> str | None:
    try:
        found = _serializer().loads(token, max_age=max_age)
    except BadSignature:
        return None
    return found if isinstance(found, str) else None


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
    """The learner a browser token belongs to, or None if forged, expired or revoked.

    Two primary-key look-ups: cheap enough for every script run (F-5).
    """
    session_id = _session_id(token or "", max_age=get_settings().session_days * 86400)
    if session_id is None:
        return None
    row = session.get(LoginSession, session_id)
    if row is None or row.revoked_at is not None or row.expires_at < utcnow():
        return None
    return session.get(Learner, row.learner_id)


def close_session(*, session: Session, token: str) -> None:
    session_id = _session_id(token or "")
    if session_id is None:
        return
    session.exec(
        update(LoginSession)
        .where(col(LoginSession.id) == session_id, col(LoginSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    session.commit()


def close_all_sessions(*, session: Session, learner_id: int, keep_token: str | None = None) -> int:
    """Revoke every open session of the learner but ``keep_token``'s; how many were open."""
    keep = _session_id(keep_token or "")
    stmt = update(LoginSession).where(
        col(LoginSession.learner_id) == learner_id, col(LoginSession.revoked_at).is_(None)
    )
    if keep is not None:
        stmt = stmt.where(col(LoginSession.id) != keep)
    count = session.execute(stmt.values(revoked_at=utcnow())).rowcount
    session.commit()
    return count


def change_password(
    *, session: Session, learner_id: int, current: str, new: str, keep_token: str | None,
    client: str = UNKNOWN_CLIENT,
) -> None:
    """Check the current password (rate limited like a sign-in), store the new one and
    sign out every other session, so a stolen session or password stops working."""
    _check_new_password(new)
    learner = session.get(Learner, learner_id)
    if learner is None:
        raise AccountError("account.err_credentials")
    taken = _reserve(session, _signin_limits(learner.email, client))
    session.commit()
    try:
        ok = check_password(learner.password_hash, current)
    except AccountError:
        _release(session, taken)
        raise
    if not ok:
        raise AccountError("account.err_credentials")
    _release(session, taken)
    new_hash = hash_password(new)
    learner = session.get(Learner, learner_id)
    learner.password_hash = new_hash
    session.add(learner)
    session.commit()
    close_all_sessions(session=session, learner_id=learner_id, keep_token=keep_token)


# --- administrators -----------------------------------------------------------------------------


def make_admin(*, session: Session, email: str, granted_by: int | None = None) -> Learner:
    """Make the account with this address an administrator; the grant is logged with
    who made it (``granted_by``, a learner id; None: the operator's CLI)."""
    learner = session.exec(select(Learner).where(Learner.email == normalise_email(email))).first()
    if learner is None:
        raise AccountError("account.err_no_such_account")
    learner.is_admin = True
    session.add(learner)
    session.commit()
    _log.warning("administrator rights granted to learner %s by %s", learner.id,
                 f"learner {granted_by}" if granted_by is not None else "the operator (CLI)")
    return learner


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


def create_admin_token(*, session: Session) -> str:
    """A one-time token (valid one hour) that makes whoever redeems it, signed in, an admin.

    For the operator of the server (the CLI prints it); only its hash is stored.
    """
    token = secrets.token_urlsafe(24)
    session.add(AdminToken(id=_token_hash(token), expires_at=utcnow() + timedelta(hours=ADMIN_TOKEN_HOURS)))
    session.commit()
    return token


def redeem_admin_token(*, session: Session, learner_id: int, token: str) -> Learner:
    """Use the token up (one conditional UPDATE: two tabs cannot both redeem it) and make the
    learner an administrator; ``AccountError("account.err_admin_token")`` if it is unknown,
    used or expired."""
    used = session.execute(
        update(AdminToken)
        .where(col(AdminToken.id) == _token_hash(token or ""), col(AdminToken.used_at).is_(None),
               col(AdminToken.expires_at) > utcnow())
        .values(used_at=utcnow(), used_by=learner_id)
    ).rowcount
    if used != 1:
        session.rollback()
        raise AccountError("account.err_admin_token")
    learner = session.get(Learner, learner_id)
    if learner is None:  # the account went away meanwhile: the token stays unused
        session.rollback()
        raise AccountError("account.err_no_such_account")
    learner.is_admin = True
    session.add(learner)
    session.commit()
    _log.warning("administrator rights granted to learner %s by a one-time token", learner.id)
    return learner
