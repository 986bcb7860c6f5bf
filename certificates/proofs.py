"""Securing a credential and checking one: the issuer's ``did:web`` and DID
document, the Data Integrity proofs, the VC-JWT, and reading untrusted files.

A credential is secured twice with the same Ed25519 key:

* embedded Data Integrity proofs (``add_proof`` / ``verify_proof``), always
  as a list (a proof set; the Open Badges 3.0 JSON schema requires the list):

  - ``eddsa-rdfc-2022``, the one Linked Data proof 1EdTech's Open Badges 3.0
    certification accepts: the document and the proof options are each
    canonicalised as RDF (RDFC-1.0, with the bundled contexts only:
    ``certificates.linkeddata``), hashed with SHA-256 and signed. Every new
    credential carries this proof alone, so that a verifier that knows only
    it (a certified Open Badges displayer) meets nothing else;
  - ``eddsa-jcs-2022`` (RFC 8785 JSON canonicalisation, no RDF): the proof of
    every credential issued before, which are never re-signed and keep
    verifying, and the second proof of the status list, so that a verifier set
    up for those older credentials can still check their revocation;

* a VC-JWT as Open Badges 3.0 section 8.2 says: header ``alg: EdDSA``,
  ``typ: JWT``, ``kid`` = the verification method ``did:web:...#<kid>``; the
  payload is the credential *with* its embedded proofs (section 8.2.4: "add
  the embedded proofs prior to creating the JWT Payload") plus ``iss``,
  ``jti``, ``nbf``, ``sub`` (the subject's ``id``) and ``exp`` (only with a
  ``validUntil``): ``sign_jwt`` / ``verify_jwt``. Older VC-JWTs (``typ:
  vc+jwt``, no ``sub``, no proof inside) keep verifying.

The issuer is ``did:web`` of the public address (``base_url``); its DID document
(``did_document``) lists every issuer key, rotated ones included, so
credentials signed before a ``rotate-key`` keep verifying. ``verify_any``
checks a file as downloaded, whichever form it holds, and trusts only a file
that is all signed (review N-10): every proof in it must verify, and for RDF
proofs nothing may be in the JSON that the RDF leaves out. What the
credential says is ``certificates.openbadges``'s business; this module knows
only how it is signed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from certificates import address, keys, linkeddata
from certificates.linkeddata import VC_CONTEXT
from certificates.signing import b64url

DID_CONTEXTS = [
    "https://www.w3.org/ns/did/v1",
    "https://w3id.org/security/multikey/v1",
    "https://w3id.org/security/suites/jws-2020/v1",
]
RDFC = "eddsa-rdfc-2022"
JCS = "eddsa-jcs-2022"
CRYPTOSUITES = (RDFC, JCS)
JWT_ALG = "EdDSA"
JWT_TYP = "JWT"  # Open Badges 3.0 section 8.2.3: 'If present, MUST be set to "JWT"'
JWT_TYPES = (JWT_TYP, "vc+jwt")  # vc+jwt: VC-JWTs issued before issue #38
JWT_CLAIMS = ("iss", "jti", "nbf", "exp", "sub")
_COMPACT_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")  # JWT mirrors of credential fields, not the credential
MULTIKEY_ED25519 = b"\xed\x01"  # multicodec prefix of an Ed25519 public key
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # Bitcoin base58 alphabet


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
    """A credential whose proofs checked out: the credential without its proofs
    (and, from a VC-JWT, without the JWT claims), the issuer key that signed
    it, which form carried it and the embedded proofs' cryptosuites."""

    credential: dict[str, Any]
    kid: str
    form: str  # "jwt" or "data-integrity"
    suites: tuple[str, ...] = ()  # the cryptosuites of the embedded proofs it carried


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
    """``public_url`` without its trailing slash; by default the academy's public address
    (``certificates.address.public_url``: PUBLIC_URL, or the address the app serves on)."""
    return (public_url or address.public_url()).rstrip("/")


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
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def b58decode(text: str) -> bytes:
    n = 0
    for c in text:
        i = _B58.find(c)
        if i < 0:
            raise Malformed("not base58")
        n = n * 58 + i
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def multikey(public: Ed25519PublicKey) -> str:
    """``publicKeyMultibase`` of an Ed25519 key (``z6Mk...``)."""
    return "z" + b58encode(MULTIKEY_ED25519 + keys.raw_public(public))


