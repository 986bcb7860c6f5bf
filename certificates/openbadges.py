"""Every certificate is also an Open Badges 3.0 ``OpenBadgeCredential``.

The credential is a W3C Verifiable Credential 2.0 (``validFrom``) whose
subject is an ``AchievementSubject``: the learner's printed name and their
e-mail as a salted SHA-256 ``IdentityObject`` (the plain address never
appears), and the course as an ``Achievement`` with its criteria and the
score as a ``Result``. The issuer is ``did:web`` of ``PUBLIC_URL``; its DID
document (``did_document``) lists every issuer key, rotated ones included,
so credentials signed before a ``rotate-key`` keep verifying.

It is secured twice with the same Ed25519 key, so that any verifier finds a
form it knows:

* ``credential_json``: the credential with an embedded Data Integrity proof,
  cryptosuite ``eddsa-jcs-2022`` (RFC 8785 JSON canonicalisation, no RDF);
  served at ``/credentials/<id>.json``, it is also the download.
* ``credential_jwt``: the same credential as a VC-JWT (VC-JOSE-COSE:
  the JWT claims are the credential; header ``alg: EdDSA``, ``typ:
  vc+jwt``, ``kid`` = the verification method ``did:web:...#<kid>``),
  served at ``/credentials/<id>.jwt``.

Both are made once per certificate (``ensure_credential``) and stored: the
e-mail salt is random, and a credential must not change once handed out.
Revocation is not in the credential but in the status list it points to
(``certificates.statuslist``), which ``signed_status_list`` signs here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
import secrets
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import rfc8785
import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey
from pypdf import PdfReader, PdfWriter
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, update

from academy.models import Certificate, Learner
from academy.settings import Settings, get_settings
from certificates import keys, pdf, statuslist
from certificates.i18n import texts

VC_CONTEXT = "https://www.w3.org/ns/credentials/v2"
OB_CONTEXT = "https://purl.imsglobal.org/spec/ob/v3p0/context-3.0.3.json"
DID_CONTEXTS = [
    "https://www.w3.org/ns/did/v1",
    "https://w3id.org/security/multikey/v1",
    "https://w3id.org/security/suites/jws-2020/v1",
]
CRYPTOSUITE = "eddsa-jcs-2022"
JWT_ALG = "EdDSA"
JWT_TYP = "vc+jwt"
JWT_CLAIMS = ("iss", "jti", "nbf", "exp")
_COMPACT_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")  # JWT mirrors of credential fields, not the credential
MULTIKEY_ED25519 = b"\xed\x01"  # multicodec prefix of an Ed25519 public key
TEXTS = Path(__file__).resolve().parent / "locales" / "ob3"


class CredentialError(ValueError):
    """A credential that must not be trusted; ``kind`` says why (the same
    words as ``verify.STATUSES``)."""

    kind = "bad_signature"


class UnknownKey(CredentialError):
    kind = "unknown_key"


class Malformed(CredentialError):
    kind = "malformed"


@dataclass(frozen=True)
class Verified:
    """A credential whose proof checked out: the credential without its proof,
    the issuer key that signed it and which form carried it."""

    credential: dict[str, Any]
    kid: str
    form: str  # "jwt" or "data-integrity"


# --- reading untrusted JSON -------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise Malformed(f"duplicate key {key[:40]!r}")
        found[key] = value
    return found


def parse_json(text: str | bytes) -> Any:
    """JSON from a file or a token we are asked to trust (review N-10). A key
    given twice is ``Malformed``: Python keeps the last value, other readers
    (and people) the first, so the signature would vouch for one while they
    see the other. Nesting deeper than the interpreter's recursion limit is
    ``Malformed`` too, not a ``RecursionError``."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except Malformed:
        raise
    except RecursionError as e:
        raise Malformed("JSON nested too deeply") from e
    except ValueError as e:
        raise Malformed(f"not JSON: {e}") from e


@contextlib.contextmanager
def _malformed_if_too_deep() -> Iterator[None]:
    """Canonicalising or re-parsing (joserfc) a deeply nested document can
    recurse too; that is a malformed file, never a traceback."""
    try:
        yield
    except RecursionError as e:
        raise Malformed("credential nested too deeply") from e


# --- identifiers ------------------------------------------------------------


