"""Every certificate is also an Open Badges 3.0 ``OpenBadgeCredential``.

The credential is a W3C Verifiable Credential 2.0 (``validFrom``) whose
subject is an ``AchievementSubject``: an ``id`` that is a random
``urn:uuid:`` of this credential alone (it names the learner to nobody and
links none of their credentials; Open Badges 3.0 needs it for the VC-JWT's
``sub``), the learner's printed name and their e-mail as a salted SHA-256
``IdentityObject`` (the plain address never appears), and the course as an
``Achievement`` with its criteria and the score as a ``Result``. The issuer
is ``did:web`` of ``PUBLIC_URL``.

It is secured twice with the same Ed25519 key; how (the proofs, the issuer's
DID document, checking a file) is ``certificates.proofs``:

* ``credential_json``: the credential with an embedded Data Integrity proof,
  cryptosuite ``eddsa-rdfc-2022`` (RDF canonicalisation with the bundled
  VC 2.0 and Open Badges 3.0 contexts), the one 1EdTech certifies; served at
  ``/credentials/<id>.json``, it is also the download.
* ``credential_jwt``: the same credential, proof included, as a VC-JWT the
  way Open Badges 3.0 section 8.2 says (``typ: JWT``, ``sub``), served at
  ``/credentials/<id>.jwt``.

Both are made once per certificate (``ensure_credential``) and stored: the
e-mail salt and the subject id are random, and a credential must not change
once handed out (those issued before, with an eddsa-jcs-2022 proof and no
subject id, are kept as they are and keep verifying).
Revocation is not in the credential but in the status list it points to
(``certificates.statuslist``), which ``signed_status_list`` signs here with
both cryptosuites (a proof set), so that verifiers of old and new credentials
alike can check it.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import secrets
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pypdf import PdfReader, PdfWriter
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, update

from academy import content
from academy.models import Certificate, Learner
from academy.settings import Settings, get_settings
from certificates import ids, keys, statuslist
from certificates.i18n import texts
from certificates.linkeddata import OB_CONTEXT, VC_CONTEXT
from certificates.proofs import (
    CRYPTOSUITES,
    add_proof,
    base_url,
    did_web,
    issuer_id,
    sign_jwt,
    verify_any,
    verify_proof,
)


def identity_hash(email: str, salt: str) -> str:
    """OB 3.0 ``IdentityHash``: ``sha256$`` + hex SHA-256 of e-mail then salt.
    The address is lower-cased and trimmed first, as accounts store it, so an
    employer who hashes what the learner tells them gets the same value."""
    data = (email.strip().lower() + salt).encode("utf-8")
    return "sha256$" + hashlib.sha256(data).hexdigest()


# --- the credential ---------------------------------------------------------


def credential_texts(lang: str) -> dict[str, str]:
    """The credential's own texts in ``lang``; English for a course language that
    has none yet (as ``certificates.i18n.texts``), so a new language never stops
    a certificate from being issued."""
    return content.catalog(content.CREDENTIALS, lang) or content.catalog(content.CREDENTIALS, content.DEFAULT_LANG)


def credential_name(lang: str) -> str:
    return credential_texts(lang)["credential_name"].format(course=texts(lang)["course_title"])


def _timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:  # SQLite hands back naive UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _score_text(score: float) -> str:
    score = round(float(score), 1)
    return f"{score:.0f}" if score.is_integer() else f"{score:.1f}"


def _criteria(cert: Certificate, settings: Settings) -> str:
    """What the learner did to earn it: the quiz, and the coding exercises when the
    certificate required them (its signed payload lists them)."""
    ob = credential_texts(cert.language)
    narrative = ob["criteria"].format(pass_percent=settings.quiz_pass_percent)
    done = json.loads(cert.payload).get("exercises")
    if done:
        t = texts(cert.language)
        names = t["exercise_separator"].join(t["exercise_names"].get(e, e) for e in done)
        narrative = ob["criteria_both"].format(quiz=narrative,
                                               exercises=ob["criteria_exercises"].format(exercises=names))
    return narrative


def build_credential(
    *,
    cert: Certificate,
    email: str | None,
    salt: str,
    subject_id: str,
    status_index: int,
    settings: Settings,
) -> dict[str, Any]:
    """The unsigned OpenBadgeCredential of a certificate. Pure: the caller
    chooses the salt, the subject id and the status index
    (``ensure_credential`` does)."""
    base = base_url()
    did = did_web(base)
    lang = cert.language
    ob = credential_texts(lang)
    identifiers = [
        {
            "type": "IdentityObject",
            "identityHash": cert.name,
            "identityType": "name",
            "hashed": False,
        }
    ]
    if email:
        identifiers.append(
            {
                "type": "IdentityObject",
                "identityHash": identity_hash(email, salt),
                "identityType": "emailAddress",
                "hashed": True,
                "salt": salt,
            }
        )
    achievement_id = f"{base}/achievements/{cert.course_id}"
    return {
        "@context": [VC_CONTEXT, OB_CONTEXT],
        "id": f"{base}/credentials/{cert.id}.json",
        "type": ["VerifiableCredential", "OpenBadgeCredential"],
        "name": credential_name(lang),
        "issuer": {
            "id": did,
            "type": ["Profile"],
            "name": settings.issuer,
            "url": base,
        },
        "validFrom": _timestamp(cert.issued_at),
        # The day the quiz was passed, as printed on the PDF (validFrom is the
        # moment of issue, later for a reissued certificate).
        "awardedDate": f"{cert.pass_date}T00:00:00Z",
        "credentialSubject": {
            "id": subject_id,
            "type": ["AchievementSubject"],
            "identifier": identifiers,
            "achievement": {
                "id": achievement_id,
                "type": ["Achievement"],
                "achievementType": "Certificate",
                "name": texts(lang)["course_title"],
                "description": ob["achievement_description"],
                "criteria": {"narrative": _criteria(cert, settings)},
                "inLanguage": lang,
                "resultDescription": [
                    {
                        "id": f"{achievement_id}#score",
                        "type": ["ResultDescription"],
                        "name": texts(lang)["labels"]["score"],
                        "resultType": "Percent",
                    }
                ],
            },
            "result": [
                {
                    "type": ["Result"],
                    "resultDescription": f"{achievement_id}#score",
                    "value": _score_text(cert.score),
                }
            ],
        },
        "credentialStatus": statuslist.entry(base, status_index),
    }


def summary(credential: dict[str, Any]) -> dict[str, Any]:
    """What the CLI prints of a *verified* credential."""
    subject = credential.get("credentialSubject") or {}
    achievement = subject.get("achievement") or {}
    names = [
        i.get("identityHash")
        for i in subject.get("identifier") or []
        if i.get("identityType") == "name" and not i.get("hashed")
    ]
    results = subject.get("result") or [{}]
    issuer = credential.get("issuer") or {}
    cert_id = str(credential.get("id", "")).rsplit("/", 1)[-1].removesuffix(".json")
    return {
        "id": cert_id,
        "name": names[0] if names else None,
        "course": achievement.get("name"),
        "score": results[0].get("value"),
        "pass_date": str(credential.get("awardedDate", ""))[:10] or None,
        "issuer": issuer.get("name") if isinstance(issuer, dict) else issuer,
        "issuer_did": issuer_id(credential),
    }


def new_subject_id() -> str:
    """A credential subject id that says nothing about the learner: random,
    and a new one for every credential (as the e-mail hash's salt)."""
    return f"urn:uuid:{uuid.uuid4()}"


# --- storage ----------------------------------------------------------------


def ensure_credential(*, session: Session, cert: Certificate) -> Certificate:
    """Give ``cert`` its status-list position and its two signed credential
    forms, once; commits. Safe to call again and from several requests or
    processes at once: the credential is stored by a conditional UPDATE that
    only succeeds while the row has none, so exactly one version is ever kept,
    and every caller returns the stored one (never a credential it made and
    lost with, whose status bit would not follow a revocation)."""
    for _ in range(8):
        session.refresh(cert)
        if cert.credential_json and cert.credential_jwt:
            return cert
        settings = get_settings()
        index = cert.status_index if cert.status_index is not None else statuslist.draw_index(session)
        learner = session.get(Learner, cert.learner_id) if cert.learner_id is not None else None
        credential = build_credential(
            cert=cert,
            email=learner.email if learner is not None else None,
            salt=secrets.token_hex(16),
            subject_id=new_subject_id(),
            status_index=index,
            settings=settings,
        )
        key = keys.active_key()
        secured = add_proof(credential, key, created=credential["validFrom"])
        claim = (
            update(Certificate)
            .where(col(Certificate.id) == cert.id, col(Certificate.credential_json).is_(None))
            .values(status_index=index, credential_json=json.dumps(secured, ensure_ascii=False, indent=2),
                    credential_jwt=sign_jwt(secured, key))
        )
        try:
            session.exec(claim)
            session.commit()
        except IntegrityError:
            session.rollback()  # another certificate took that position: draw again
            continue
    session.refresh(cert)
    if not (cert.credential_json and cert.credential_jwt):
        raise RuntimeError("no free status-list index after 8 tries")
    return cert


# A signed list is served again, unchanged, for this long while nothing in it
# changed (same bits, same key, same address): signing it costs ~13 ms of RDF
# canonicalisation against ~0.2 ms for reading and packing the bits, on a public
# route. A revocation changes the bits and so is signed and served at once; what
# is served still has minutes of validUntil left (statuslist.VALID_FOR).
LIST_REUSE = timedelta(seconds=30)
_last_list: dict[str, tuple[datetime, dict[str, Any]]] = {}
_last_list_lock = threading.Lock()


def signed_status_list(*, session: Session, now: datetime | None = None) -> dict[str, Any]:
    """The status list credential as it stands, signed with the active key by
    both cryptosuites (eddsa-rdfc-2022, then eddsa-jcs-2022: a verifier set up
    for either, checking an old credential or a new one, finds its proof);
    ``validUntil`` is ``statuslist.VALID_FOR`` after ``now``. Without ``now``,
    the list signed within ``LIST_REUSE`` is returned (a copy) if its bits, key
    and address are the same."""
    base = base_url()
    made = now or datetime.now(UTC)
    document = statuslist.unsigned_list_credential(
        session=session, public_url=base, issuer=did_web(base), now=made
    )
    key = keys.active_key()
    same = key.kid + json.dumps({k: v for k, v in document.items() if k not in ("validFrom", "validUntil")},
                                sort_keys=True)
    if now is None:
        with _last_list_lock:
            last = _last_list.get(same)
        if last is not None and timedelta(0) <= made - last[0] < LIST_REUSE:
            return copy.deepcopy(last[1])
    signed = add_proof(document, key, created=document["validFrom"], cryptosuites=CRYPTOSUITES)
    if now is None:
        with _last_list_lock:
            _last_list.clear()
            _last_list[same] = (made, signed)
        return copy.deepcopy(signed)
    return signed


def status_list_jwt(document: dict[str, Any]) -> str:
    """The same status list, with its proofs, as a VC-JWT (for verifiers that want JOSE)."""
    return sign_jwt(document, keys.active_key())


def is_revoked(
    credential: dict[str, Any],
    status_list: dict[str, Any] | str,
    public_keys: dict[str, Ed25519PublicKey],
    *,
    now: datetime | None = None,
) -> bool:
    """Whether a verified credential's bit is set in a status list (as JSON
    with its proof, or as a VC-JWT); the list's own proof, issuer and age are
    checked first (``CredentialError`` / ``statuslist.StatusListError``, and
    ``statuslist.StatusListExpired`` for a list past its ``validUntil`` at
    ``now``: an old copy cannot say whether the credential is revoked today)."""
    url, index = statuslist.index_of(credential.get("credentialStatus"))
    if isinstance(status_list, str):
        listed = verify_any(status_list, public_keys).credential
    else:
        listed = verify_proof(status_list, public_keys).credential
    statuslist.check_current(listed, now)
    if listed.get("id") != url:
        raise statuslist.StatusListError("this is not the status list the credential names")
    if issuer_id(listed) != issuer_id(credential):
        raise statuslist.StatusListError("status list and credential have different issuers")
    subject = listed.get("credentialSubject") or {}
    if subject.get("statusPurpose") != statuslist.PURPOSE:
        raise statuslist.StatusListError("status list is not for revocation")
    return statuslist.is_set(statuslist.decode(subject.get("encodedList")), index)


# --- the PDF ----------------------------------------------------------------

PDF_ATTACHMENTS = ("credential.json", "credential.jwt")


def attach_to_pdf(pdf_bytes: bytes, cert: Certificate) -> bytes:
    """The certificate PDF with the credential's two forms as embedded files,
    so that whoever holds the PDF also holds the Open Badge. Everything else
    (the /Keywords token that ``verify FILE.pdf`` checks, the text) is kept;
    a certificate without its credential yet comes back unchanged."""
    if not (cert.credential_json and cert.credential_jwt):
        return pdf_bytes
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes)))
    writer.add_attachment(PDF_ATTACHMENTS[0], cert.credential_json.encode("utf-8"))
    writer.add_attachment(PDF_ATTACHMENTS[1], cert.credential_jwt.encode("ascii"))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- sharing ----------------------------------------------------------------


def linkedin_url(cert: Certificate, settings: Settings) -> str:
    """LinkedIn's "Add licence or certification" link, pre-filled: name,
    issuing organisation, issue year and month (1-12, from the pass date
    printed on the certificate), the certificate ID and its verify link."""
    passed = datetime.strptime(cert.pass_date, "%Y-%m-%d")
    query = {
        "startTask": "CERTIFICATION_NAME",
        "name": credential_name(cert.language),
        "organizationName": settings.issuer,
        "issueYear": str(passed.year),
        "issueMonth": str(passed.month),
        "certUrl": ids.verify_url(base_url(), cert.id),
        "certId": cert.id,
    }
    return "https://www.linkedin.com/profile/add?" + urlencode(query)