def jwk(public: Ed25519PublicKey, kid: str) -> dict[str, str]:
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(keys.raw_public(public)), "kid": kid}


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


# --- securing: Data Integrity (eddsa-rdfc-2022, eddsa-jcs-2022) ------------


def _hash_data(document: dict[str, Any], options: dict[str, Any]) -> bytes:
    """SHA-256 of the canonical proof options, then of the canonical document
    (vc-di-eddsa, "Hashing" of each cryptosuite). For eddsa-rdfc-2022 the
    options are read with the document's ``@context`` (its "Proof
    Configuration"), whether or not the proof repeats it."""
    if options.get("cryptosuite") == JCS:
        return hashlib.sha256(rfc8785.dumps(options)).digest() + hashlib.sha256(rfc8785.dumps(document)).digest()
    config = {**options, "@context": document.get("@context")}
    try:
        return (
            hashlib.sha256(linkeddata.canonical_nquads(config).encode("utf-8")).digest()
            + hashlib.sha256(linkeddata.canonical_nquads(document).encode("utf-8")).digest()
        )
    except linkeddata.LinkedDataError as e:
        raise Malformed(f"credential cannot be canonicalised as RDF: {e}") from e


def make_proof(
    document: dict[str, Any], key: keys.IssuerKey, *, created: str, cryptosuite: str = RDFC
) -> dict[str, Any]:
    """One ``DataIntegrityProof`` of ``document`` (without its ``proof``) by
    ``key``, its verification method the Multikey of the issuer's DID. An
    eddsa-jcs-2022 proof carries the document's ``@context`` (that suite signs
    the proof's JSON as it stands); an eddsa-rdfc-2022 one does not need to."""
    assert key.private is not None and cryptosuite in CRYPTOSUITES
    options: dict[str, Any] = {
        "type": "DataIntegrityProof",
        "cryptosuite": cryptosuite,
        "created": created,
        "verificationMethod": f"{issuer_id(document)}#{multikey(key.public)}",
        "proofPurpose": "assertionMethod",
    }
    if cryptosuite == JCS:
        options["@context"] = document["@context"]
    signature = key.private.sign(_hash_data(document, options))
    return {**options, "proofValue": "z" + b58encode(signature)}


def add_proof(
    document: dict[str, Any], key: keys.IssuerKey, *, created: str, cryptosuites: tuple[str, ...] = (RDFC,)
) -> dict[str, Any]:
    """``document`` with a proof set: one proof per cryptosuite, each over the
    document without proofs (Data Integrity "proof sets", not chains)."""
    return {**document, "proof": [make_proof(document, key, created=created, cryptosuite=c) for c in cryptosuites]}


def issuer_id(credential: dict[str, Any]) -> str:
    """The credential's issuer DID (``issuer`` or ``issuer.id``), or ``Malformed``."""
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
    """Check the embedded proofs against the trusted keys: one proof (older
    credentials) or a proof set, *every* proof of which must verify, each by
    the credential's issuer (eddsa-rdfc-2022 or eddsa-jcs-2022; a chain, with
    ``previousProof``, is refused). A proof must cover the whole document:
    ``@context`` entries beyond what a proof names (which the spec would let a
    holder append) are refused as ``Malformed``, and so is anything an
    eddsa-rdfc-2022 proof would leave unsigned (``linkeddata``)."""
    listed = secured.get("proof")
    proofs = [listed] if isinstance(listed, dict) else listed
    if not isinstance(proofs, list) or not proofs or not all(isinstance(p, dict) for p in proofs):
        raise Malformed("no embedded proof")
    document = {k: v for k, v in secured.items() if k != "proof"}
    kids = [_verify_one(document, proof, public_keys) for proof in proofs]
    suites = tuple(str(p["cryptosuite"]) for p in proofs)
    # Exactly what was signed: the whole file but its proofs.
    return Verified(credential=document, kid=kids[0], form="data-integrity", suites=suites)