def base_url(public_url: str | None = None) -> str:
    return (public_url or get_settings().public_url).rstrip("/")


def did_web(public_url: str) -> str:
    """``did:web`` of a base URL: the host (a port's colon percent-encoded),
    then each path segment after a colon, as the did:web method says."""
    parts = urlsplit(base_url(public_url))
    segments = [quote(parts.netloc, safe="")]
    segments += [quote(s, safe="") for s in parts.path.split("/") if s]
    return "did:web:" + ":".join(segments)


def b58encode(data: bytes) -> str:
    """Bitcoin-alphabet base58 (multibase ``z``), as Multikey and the
    eddsa cryptosuites use; a dozen lines, not worth a dependency."""
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = alphabet[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def b58decode(text: str) -> bytes:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    n = 0
    for c in text:
        i = alphabet.find(c)
        if i < 0:
            raise Malformed("not base58")
        n = n * 58 + i
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def multikey(public: Ed25519PublicKey) -> str:
    """``publicKeyMultibase`` of an Ed25519 key (``z6Mk...``)."""
    return "z" + b58encode(MULTIKEY_ED25519 + keys.raw_public(public))


def jwk(public: Ed25519PublicKey, kid: str) -> dict[str, str]:
    return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(keys.raw_public(public)), "kid": kid}


def did_document(public_url: str, public_keys: dict[str, Ed25519PublicKey]) -> dict[str, Any]:
    """The issuer's DID document: each key twice, as a ``JsonWebKey2020``
    (``#<kid>``, named by VC-JWT headers) and as a ``Multikey``
    (``#z6Mk...``, named by Data Integrity proofs), all of them
    ``assertionMethod`` so that old credentials keep verifying."""
    did = did_web(public_url)
    methods: list[dict[str, Any]] = []
    for kid, public in sorted(public_keys.items()):
        methods.append(
            {
                "id": f"{did}#{kid}",
                "type": "JsonWebKey2020",
                "controller": did,
                "publicKeyJwk": jwk(public, kid),
            }
        )
        methods.append(
            {
                "id": f"{did}#{multikey(public)}",
                "type": "Multikey",
                "controller": did,
                "publicKeyMultibase": multikey(public),
            }
        )
    ids = [m["id"] for m in methods]
    return {
        "@context": DID_CONTEXTS,
        "id": did,
        "verificationMethod": methods,
        "assertionMethod": ids,
        "authentication": ids,
    }


def identity_hash(email: str, salt: str) -> str:
    """OB 3.0 ``IdentityHash``: ``sha256$`` + hex SHA-256 of e-mail then salt.
    The address is lower-cased and trimmed first, as accounts store it, so an
    employer who hashes what the learner tells them gets the same value."""
    data = (email.strip().lower() + salt).encode("utf-8")
    return "sha256$" + hashlib.sha256(data).hexdigest()


# --- the credential ---------------------------------------------------------


@cache
def credential_texts(lang: str) -> dict[str, str]:
    """The credential's own texts in ``lang``; English for a course language that
    has none yet (as ``certificates.i18n.texts``), so a new language never stops
    a certificate from being issued."""
    path = TEXTS / f"{lang}.yaml"
    return _credential_texts(path if path.is_file() else TEXTS / "en.yaml")


@cache
def _credential_texts(path: Path) -> dict[str, str]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


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
    status_index: int,
    settings: Settings,
) -> dict[str, Any]:
    """The unsigned OpenBadgeCredential of a certificate. Pure: the caller
    chooses the salt and the status index (``ensure_credential`` does)."""
    base = base_url(settings.public_url)
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


# --- securing: Data Integrity eddsa-jcs-2022 ---------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _hash_data(document: dict[str, Any], proof_options: dict[str, Any]) -> bytes:
    """SHA-256 of the canonical proof options, then of the canonical
    document (vc-di-eddsa, eddsa-jcs-2022 "Hashing")."""
    return (
        hashlib.sha256(rfc8785.dumps(proof_options)).digest()
        + hashlib.sha256(rfc8785.dumps(document)).digest()
    )


def add_proof(document: dict[str, Any], key: keys.IssuerKey, *, created: str) -> dict[str, Any]:
    """``document`` with a ``DataIntegrityProof`` (eddsa-jcs-2022) by ``key``,
    its verification method the Multikey of the issuer's DID."""
    assert key.private is not None
    issuer = document["issuer"]
    did = issuer["id"] if isinstance(issuer, dict) else issuer
    proof = {
        "type": "DataIntegrityProof",
        "cryptosuite": CRYPTOSUITE,
        "created": created,
        "verificationMethod": f"{did}#{multikey(key.public)}",
        "proofPurpose": "assertionMethod",
        "@context": document["@context"],
    }
    signature = key.private.sign(_hash_data(document, proof))
    return {**document, "proof": {**proof, "proofValue": "z" + b58encode(signature)}}


def _issuer_id(credential: dict[str, Any]) -> str:
    issuer = credential.get("issuer")
    issuer_id = issuer.get("id") if isinstance(issuer, dict) else issuer
    if not isinstance(issuer_id, str):
        raise Malformed("credential has no issuer id")
    return issuer_id


def _trusted(public_keys: dict[str, Ed25519PublicKey], public: Ed25519PublicKey) -> str:
    kid = keys.key_id(public)
    if kid not in public_keys:
        raise UnknownKey(f"signed by unknown key {kid}")
    return kid


def verify_proof(
    secured: dict[str, Any], public_keys: dict[str, Ed25519PublicKey]
) -> Verified:
    """Check an embedded eddsa-jcs-2022 proof against the trusted keys. The
    proof must cover the whole document: extra ``@context`` entries after the
    signed ones (which the spec would allow) are refused as ``Malformed``."""
    proof = secured.get("proof")
    if not isinstance(proof, dict):
        raise Malformed("no single embedded proof")
    if proof.get("type") != "DataIntegrityProof" or proof.get("cryptosuite") != CRYPTOSUITE:
        raise Malformed(f"unsupported proof {proof.get('type')!r}/{proof.get('cryptosuite')!r}")
    if proof.get("proofPurpose") != "assertionMethod":
        raise CredentialError("proof is not for assertion")
    document = {k: v for k, v in secured.items() if k != "proof"}
    options = {k: v for k, v in proof.items() if k != "proofValue"}
    if "@context" in options:
        context = options["@context"]
        doc_context = document.get("@context")
        if (
            not isinstance(context, list)
            or not isinstance(doc_context, list)
            or doc_context[: len(context)] != context
        ):
            raise CredentialError("proof context does not match the document")
        if doc_context != context:
            # The spec lets a holder append contexts the proof does not cover; a JSON-LD
            # reader would apply them (N-10). We refuse a file with anything unsigned.
            raise Malformed("the file holds unsigned data: @context entries the proof does not cover")
    method = proof.get("verificationMethod")
    did, _, fragment = str(method).partition("#")
    if did != _issuer_id(document):
        raise CredentialError("proof is not by the credential's issuer")
    try:
        raw = b58decode(fragment[1:]) if fragment.startswith("z") else b""
        if not raw.startswith(MULTIKEY_ED25519) or len(raw) != 34:
            raise Malformed("verification method is not an Ed25519 Multikey")
        public = Ed25519PublicKey.from_public_bytes(raw[2:])
        value = str(proof.get("proofValue", ""))
        signature = b58decode(value[1:]) if value.startswith("z") else b""
    except ValueError as e:
        raise Malformed(str(e)) from e
    kid = _trusted(public_keys, public)
    try:
        with _malformed_if_too_deep():
            data = _hash_data(document, options)
    except Malformed:
        raise
    except ValueError as e:  # NaN, huge integers: JSON that has no canonical form
        raise Malformed(f"credential cannot be canonicalised: {e}") from e
    try:
        public_keys[kid].verify(signature, data)
    except InvalidSignature as e:
        raise CredentialError("proof does not match the credential") from e
    # Exactly what was signed: the whole file but its proofValue.
    return Verified(credential=document, kid=kid, form="data-integrity")


# --- securing: VC-JWT (joserfc signs; tests verify with PyJWT too) ----------