def _verify_one(document: dict[str, Any], proof: dict[str, Any], public_keys: dict[str, Ed25519PublicKey]) -> str:
    """The kid of the trusted key that made ``proof`` over ``document``."""
    if proof.get("type") != "DataIntegrityProof" or proof.get("cryptosuite") not in CRYPTOSUITES:
        raise Malformed(f"unsupported proof {str(proof.get('type'))[:40]!r}/{str(proof.get('cryptosuite'))[:40]!r}")
    if "previousProof" in proof:
        raise Malformed("proof chains are not supported")
    if proof.get("proofPurpose") != "assertionMethod":
        raise CredentialError("proof is not for assertion")
    options = {k: v for k, v in proof.items() if k != "proofValue"}
    if proof["cryptosuite"] == RDFC and document.get("@context") not in linkeddata.CONTEXT_LISTS:
        # Any other context (one appended, one inline) could change what the signed RDF
        # means to a reader, and is not fetched anyway (N-10).
        raise Malformed("the file holds unsigned data: @context is not the bundled contexts alone")
    if "@context" in options or proof["cryptosuite"] == JCS:
        context = options.get("@context")
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
    if did != issuer_id(document):
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
    return kid


# --- securing: VC-JWT (joserfc signs; tests verify with PyJWT too) ----------


@contextlib.contextmanager
def _quiet_eddsa() -> Iterator[None]:
    """joserfc warns that RFC 9864 deprecates the name ``EdDSA`` in favour of
    ``Ed25519``; the VC-JWT and Open Badges verifiers in use today know only
    ``EdDSA``, so we keep it, knowingly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="EdDSA is deprecated")
        yield


def sign_jwt(secured: dict[str, Any], key: keys.IssuerKey) -> str:
    """The compact VC-JWT of ``secured`` (a credential with its embedded
    proofs, which Open Badges 3.0 section 8.2.4 says to add first): its claims
    are the credential itself plus the registered claims that section maps:
    ``iss`` (issuer id), ``jti`` (id), ``nbf`` (validFrom), ``sub``
    (credentialSubject id, when it has one) and ``exp`` (validUntil, when it
    has one, such as the status list)."""
    assert key.private is not None
    did = issuer_id(secured)
    claims = {
        **secured,
        "iss": did,
        "jti": secured["id"],
        "nbf": _epoch(secured["validFrom"]),
    }
    subject = secured.get("credentialSubject")
    if isinstance(subject, dict) and "id" in subject:
        claims["sub"] = subject["id"]
    if "validUntil" in secured:
        claims["exp"] = _epoch(secured["validUntil"])
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
    """Check a compact VC-JWT: header (EdDSA, typ JWT or, before issue #38,
    vc+jwt, a kid of the issuer's DID), signature by a trusted key, claims
    that agree with the credential (Open Badges 3.0 section 8.2.6.1: iss, jti,
    nbf, sub, exp) and the embedded proofs in the payload, if any, which must
    verify as well: a file is trusted only when all of it is."""
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
    if header.get("typ") not in JWT_TYPES:
        raise Malformed(f"JWT type {str(header.get('typ'))[:40]!r} is not {JWT_TYP}")
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
    if not isinstance(claims, dict) or issuer_id(claims) != did or claims.get("iss") != did:
        raise CredentialError("JWT key is not the credential issuer's")
    _check_claims(claims)
    secured = {k: v for k, v in claims.items() if k not in JWT_CLAIMS}
    if "proof" not in secured:  # a VC-JWT from before issue #38
        return Verified(credential=secured, kid=kid, form="jwt")
    inner = verify_proof(secured, public_keys)
    return Verified(credential=inner.credential, kid=kid, form="jwt", suites=inner.suites)


def _check_claims(claims: dict[str, Any]) -> None:
    """The registered claims must say what the credential says (section 8.2.6.1);
    ``sub`` and ``nbf`` are absent only from VC-JWTs made before issue #38."""
    if claims.get("jti") != claims.get("id"):
        raise CredentialError("JWT id does not match the credential")
    subject = claims.get("credentialSubject")
    subject_id = subject.get("id") if isinstance(subject, dict) else None
    if claims.get("sub") != subject_id:
        raise CredentialError("JWT sub does not match the credential subject")
    for claim, field in (("nbf", "validFrom"), ("exp", "validUntil")):
        if claim in claims or field in claims:
            try:
                agree = claims.get(claim) == _epoch(str(claims.get(field)))
            except ValueError:
                agree = False
            if not agree:
                raise CredentialError(f"JWT {claim} does not match the credential's {field}")


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