@contextlib.contextmanager
def _quiet_eddsa() -> Iterator[None]:
    """joserfc warns that RFC 9864 deprecates the name ``EdDSA`` in favour of
    ``Ed25519``; the VC-JWT and Open Badges verifiers in use today know only
    ``EdDSA``, so we keep it, knowingly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="EdDSA is deprecated")
        yield


def sign_jwt(credential: dict[str, Any], key: keys.IssuerKey) -> str:
    """The compact VC-JWT of ``credential``: its claims are the credential
    itself plus ``iss``/``jti``/``nbf`` (and ``exp`` for a credential with
    ``validUntil``, such as the status list) mirroring issuer, id and validity
    for plain JWT libraries."""
    assert key.private is not None
    did = _issuer_id(credential)
    claims = {
        **credential,
        "iss": did,
        "jti": credential["id"],
        "nbf": _epoch(credential["validFrom"]),
    }
    if "validUntil" in credential:
        claims["exp"] = _epoch(credential["validUntil"])
    header = {"alg": JWT_ALG, "typ": JWT_TYP, "kid": f"{did}#{key.kid}"}
    okp = OKPKey.import_key(_private_pem(key))
    payload = json.dumps(claims, ensure_ascii=False).encode("utf-8")
    with _quiet_eddsa():
        return jws.serialize_compact(header, payload, okp, algorithms=[JWT_ALG])


def _epoch(timestamp: str) -> int:
    return int(datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def _private_pem(key: keys.IssuerKey) -> bytes:
    assert key.private is not None
    return key.private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def verify_jwt(token: str, public_keys: dict[str, Ed25519PublicKey]) -> Verified:
    """Check a compact VC-JWT: header (EdDSA, vc+jwt, a kid of the issuer's
    DID), signature by a trusted key, and claims that agree with the credential."""
    token = token.strip()
    if not _COMPACT_JWT.fullmatch(token):  # three base64url parts and nothing else
        raise Malformed("not a compact JWT")
    try:
        header_bytes = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    except ValueError as e:
        raise Malformed("not a compact JWT") from e
    header = parse_json(header_bytes)
    if not isinstance(header, dict):
        raise Malformed("JWT header is not a JSON object")
    if header.get("alg") != JWT_ALG:
        raise Malformed(f"JWT algorithm {header.get('alg')!r} is not {JWT_ALG}")
    if header.get("typ") != JWT_TYP:
        raise Malformed(f"JWT type {header.get('typ')!r} is not {JWT_TYP}")
    did, _, kid = str(header.get("kid", "")).partition("#")
    public = public_keys.get(kid)
    if public is None:
        raise UnknownKey(f"signed by unknown key {kid!r}")
    try:
        with _quiet_eddsa(), _malformed_if_too_deep():
            obj = jws.deserialize_compact(
                token, OKPKey.import_key(keys.public_pem(public)), algorithms=[JWT_ALG]
            )
    except Malformed:
        raise
    except (JoseError, ValueError) as e:
        raise CredentialError(f"JWT signature does not match: {e}") from e
    claims = parse_json(obj.payload)
    if not isinstance(claims, dict) or _issuer_id(claims) != did or claims.get("iss") != did:
        raise CredentialError("JWT key is not the credential issuer's")
    if claims.get("jti") != claims.get("id"):
        raise CredentialError("JWT id does not match the credential")
    credential = {k: v for k, v in claims.items() if k not in JWT_CLAIMS}
    return Verified(credential=credential, kid=kid, form="jwt")


def verify_any(text: str | bytes, public_keys: dict[str, Ed25519PublicKey]) -> Verified:
    """A credential file as downloaded: JSON with an embedded proof, a JSON
    ``EnvelopedVerifiableCredential`` around a VC-JWT, or a bare VC-JWT; UTF-8
    with or without a byte order mark.

    Only a file that is all signed verifies: duplicate keys, ``@context``
    entries the proof does not cover, fields beside the JWT in an envelope or
    text around a JWT are ``Malformed`` (review N-10), never "valid" with
    unsigned data a reader might take for part of the credential. So is
    nesting too deep to read."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise Malformed("not UTF-8 text") from e
    text = text.removeprefix("\ufeff").strip()
    with _malformed_if_too_deep():
        if not text.startswith("{"):
            return verify_jwt(text, public_keys)
        document = parse_json(text)
        if not isinstance(document, dict):
            raise Malformed("not a JSON object")
        if document.get("type") == "EnvelopedVerifiableCredential":
            return verify_jwt(_enveloped_jwt(document), public_keys)
        return verify_proof(document, public_keys)


def _enveloped_jwt(document: dict[str, Any]) -> str:
    """The VC-JWT inside an ``EnvelopedVerifiableCredential``, which must hold
    nothing else: the JWT is all that is signed."""
    extra = sorted(set(document) - {"@context", "type", "id"})
    if extra:
        raise Malformed(f"the file holds unsigned data beside the enveloped JWT: {', '.join(extra)[:200]}")
    if document.get("@context", VC_CONTEXT) not in (VC_CONTEXT, [VC_CONTEXT]):
        raise Malformed("the file holds unsigned data: the envelope's @context is not VC 2.0's alone")
    envelope = str(document.get("id", ""))
    prefix = "data:application/vc+jwt,"
    if not envelope.startswith(prefix):
        raise Malformed("envelope does not hold a VC-JWT")
    return envelope[len(prefix) :]


def unverified_credential(text: str) -> dict[str, Any]:
    """The credential in a file *without* checking anything: only to learn
    which issuer to ask for keys. Never show or trust what this returns."""
    text = text.removeprefix("\ufeff").strip()
    try:
        if text.startswith("{"):
            document = parse_json(text)
            envelope = str(document.get("id", ""))
            if document.get("type") != "EnvelopedVerifiableCredential":
                return document
            text = envelope.partition(",")[2]
        payload = text.split(".")[1]
        return parse_json(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except Malformed:
        raise
    except (ValueError, IndexError, AttributeError) as e:
        raise Malformed("not a credential") from e


def keys_from_did_document(document: dict[str, Any], did: str) -> dict[str, Ed25519PublicKey]:
    """The Ed25519 assertion keys a DID document lists (JWK or Multikey), by kid."""
    if not isinstance(document, dict) or document.get("id") != did:
        return {}
    listed = document.get("assertionMethod")
    # References only (strings): an embedded method object is not one of ours.
    assertion = {m for m in listed if isinstance(m, str)} if isinstance(listed, list) else set()
    found: dict[str, Ed25519PublicKey] = {}
    for method in document.get("verificationMethod") or []:
        if not isinstance(method, dict) or method.get("id") not in assertion:
            continue
        try:
            if "publicKeyMultibase" in method:
                raw = b58decode(str(method["publicKeyMultibase"])[1:])
                if not raw.startswith(MULTIKEY_ED25519):
                    continue
                raw = raw[2:]
            else:
                key = method.get("publicKeyJwk") or {}
                if not isinstance(key, dict) or key.get("kty") != "OKP" or key.get("crv") != "Ed25519":
                    continue
                x = str(key["x"])
                raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
            public = Ed25519PublicKey.from_public_bytes(raw)
        except (ValueError, KeyError):
            continue
        found[keys.key_id(public)] = public
    return found


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
        "issuer_did": _issuer_id(credential),
    }


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
            status_index=index,
            settings=settings,
        )
        key = keys.active_key()
        secured = add_proof(credential, key, created=credential["validFrom"])
        claim = (
            update(Certificate)
            .where(col(Certificate.id) == cert.id, col(Certificate.credential_json).is_(None))
            .values(status_index=index, credential_json=json.dumps(secured, ensure_ascii=False, indent=2),
                    credential_jwt=sign_jwt(credential, key))
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


def signed_status_list(*, session: Session, now: datetime | None = None) -> dict[str, Any]:
    """The status list credential as it stands, signed with the active key;
    ``validUntil`` is ``statuslist.VALID_FOR`` after ``now``."""
    settings = get_settings()
    base = base_url(settings.public_url)
    now = now or datetime.now(UTC)
    document = statuslist.unsigned_list_credential(
        session=session, public_url=base, issuer=did_web(base), now=now
    )
    return add_proof(document, keys.active_key(), created=document["validFrom"])


def status_list_jwt(document: dict[str, Any]) -> str:
    """The same status list as a VC-JWT (for verifiers that want JOSE)."""
    return sign_jwt({k: v for k, v in document.items() if k != "proof"}, keys.active_key())


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
    if _issuer_id(listed) != _issuer_id(credential):
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
        "certUrl": pdf.verify_url(settings.public_url, cert.id),
        "certId": cert.id,
    }
    return "https://www.linkedin.com/profile/add?" + urlencode(query)
