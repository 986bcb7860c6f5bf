"""Open Badges 3.0 credentials: content, both proofs (checked also by PyJWT,
a JOSE implementation we did not write), tampering, key rotation, the
revocation list, the HTTP routes, ``verify FILE.json`` and the LinkedIn link."""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import re
import shutil
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jsonschema
import jwt as pyjwt
import pyoxigraph as ox
import pytest
from pypdf import PdfReader
from sqlmodel import Session
from starlette.applications import Starlette
from starlette.testclient import TestClient

from academy.models import Certificate, Learner, QuizAttempt
from academy.settings import get_settings
from certificates import (
    ids,
    keys,
    linkeddata,
    openbadges,
    pdf,
    proofs,
    routes,
    statuslist,
    store,
    verify,
)
from certificates.__main__ import did_web_url
from certificates.__main__ import main as cli_main
from tests import independentdi
from tests.exercisepass import pass_required_exercises

SCHEMAS = sorted((Path(__file__).resolve().parent.parent / "certificates" / "schema").glob("*.json"))
OURS = next(p for p in SCHEMAS if p.name == "openbadgecredential.schema.json")
EMAIL = "Zoe.Odegard@Example.org"
PUBLIC_URL = "https://academy.example/"


@pytest.fixture(autouse=True)
def settings(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.setenv("PUBLIC_URL", PUBLIC_URL)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def issue(session: Session, *, lang="en", name="Zoë Ødegård", email: str | None = EMAIL, score=92.5):
    learner_id = attempt_id = None
    if email is not None:
        learner = Learner(email=email.lower(), display_name=name, password_hash="x")
        session.add(learner)
        session.commit()
        pass_required_exercises(session, learner.id)  # the certificate's exercises (test_exercises_store)
        attempt = QuizAttempt(
            learner_id=learner.id, seed=1, status="finished", score=score, passed=True,
            finished_at=datetime(2025, 11, 30, 12, 0, tzinfo=UTC),
        )
        session.add(attempt)
        session.commit()
        learner_id, attempt_id = learner.id, attempt.id
    cert = store.issue_certificate(
        session=session, learner_id=learner_id, attempt_id=attempt_id, name=name, lang=lang,
        score=score, pass_date="2025-11-30",
    )
    return openbadges.ensure_credential(session=session, cert=cert)


def trusted():
    return keys.local_public_keys()


def jwt_parts(token: str) -> tuple[dict, dict]:
    head, body, _ = token.split(".")
    decode = lambda s: json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))  # noqa: E731
    return decode(head), decode(body)


def b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def pyjwt_verify(token: str, require: list[str] | None = None, public_keys=None) -> dict:
    """Verify a VC-JWT the way a third party would: find the header's kid in
    our DID document and let PyJWT check signature and claims."""
    document = proofs.did_document(PUBLIC_URL, trusted() if public_keys is None else public_keys)
    kid = pyjwt.get_unverified_header(token)["kid"]
    method = next(m for m in document["verificationMethod"] if m["id"] == kid)
    assert kid in document["assertionMethod"]
    key = pyjwt.PyJWK(method["publicKeyJwk"], algorithm="EdDSA")
    return pyjwt.decode(token, key, algorithms=["EdDSA"], options={"require": require or ["iss", "jti", "nbf"]})


def independent_di_verify(secured: dict) -> list[str]:
    """Data Integrity verification sharing no code with ``certificates``
    (``tests/independentdi.py``: RFC 8785, and Oxigraph's JSON-LD and RDFC-1.0):
    raises if any proof does not hold."""
    return independentdi.verify(secured)


# --- content ----------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_credential_is_an_open_badge_with_a_salted_email_identity(session, lang, settings):
    cert = issue(session, lang=lang)
    credential = json.loads(cert.credential_json)
    assert credential["@context"][:2] == [
        "https://www.w3.org/ns/credentials/v2",
        "https://purl.imsglobal.org/spec/ob/v3p0/context-3.0.3.json",
    ]
    assert credential["type"] == ["VerifiableCredential", "OpenBadgeCredential"]
    assert credential["issuer"]["id"] == "did:web:academy.example"
    assert credential["validFrom"].endswith("Z") and credential["awardedDate"] == "2025-11-30T00:00:00Z"
    subject = credential["credentialSubject"]
    assert subject["type"] == ["AchievementSubject"]
    hashed = next(i for i in subject["identifier"] if i["identityType"] == "emailAddress")
    assert hashed["hashed"] is True
    expected = hashlib.sha256((EMAIL.lower() + hashed["salt"]).encode()).hexdigest()
    assert hashed["identityHash"] == f"sha256${expected}"
    achievement = subject["achievement"]
    assert achievement["criteria"]["narrative"] and str(settings.quiz_pass_percent) in achievement["criteria"]["narrative"]
    assert subject["result"][0]["value"] == "92.5"
    assert credential["credentialStatus"]["statusListIndex"] == str(cert.status_index)
    # The address never appears, in any case, in either form.
    _, claims = jwt_parts(cert.credential_jwt)
    for text in (cert.credential_json, json.dumps(claims)):
        assert EMAIL.lower() not in text.lower()
        assert "@example.org" not in text.lower()


def test_every_language_has_the_credential_texts_with_the_same_placeholders():
    import string

    from certificates.i18n import languages

    def shape(lang):
        found = openbadges.credential_texts(lang)
        return {k: sorted(f for _, f, _, _ in string.Formatter().parse(v) if f) for k, v in found.items()}

    assert shape("en") == {"credential_name": ["course"], "achievement_description": [], "criteria": ["pass_percent"],
                           "criteria_exercises": ["exercises"], "criteria_both": ["exercises", "quiz"]}
    for lang in languages():
        assert shape(lang) == shape("en"), lang
        assert all(openbadges.credential_texts(lang).values())


def test_two_credentials_of_one_learner_use_different_salts(session):
    """Otherwise two of a learner's credentials could be linked by their hash."""
    a = issue(session, email=EMAIL)
    # A second row for the same learner, made directly: a learner holds several
    # certificates over time (one active at once: this one is an earlier, revoked one).
    fields = a.model_dump(exclude={"status_index", "credential_json", "credential_jwt"})
    b = Certificate(**{**fields, "id": ids.new_id(), "revoked_at": datetime(2025, 12, 1, tzinfo=UTC),
                       "revoked_reason": "reissued"})
    session.add(b)
    session.commit()
    b = openbadges.ensure_credential(session=session, cert=b)
    ha, hb = (
        next(i for i in json.loads(c.credential_json)["credentialSubject"]["identifier"] if i["hashed"])
        for c in (a, b)
    )
    assert ha["salt"] != hb["salt"] and ha["identityHash"] != hb["identityHash"]
    assert a.status_index != b.status_index


@pytest.mark.parametrize("schema_path", SCHEMAS, ids=lambda p: p.name)
@pytest.mark.parametrize("lang,email", [("en", EMAIL), ("zh", EMAIL), ("nl", None)])
def test_every_credential_validates_against_the_schema(session, schema_path, lang, email):
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    cert = issue(session, lang=lang, email=email)
    _, claims = jwt_parts(cert.credential_jwt)
    for credential in (json.loads(cert.credential_json), claims):
        validator.validate(credential)


def test_the_schema_rejects_what_the_standard_forbids(session):
    """The schema check can fail: a plain e-mail, VC 1.1 dates, a missing criteria."""
    schema = json.loads(OURS.read_text(encoding="utf-8"))
    good = json.loads(issue(session).credential_json)
    jsonschema.validate(good, schema)
    plain = copy.deepcopy(good)
    plain["credentialSubject"]["identifier"].append(
        {"type": "IdentityObject", "identityType": "emailAddress", "hashed": False, "identityHash": EMAIL}
    )
    old = {**copy.deepcopy(good), "issuanceDate": good["validFrom"]}
    no_criteria = copy.deepcopy(good)
    del no_criteria["credentialSubject"]["achievement"]["criteria"]
    for bad in (plain, old, no_criteria):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_credential_is_made_once(session):
    cert = issue(session)
    before = (cert.credential_json, cert.credential_jwt, cert.status_index)
    keys.rotate_key()
    again = openbadges.ensure_credential(session=session, cert=cert)
    assert (again.credential_json, again.credential_jwt, again.status_index) == before


def test_migration_0003_adds_and_removes_the_columns(engine):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from academy.settings import ROOT

    def columns():
        return {c["name"] for c in inspect(engine).get_columns("certificate")}

    added = {"status_index", "credential_json", "credential_jwt"}
    assert added <= columns()
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003-1")
    assert not added & columns()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert added <= columns()


# --- proofs -----------------------------------------------------------------


def ob30_strict_jwt(token: str) -> dict:
    """Open Badges 3.0 section 8.2 applied to the letter, with PyJWT for the
    signature: the JOSE header holds only the headers 8.2.3 allows and ``typ``
    is "JWT"; ``iss``, ``jti``, ``nbf`` and ``sub`` are present and equal the
    credential's issuer.id, id, validFrom and credentialSubject.id (8.2.6.1),
    ``exp`` only with a validUntil; the embedded proofs are in the payload
    (8.2.4) and hold. Returns the payload."""
    header = pyjwt.get_unverified_header(token)
    assert set(header) <= {"alg", "kid", "jwk", "typ"}, header  # "Additional JOSE Headers are NOT allowed"
    assert header.get("typ", "JWT") == "JWT"
    claims = pyjwt_verify(token, require=["iss", "jti", "nbf", "sub"])
    assert claims["iss"] == claims["issuer"]["id"]
    assert claims["jti"] == claims["id"]
    assert claims["sub"] == claims["credentialSubject"]["id"]
    assert datetime.fromtimestamp(claims["nbf"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ") == claims["validFrom"]
    assert ("exp" in claims) == ("validUntil" in claims)
    assert independent_di_verify({k: v for k, v in claims.items() if k not in ("iss", "jti", "nbf", "sub", "exp")})
    return claims


def test_both_forms_verify_here_and_elsewhere(session):
    cert = issue(session)
    secured = json.loads(cert.credential_json)
    ours_json = proofs.verify_any(cert.credential_json, trusted())
    ours_jwt = proofs.verify_any(cert.credential_jwt, trusted())
    assert ours_json.form == "data-integrity" and ours_jwt.form == "jwt"
    assert ours_json.suites == ours_jwt.suites == ("eddsa-rdfc-2022",)
    assert ours_json.credential == ours_jwt.credential == {k: v for k, v in secured.items() if k != "proof"}
    assert independent_di_verify(secured) == ["eddsa-rdfc-2022"]
    claims = ob30_strict_jwt(cert.credential_jwt)
    # The payload is the JSON form, proof and all, plus the registered claims.
    assert {k: v for k, v in claims.items() if k not in ("iss", "jti", "nbf", "sub")} == secured
    header = pyjwt.get_unverified_header(cert.credential_jwt)
    assert header == {"alg": "EdDSA", "typ": "JWT", "kid": f"did:web:academy.example#{cert.key_id}"}


def test_the_subject_id_is_random_and_says_nothing_about_the_learner(session):
    """The VC-JWT's sub (Open Badges 3.0 8.2.4.1) is the subject's id: a random
    urn:uuid per credential, not the e-mail, the name or anything derived from them."""
    cert = issue(session)
    subject_id = json.loads(cert.credential_json)["credentialSubject"]["id"]
    assert re.fullmatch(r"urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", subject_id)
    assert jwt_parts(cert.credential_jwt)[1]["sub"] == subject_id
    other = issue(session, email="other@example.org", name="Zoë Ødegård")
    assert json.loads(other.credential_json)["credentialSubject"]["id"] != subject_id


def test_bundled_contexts_are_the_published_ones():
    """The contexts the eddsa-rdfc-2022 proof is computed with are files in the
    repository (certificates/contexts/README.md says where from): the VC 2.0 one
    has the SHA-256 the VC 2.0 Recommendation publishes, the Open Badges one that
    of 1EdTech's context-3.0.3.json. Nothing else is ever loaded."""
    digests = {
        linkeddata.VC_CONTEXT: "59955ced6697d61e03f2b2556febe5308ab16842846f5b586d7f1f7adec92734",
        linkeddata.OB_CONTEXT: "ef2fa9c7846dce233cc166b43639027278be4ee44f00bb1d45c75de2dd0cd761",
    }
    for url, name in linkeddata.BUNDLED.items():
        assert hashlib.sha256((linkeddata.CONTEXTS_DIR / name).read_bytes()).hexdigest() == digests[url], name
    assert linkeddata.load_document(linkeddata.OB_CONTEXT)["document"]["@context"]["@protected"] is True
    for url in ("https://www.w3.org/2018/credentials/v1", "https://evil.example/ctx.json", "file:///etc/passwd"):
        with pytest.raises(linkeddata.LinkedDataError, match="not one of the bundled"):
            linkeddata.load_document(url)


@pytest.mark.parametrize("change,why", [
    (lambda c: c.update(nickname="Zoë"), "not defined by the contexts"),
    (lambda c: c["credentialSubject"].update({"@comment": "x"}), "keyword"),
    (lambda c: c.update(description=None), "null"),
    (lambda c: c["credentialSubject"]["achievement"].update(id="achievements/x"), "not an absolute IRI"),
    (lambda c: c["credentialSubject"].update(type=["AchievementSubject", "Extra"]), "not defined by the contexts"),
    (lambda c: c["credentialSubject"]["achievement"].update({"@context": {"x": "https://evil.example/x"}}),
     "keyword"),
    (lambda c: c.update(name="Zo\x07ë"), "control character"),
])
def test_what_json_ld_would_drop_is_refused_not_left_unsigned(session, change, why):
    """An undefined term, a null or a relative IRI would vanish on the way to RDF:
    an eddsa-rdfc-2022 proof would not cover it, yet a reader of the JSON sees it.
    Such a file is refused when verified (as Digital Bazaar's safe mode does), and
    such a document is never signed."""
    secured = json.loads(issue(session).credential_json)
    change(secured)
    with pytest.raises(proofs.Malformed, match=why):
        proofs.verify_any(json.dumps(secured), trusted())
    with pytest.raises(proofs.Malformed, match=why):
        proofs.add_proof({k: v for k, v in secured.items() if k != "proof"}, keys.active_key(),
                         created=secured["validFrom"])


def test_blank_nodes_that_would_take_hours_to_canonicalise_are_refused():
    """RDFC-1.0 is factorial in blank nodes told apart only by their place: 8 of
    them all linked to each other is ~1.5 KB of N-Quads (7 took PyLD 19 s here,
    each one more multiplies that). The canonicaliser has a budget and refuses it;
    a small symmetric graph within the budget comes out as Oxigraph's does."""
    from pyld import jsonld

    nodes = [f"_:b{i}" for i in range(8)]
    clique = "".join(f"{a} <http://e.example/p> {b} .\n" for a in nodes for b in nodes if a != b)
    with pytest.raises(linkeddata.LinkedDataError, match="too much work"):
        linkeddata.canonicalize_dataset(jsonld.JsonLdProcessor.parse_nquads(clique))
    ring = "_:a <http://e.example/p> _:b .\n_:b <http://e.example/p> _:c .\n_:c <http://e.example/p> _:a .\n"
    dataset = ox.Dataset(ox.parse(ring, ox.RdfFormat.N_QUADS))
    dataset.canonicalize(ox.CanonicalizationAlgorithm.RDFC_1_0)
    theirs = sorted(ox.serialize(dataset, format=ox.RdfFormat.N_QUADS).decode().splitlines())
    assert linkeddata.canonicalize_dataset(jsonld.JsonLdProcessor.parse_nquads(ring)).splitlines() == theirs


def test_a_proof_set_must_hold_in_every_proof(session):
    """The status list carries both cryptosuites; a file verifies only if every
    proof in it holds, and a proof chain or a cryptosuite we do not know is refused."""
    listed = openbadges.signed_status_list(session=session)
    assert [p["cryptosuite"] for p in listed["proof"]] == ["eddsa-rdfc-2022", "eddsa-jcs-2022"]
    assert proofs.verify_proof(listed, trusted()).suites == ("eddsa-rdfc-2022", "eddsa-jcs-2022")
    assert independent_di_verify(listed) == ["eddsa-rdfc-2022", "eddsa-jcs-2022"]
    for i in (0, 1):
        broken = copy.deepcopy(listed)
        value = broken["proof"][i]["proofValue"]
        broken["proof"][i]["proofValue"] = value[:-1] + ("2" if value[-1] != "2" else "3")
        with pytest.raises(proofs.CredentialError):
            proofs.verify_proof(broken, trusted())
    for change in ({"previousProof": "urn:uuid:x"}, {"cryptosuite": "ecdsa-rdfc-2019"}):
        odd = copy.deepcopy(listed)
        odd["proof"][1].update(change)
        with pytest.raises(proofs.Malformed):
            proofs.verify_proof(odd, trusted())
    with pytest.raises(proofs.Malformed):
        proofs.verify_proof({**listed, "proof": []}, trusted())


def _edits():
    """(label, change) pairs that alter one signed field each."""
    def subject(c):
        return c["credentialSubject"]

    return [
        ("name", lambda c: subject(c)["identifier"][0].update(identityHash="Mallory")),
        ("score", lambda c: subject(c)["result"][0].update(value="100")),
        ("course", lambda c: subject(c)["achievement"].update(name="Something else")),
        ("validFrom", lambda c: c.update(validFrom="2020-01-01T00:00:00Z")),
        ("status index", lambda c: c["credentialStatus"].update(statusListIndex="0")),
        ("issuer name", lambda c: c["issuer"].update(name="Another Academy")),
        ("email hash", lambda c: subject(c)["identifier"][1].update(salt="0" * 32)),
    ]


@pytest.mark.parametrize("edit", [edit for _, edit in _edits()], ids=[label for label, _ in _edits()])
def test_tampering_with_any_field_fails_every_verifier(session, edit):
    cert = issue(session)
    secured = json.loads(cert.credential_json)
    edit(secured)
    with pytest.raises(proofs.CredentialError):
        proofs.verify_any(json.dumps(secured), trusted())
    with pytest.raises(Exception):  # noqa: B017 (any failure of the independent check)
        independent_di_verify(secured)
    header, claims = jwt_parts(cert.credential_jwt)
    edit(claims)
    forged = ".".join([cert.credential_jwt.split(".")[0], b64(claims), cert.credential_jwt.split(".")[2]])
    with pytest.raises(proofs.CredentialError):
        proofs.verify_any(forged, trusted())
    with pytest.raises(pyjwt.InvalidTokenError):
        pyjwt_verify(forged)


def test_tampering_with_the_proof_or_the_key_id_fails_every_verifier(session):
    cert = issue(session)
    new = keys.rotate_key()  # a second, trusted key to point the key id at
    # The signature itself.
    head, body, sig = cert.credential_jwt.split(".")
    bad_sig = ".".join([head, body, ("A" if sig[0] != "A" else "B") + sig[1:]])
    # The key id: another key we trust, and a key id nobody knows.
    header, _ = jwt_parts(cert.credential_jwt)
    other_kid = ".".join([b64({**header, "kid": f"did:web:academy.example#{new.kid}"}), body, sig])
    unknown_kid = ".".join([b64({**header, "kid": "did:web:academy.example#0000000000000000"}), body, sig])
    for forged in (bad_sig, other_kid):
        with pytest.raises(proofs.CredentialError):
            proofs.verify_any(forged, trusted())
        with pytest.raises(pyjwt.InvalidTokenError):
            pyjwt_verify(forged)
    with pytest.raises(proofs.UnknownKey):
        proofs.verify_any(unknown_kid, trusted())
    with pytest.raises(StopIteration):  # not in the DID document at all
        pyjwt_verify(unknown_kid)

    secured = json.loads(cert.credential_json)
    value = secured["proof"][0]["proofValue"]
    flipped = copy.deepcopy(secured)
    flipped["proof"][0]["proofValue"] = value[:-1] + ("2" if value[-1] != "2" else "3")
    moved = copy.deepcopy(secured)
    moved["proof"][0]["verificationMethod"] = f"did:web:academy.example#{proofs.multikey(new.public)}"
    created = copy.deepcopy(secured)
    created["proof"][0]["created"] = "2030-01-01T00:00:00Z"
    no_context = copy.deepcopy(secured)
    del no_context["@context"]
    for forged in (flipped, moved, created, no_context):
        with pytest.raises(proofs.CredentialError):
            proofs.verify_any(json.dumps(forged), trusted())
        with pytest.raises(Exception):  # noqa: B017
            independent_di_verify(forged)


@pytest.mark.parametrize(
    "text",
    ["", "[]", "{}", "not a jwt", "e30.e30.AA", "WyJ4Il0.e30.AA", '{"proof": []}',
     '{"type": "EnvelopedVerifiableCredential", "id": "data:text/plain,x"}'],
)
def test_garbage_is_refused_as_a_credential_error(text):
    with pytest.raises(proofs.CredentialError):
        proofs.verify_any(text, trusted())


def test_a_credential_without_canonical_form_is_refused(session):
    secured = json.loads(issue(session).credential_json)
    text = json.dumps(secured).replace('"name": "Certificate', '"x": NaN, "name": "Certificate', 1)
    assert "NaN" in text
    with pytest.raises(proofs.Malformed):
        proofs.verify_any(text, trusted())


def _deep(levels: int = 100_000) -> str:
    return "[" * levels + "]" * levels


def test_a_duplicate_key_is_refused_whichever_value_comes_first(session):
    """Review N-10: "Someone Else" before the genuine name verified, as Python keeps the
    last value; a reader that keeps the first (or a person) saw the forgery."""
    cert = issue(session)
    genuine = '"identityHash": "Zoë Ødegård"'
    assert cert.credential_json.count(genuine) == 1
    for forged in (f'"identityHash": "Someone Else", {genuine}', f'{genuine}, "identityHash": "Someone Else"'):
        with pytest.raises(proofs.Malformed, match="duplicate key 'identityHash'"):
            proofs.verify_any(cert.credential_json.replace(genuine, forged), trusted())
    with pytest.raises(proofs.Malformed, match="duplicate"):
        proofs.parse_json('{"a": 1, "b": {"c": 1, "c": 1}}')


def test_unsigned_data_beside_the_signed_credential_is_refused(session):
    """Review N-10: an appended @context entry (the spec allows it, a JSON-LD reader
    applies it) and a forged credentialSubject around an enveloped VC-JWT verified.
    We refuse any file that holds more than what its proof signs."""
    cert = issue(session)
    secured = json.loads(cert.credential_json)
    appended = {**secured, "@context": [*secured["@context"], "https://evil.example/ctx.json"]}
    with pytest.raises(proofs.Malformed, match="unsigned data"):
        proofs.verify_any(json.dumps(appended), trusted())

    envelope = {"@context": proofs.VC_CONTEXT, "type": "EnvelopedVerifiableCredential",
                "id": f"data:application/vc+jwt,{cert.credential_jwt}"}
    assert proofs.verify_any(json.dumps(envelope), trusted()).form == "jwt"  # the envelope alone is fine
    forged_subject = {"type": ["AchievementSubject"], "identifier": [{"identityHash": "Someone Else"}]}
    for extra in ({"credentialSubject": forged_subject}, {"name": "Someone Else"},
                  {"@context": [proofs.VC_CONTEXT, "https://evil.example/ctx.json"]}):
        with pytest.raises(proofs.Malformed, match="unsigned data"):
            proofs.verify_any(json.dumps({**envelope, **extra}), trusted())
    with pytest.raises(proofs.Malformed, match="compact JWT"):  # text after the token
        proofs.verify_any(cert.credential_jwt + "\n\nname: Someone Else", trusted())


def test_deep_nesting_is_malformed_not_a_crash(session):
    """Review N-10: 100,000 levels in the file or in a JWT header raised RecursionError."""
    cert = issue(session)
    head, body, sig = cert.credential_jwt.split(".")
    deep_header = base64.urlsafe_b64encode(_deep().encode()).rstrip(b"=").decode()
    deep_field = cert.credential_json.replace('"validFrom"', f'"x": {_deep()}, "validFrom"', 1)
    for text in (_deep(), '{"a": ' * 100_000 + "1" + "}" * 100_000, deep_field,
                 ".".join([deep_header, body, sig])):
        with pytest.raises(proofs.Malformed):
            proofs.verify_any(text, trusted())
    with pytest.raises(proofs.CredentialError):  # joserfc refuses a payload that large first
        proofs.verify_any(".".join([head, deep_header, sig]), trusted())


def test_a_byte_order_mark_is_accepted(session):
    """Review N-10: a genuine file saved by an editor that adds a UTF-8 BOM was NOT VALID."""
    cert = issue(session)
    for text in (cert.credential_json, cert.credential_jwt):
        data = b"\xef\xbb\xbf" + text.encode("utf-8")
        assert proofs.verify_any(data, trusted()).credential["id"].endswith(f"{cert.id}.json")
        assert proofs.verify_any("\ufeff" + text, trusted()).kid == cert.key_id


def test_keys_from_a_foreign_issuer_are_not_trusted(session, tmp_path, monkeypatch):
    cert = issue(session)
    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "elsewhere"))
    get_settings.cache_clear()
    keys.active_key()  # a different issuer's key folder
    for text in (cert.credential_json, cert.credential_jwt):
        with pytest.raises(proofs.UnknownKey):
            proofs.verify_any(text, keys.local_public_keys())


def test_rotated_keys_stay_in_the_did_document_and_keep_verifying(session):
    old = issue(session)
    new_key = keys.rotate_key()
    new = issue(session, email="other@example.org")
    document = proofs.did_document(PUBLIC_URL, trusted())
    listed = {m["id"].split("#")[1] for m in document["verificationMethod"]}
    assert {old.key_id, new_key.kid} <= listed
    assert set(document["assertionMethod"]) == {m["id"] for m in document["verificationMethod"]}
    assert proofs.keys_from_did_document(document, document["id"]).keys() == {old.key_id, new_key.kid}
    for cert in (old, new):
        pyjwt_verify(cert.credential_jwt)
        proofs.verify_any(cert.credential_json, trusted())
    assert pyjwt.get_unverified_header(new.credential_jwt)["kid"].endswith(new_key.kid)


def test_did_web_names_and_locations():
    assert proofs.did_web("http://localhost:8501/") == "did:web:localhost%3A8501"
    assert proofs.did_web("https://x.example/academy/dp") == "did:web:x.example:academy:dp"
    assert did_web_url("did:web:localhost%3A8501") == "http://localhost:8501/.well-known/did.json"
    assert did_web_url("did:web:x.example:academy") == "https://x.example/academy/did.json"


# --- revocation ---------------------------------------------------------------


def test_status_list_is_large_signed_and_flips_on_revocation(session):
    cert = issue(session)
    other = issue(session, email="other@example.org")
    credential = json.loads(cert.credential_json)
    listed = openbadges.signed_status_list(session=session)
    bits = statuslist.decode(listed["credentialSubject"]["encodedList"])
    assert len(bits) * 8 >= 131_072 and not any(bits)
    assert listed["type"] == ["VerifiableCredential", "BitstringStatusListCredential"]
    independent_di_verify(listed)
    assert openbadges.is_revoked(credential, listed, trusted()) is False

    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    listed = openbadges.signed_status_list(session=session)
    bits = statuslist.decode(listed["credentialSubject"]["encodedList"])
    assert statuslist.is_set(bits, cert.status_index) and not statuslist.is_set(bits, other.status_index)
    assert sum(bin(b).count("1") for b in bits) == 1
    assert openbadges.is_revoked(credential, listed, trusted()) is True
    as_jwt = openbadges.status_list_jwt(listed)
    assert openbadges.is_revoked(credential, as_jwt, trusted()) is True
    assert pyjwt_verify(as_jwt)["credentialSubject"]["encodedList"] == listed["credentialSubject"]["encodedList"]


def test_a_forged_status_list_is_refused(session):
    cert = issue(session)
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    listed = openbadges.signed_status_list(session=session)
    cleared = copy.deepcopy(listed)
    cleared["credentialSubject"]["encodedList"] = statuslist.encode([])
    with pytest.raises(proofs.CredentialError):
        openbadges.is_revoked(json.loads(cert.credential_json), cleared, trusted())


def test_the_status_list_expires_minutes_after_it_is_made(session):
    """Review N-7: any list ever published stayed acceptable, so one saved before a
    revocation un-revoked the credential when replayed. The list is signed with a
    validUntil a few minutes ahead (caches keep it a minute) and an older one is refused."""
    cert = issue(session)
    credential = json.loads(cert.credential_json)
    made = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    listed = openbadges.signed_status_list(session=session, now=made)
    assert listed["validUntil"] == (made + statuslist.VALID_FOR).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert timedelta(seconds=statuslist.CACHE_SECONDS) < statuslist.VALID_FOR <= timedelta(minutes=10)
    independent_di_verify(listed)
    as_jwt = openbadges.status_list_jwt(listed)
    for form in (listed, as_jwt):
        fresh = made + statuslist.VALID_FOR - timedelta(seconds=1)
        assert openbadges.is_revoked(credential, form, trusted(), now=fresh) is False
        with pytest.raises(statuslist.StatusListExpired, match="expired"):
            openbadges.is_revoked(credential, form, trusted())  # now: 30 minutes later
    assert jwt_parts(as_jwt)[1]["exp"] == int((made + statuslist.VALID_FOR).timestamp())
    with pytest.raises(pyjwt.ExpiredSignatureError):  # a plain JWT library refuses it as well
        pyjwt_verify(as_jwt)
    # A list signed without validUntil (as before this fix) says nothing about today either.
    undated = {k: v for k, v in listed.items() if k not in ("proof", "validUntil")}
    undated = proofs.add_proof(undated, keys.active_key(), created=undated["validFrom"])
    with pytest.raises(statuslist.StatusListExpired, match="no validUntil"):
        openbadges.is_revoked(credential, undated, trusted(), now=made)


def test_the_signed_list_is_reused_until_a_bit_changes(session):
    """Signing the list costs RDF canonicalisation; an unchanged list is served
    again for LIST_REUSE, but a revocation is signed and served at once."""
    cert = issue(session)
    first = openbadges.signed_status_list(session=session)
    again = openbadges.signed_status_list(session=session)
    assert again == first and again is not first
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    after = openbadges.signed_status_list(session=session)
    assert after["proof"] != first["proof"]
    assert openbadges.is_revoked(json.loads(cert.credential_json), after, trusted()) is True


def test_bit_order_is_the_specs():
    """Index 0 is the most significant bit of the first byte."""
    bits = statuslist.decode(statuslist.encode([0, 9, 131_071]))
    assert bits[0] == 0x80 and bits[1] == 0x40 and bits[-1] == 0x01
    with pytest.raises(statuslist.StatusListError):
        statuslist.decode("not-multibase")


# --- routes -------------------------------------------------------------------


@pytest.fixture
def client(engine):  # the autouse settings fixture has set PUBLIC_URL and keys
    from academy import db

    db.set_engine(engine)
    with TestClient(Starlette(routes=routes.routes())) as c:
        yield c
    db.set_engine(None)


def test_routes_serve_did_status_credentials_and_verification(client, session):
    cert = issue(session)
    got = {}
    for path, media in [
        ("/.well-known/did.json", "application/did+json"),
        ("/did.json", "application/did+json"),
        ("/status/1", "application/vc"),
        (f"/credentials/{cert.id}.json", "application/vc"),
        (f"/credentials/{cert.id}.jwt", "application/vc+jwt"),
        (f"/api/verify/{cert.id}", "application/json"),
    ]:
        r = client.get(path, headers={"Origin": "https://employer.example"})
        assert r.status_code == 200, path
        assert r.headers["content-type"].split(";")[0] == media, path
        assert r.headers["access-control-allow-origin"] == "*", path
        assert r.headers["cache-control"], path
        got[path] = r
        pre = client.options(path, headers={"Origin": "https://e.example", "Access-Control-Request-Method": "GET"})
        assert pre.status_code == 204 and "GET" in pre.headers["access-control-allow-methods"]
    assert got["/.well-known/did.json"].json()["id"] == "did:web:academy.example"
    assert got[f"/credentials/{cert.id}.json"].text == cert.credential_json
    assert got[f"/credentials/{cert.id}.jwt"].text == cert.credential_jwt
    assert "no-store" in got[f"/api/verify/{cert.id}"].headers["cache-control"]
    body = got[f"/api/verify/{cert.id}"].json()
    assert body["status"] == "valid" and body["valid"] is True and body["name"] == "Zoë Ødegård"
    assert EMAIL.lower() not in json.dumps(body).lower()
    jwt_list = client.get("/status/1", headers={"Accept": "application/vc+jwt"})
    assert jwt_list.headers["content-type"].startswith("application/vc+jwt")
    pyjwt_verify(jwt_list.text)

    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="copied answers")
    answer = client.get(f"/api/verify/{cert.id}")
    body = answer.json()
    assert body["status"] == "revoked" and body["valid"] is False and body["revoked_reason"] == "revoked"
    assert "copied answers" not in answer.text  # the admin's words stay private
    listed = client.get("/status/1").json()
    assert openbadges.is_revoked(json.loads(cert.credential_json), listed, trusted()) is True


def test_the_api_tells_replaced_from_revoked_and_the_status_list_marks_both(client, session):
    """Issue #22: /api/verify says "replaced" for a reissued certificate (with the new ID
    only by the holder's choice), "revoked" for one an admin revoked; the status list's
    revocation bit means "no longer current" and is set for both."""
    cert = issue(session)
    new = store.reissue(session=session, cert_id=cert.id, learner_id=cert.learner_id, new_name="Zoë Berg",
                        lang="en")
    body = client.get(f"/api/verify/{cert.id}").json()
    assert (body["status"], body["valid"], body["revoked_reason"], body["replaced_by"]) == (
        "replaced", False, "reissued", None)
    assert new.id not in json.dumps(body)
    newest = store.reissue(session=session, cert_id=new.id, learner_id=cert.learner_id, new_name="Zoë Bergman",
                           lang="en", show_new_id=True)
    body = client.get(f"/api/verify/{new.id}").json()
    assert (body["status"], body["replaced_by"]) == ("replaced", newest.id)
    assert client.get(f"/api/verify/{newest.id}").json()["replaced_by"] is None
    listed = client.get("/status/1").json()
    for old in (cert, new):
        assert openbadges.is_revoked(json.loads(old.credential_json), listed, trusted()) is True
    assert openbadges.is_revoked(json.loads(newest.credential_json), listed, trusted()) is False


def test_routes_answer_unknown_and_mistyped_ids(client, session):
    cert = issue(session)
    typo = cert.id[:-1] + ("0" if cert.id[-1] != "0" else "1")
    assert client.get(f"/api/verify/{typo}").status_code == 400
    assert client.get("/api/verify/hello").json() == {"status": "malformed"}
    assert client.get("/api/verify/DP-0000-0000-0000-0000-00").status_code == 404
    assert client.get(f"/credentials/{typo}.json").status_code == 404
    assert client.post(f"/api/verify/{cert.id}").status_code == 405


def test_a_certificate_from_before_open_badges_gets_its_credential_on_first_request(client, session):
    cert = store.issue_certificate(
        session=session, learner_id=None, attempt_id=None, name="Ada", lang="en", score=80,
        pass_date="2025-01-02",
    )
    # As a row from before this change: no credential, no status bit.
    cert.credential_json = cert.credential_jwt = cert.status_index = None
    session.add(cert)
    session.commit()
    r = client.get(f"/credentials/{cert.id}.json")
    assert r.status_code == 200
    session.refresh(cert)
    assert cert.status_index is not None and r.text == cert.credential_json


def test_streamlit_app_accepts_the_routes():
    """st.App refuses routes under its reserved prefixes (/_stcore/, /media/,
    ...); ours must pass its check, as the lead mounts them there."""
    from starlette.routing import Route
    from streamlit.starlette import App

    root = Path(__file__).resolve().parent.parent
    App(root / "app" / "main.py", routes=routes.routes())
    with pytest.raises(ValueError):
        App(root / "app" / "main.py", routes=[Route("/_stcore/did.json", routes.did_json)])


# --- the CLI ------------------------------------------------------------------


@pytest.fixture
def status_server(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving files from a folder."""
    folder = tmp_path / "www"
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cli_verifies_a_credential_file_and_sees_revocation_online(session, tmp_path, status_server, capsys):
    folder, url = status_server
    cert = issue(session)
    for suffix, text in ((".json", cert.credential_json), (".jwt", cert.credential_jwt)):
        (tmp_path / f"c{suffix}").write_text(text, encoding="utf-8")
    (folder / "status.json").write_text(json.dumps(openbadges.signed_status_list(session=session)))

    assert cli_main(["verify", str(tmp_path / "c.json"), "--status-url", f"{url}/status.json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"VALID {cert.id}") and "revocation checked" in out
    assert "proof:      Data Integrity eddsa-rdfc-2022\n" in out
    assert cli_main(["verify", str(tmp_path / "c.jwt"), "--status-url", f"{url}/status.json"]) == 0
    assert "VC-JWT (EdDSA), with Data Integrity eddsa-rdfc-2022 inside" in capsys.readouterr().out

    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    (folder / "status.json").write_text(json.dumps(openbadges.signed_status_list(session=session)))
    for name in ("c.json", "c.jwt"):
        assert cli_main(["verify", str(tmp_path / name), "--status-url", f"{url}/status.json"]) == 1
        assert capsys.readouterr().out.startswith(f"NOT VALID (revoked) {cert.id}")


def test_cli_on_another_machine_takes_the_keys_from_the_did_document(
    session, tmp_path, status_server, monkeypatch, capsys
):
    """A third party with no key folder: the proof is checked with the keys of
    the issuer's did:web document, and the status list is read from its URL."""
    folder, url = status_server
    monkeypatch.setenv("PUBLIC_URL", url)
    get_settings.cache_clear()
    cert = issue(session)
    (folder / ".well-known").mkdir()
    (folder / ".well-known" / "did.json").write_text(
        json.dumps(proofs.did_document(url, trusted()))
    )
    (folder / "status").mkdir()
    (folder / "status" / "1").write_text(json.dumps(openbadges.signed_status_list(session=session)))
    badge = tmp_path / "badge.jwt"
    badge.write_text(cert.credential_jwt)

    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "no-keys-here"))
    get_settings.cache_clear()
    assert keys.local_public_keys() == {}
    assert cli_main(["verify", str(badge)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"VALID {cert.id}") and f"revocation checked against {url}/status/1" in out

    (folder / ".well-known" / "did.json").write_text(json.dumps(proofs.did_document(url, {})))
    assert cli_main(["verify", str(badge)]) == 1
    assert capsys.readouterr().out.startswith("NOT VALID (unknown_key)")


def test_cli_offline_checks_the_proof_and_says_revocation_was_not_seen(session, tmp_path, capsys):
    cert = issue(session)
    good = tmp_path / "good.json"
    good.write_text(cert.credential_json, encoding="utf-8")
    # academy.example is not reachable from tests; the list URL of 127.0.0.1:9 refuses.
    # Revocation unknown: fail closed (2), unless only the signature was asked for.
    assert cli_main(["verify", str(good), "--status-url", "http://127.0.0.1:9/status/1"]) == 2
    assert "UNCHECKED" in capsys.readouterr().out
    assert cli_main(["verify", str(good), "--status-url", "http://127.0.0.1:9/status/1", "--offline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("VALID") and "revocation not checked" in out

    bad = tmp_path / "bad.json"
    bad.write_text(cert.credential_json.replace("Zoë Ødegård", "Zoe Odegard"), encoding="utf-8")
    assert cli_main(["verify", str(bad), "--status-url", "http://127.0.0.1:9/status/1"]) == 1
    assert capsys.readouterr().out.startswith("NOT VALID (bad_signature)")


def test_cli_refuses_a_status_list_saved_before_the_revocation(session, tmp_path, status_server, capsys):
    """Review N-7 (p_status_replay.sh): save the list, revoke, serve the saved list from a
    "mirror": the credential was VALID, exit 0. Now the old list is UNCHECKED, exit 2."""
    folder, url = status_server
    cert = issue(session)
    saved = openbadges.signed_status_list(session=session, now=datetime.now(UTC) - timedelta(minutes=10))
    (folder / "saved.json").write_text(json.dumps(saved))
    (folder / "saved.jwt").write_text(openbadges.status_list_jwt(saved))
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="exam fraud")
    (folder / "live.json").write_text(json.dumps(openbadges.signed_status_list(session=session)))
    for suffix, text in ((".json", cert.credential_json), (".jwt", cert.credential_jwt)):
        badge = tmp_path / f"c{suffix}"
        badge.write_text(text, encoding="utf-8")
        for mirror in ("saved.json", "saved.jwt"):
            assert cli_main(["verify", str(badge), "--status-url", f"{url}/{mirror}"]) == 2
            out = capsys.readouterr().out
            assert "the status list expired at" in out and "must be current" in out, out
            assert f"UNCHECKED: the status list at {url}/{mirror} is not current" in out, out
        assert cli_main(["verify", str(badge), "--status-url", f"{url}/live.json"]) == 1
        assert capsys.readouterr().out.startswith(f"NOT VALID (revoked) {cert.id}")


def test_cli_reads_a_file_with_a_bom_and_says_malformed_for_deep_nesting(session, tmp_path, capsys):
    """Review N-10: a BOM made a genuine file NOT VALID; deep nesting printed a traceback."""
    cert = issue(session)
    for suffix, text in ((".json", cert.credential_json), (".jwt", cert.credential_jwt)):
        badge = tmp_path / f"bom{suffix}"
        badge.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        assert cli_main(["verify", str(badge), "--offline"]) == 0
        assert capsys.readouterr().out.startswith(f"VALID {cert.id}")
    head, body, sig = cert.credential_jwt.split(".")
    deep = _deep()
    deep_header = base64.urlsafe_b64encode(deep.encode()).rstrip(b"=").decode()
    for name, text in (("deep.json", deep), ("deep.jwt", f"{deep_header}.{body}.{sig}")):
        (tmp_path / name).write_text(text)
        assert cli_main(["verify", str(tmp_path / name), "--offline"]) == 1
        assert capsys.readouterr().out.startswith("NOT VALID (malformed)")
    dup = tmp_path / "dup.json"
    genuine = '"identityHash": "Zoë Ødegård"'
    dup.write_text(cert.credential_json.replace(genuine, f'"identityHash": "Someone Else", {genuine}'))
    assert cli_main(["verify", str(dup), "--offline"]) == 1
    assert capsys.readouterr().out.startswith("NOT VALID (malformed): duplicate key 'identityHash'")


# --- the PDF ------------------------------------------------------------------


def credentials_in_pdf(pdf_bytes: bytes) -> dict[str, bytes]:
    """The credential files attach_to_pdf embedded (the server never parses PDFs itself)."""
    found = PdfReader(io.BytesIO(pdf_bytes)).attachments
    return {name: found[name][0] for name in openbadges.PDF_ATTACHMENTS if found.get(name)}


def test_credential_rides_in_the_pdf_and_the_pdf_still_verifies_offline(session):
    cert = issue(session)
    plain = pdf.render(payload=cert.payload, signature=cert.signature,
                       public_url="https://academy.example")
    assert credentials_in_pdf(plain) == {}
    carried = openbadges.attach_to_pdf(plain, cert)
    assert verify.verify_pdf(carried).status == "valid"
    # What learners download (store.render_pdf) carries it too.
    assert credentials_in_pdf(store.render_pdf(cert)).keys() == {"credential.json",
                                                                           "credential.jwt"}
    files = credentials_in_pdf(carried)
    assert files == {
        "credential.json": cert.credential_json.encode(),
        "credential.jwt": cert.credential_jwt.encode(),
    }
    for data in files.values():
        assert proofs.verify_any(data, trusted()).credential["id"].endswith(f"{cert.id}.json")


# --- LinkedIn -----------------------------------------------------------------


@pytest.mark.parametrize("pass_date,year,month", [("2025-01-15", "2025", "1"), ("2024-12-31", "2024", "12")])
def test_linkedin_link_prefills_the_certification(settings, pass_date, year, month):
    cert = Certificate(
        id="DP-7K3M-9QXZ-A2B4-HJ8R-5T", name="Zoë", course_id="data-parallelism", score=90,
        language="nl", pass_date=pass_date, key_id="k", payload="{}", signature="s",
    )
    url = openbadges.linkedin_url(cert, settings)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "www.linkedin.com", "/profile/add")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query == {
        "startTask": "CERTIFICATION_NAME",
        "name": "Certificaat van voltooiing: Dataparallellisme",
        "organizationName": settings.issuer,
        "issueYear": year,
        "issueMonth": month,
        "certUrl": "https://academy.example/verify?id=DP-7K3M-9QXZ-A2B4-HJ8R-5T",
        "certId": "DP-7K3M-9QXZ-A2B4-HJ8R-5T",
    }


# --- the routes on the real app ------------------------------------------------


@pytest.mark.usefixtures("on_server_db")
def test_the_running_app_serves_every_route_with_its_headers(server):
    """app/main.py mounts certificates/routes.py through st.App: each route answers on
    the real server, with its content type, CORS and caching, and our security headers."""
    import urllib.error
    import urllib.request

    from academy.db import session_scope

    with session_scope() as s:
        cert = store.issue_certificate(session=s, learner_id=None, attempt_id=None, name="Ada",
                                       lang="en", score=90, pass_date="2026-11-30")

    def get(path: str, **headers: str):
        req = urllib.request.Request(f"{server.url}{path}", headers=headers)
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.headers, resp.read()

    expected = {
        "/.well-known/did.json": "application/did+json",
        "/status/1": "application/vc",
        f"/credentials/{cert.id}.json": "application/vc",
        f"/credentials/{cert.id}.jwt": "application/vc+jwt",
        f"/api/verify/{cert.id}": "application/json",
    }
    for path, ctype in expected.items():
        status, headers, body = get(path, Origin="https://employer.example")
        assert status == 200 and headers["Content-Type"].startswith(ctype), (path, headers["Content-Type"])
        assert headers["Access-Control-Allow-Origin"] == "*", path
        assert headers["Cache-Control"], path
        assert headers["X-Content-Type-Options"] == "nosniff", path  # web.py's middleware too
        assert body, path
    verdict = json.loads(get(f"/api/verify/{cert.id}")[2])
    assert verdict["status"] == "valid" and verdict["name"] == "Ada"
    with pytest.raises(urllib.error.HTTPError) as err:
        get("/api/verify/DP-0000")
    assert err.value.code == 400


def test_two_requests_making_one_credential_keep_one_and_both_serve_it(tmp_path):
    """Two requests that loaded a certificate without a credential both make one:
    only the first stored is kept and served, so a revocation flips the bit of the
    credential everyone holds (review: a lost version kept its own, unrevocable bit)."""
    from academy.db import make_engine, migrate

    engine = make_engine(f"sqlite:///{tmp_path / 'race.db'}")
    migrate(engine)
    with Session(engine, expire_on_commit=False) as s:
        cert = store.issue_certificate(session=s, learner_id=None, attempt_id=None, name="Ada",
                                       lang="en", score=90, pass_date="2026-11-30")
        cert.credential_json = cert.credential_jwt = cert.status_index = None  # as before 0003
        s.add(cert)
        s.commit()
    with Session(engine, expire_on_commit=False) as a, Session(engine, expire_on_commit=False) as b:
        in_a, in_b = a.get(Certificate, cert.id), b.get(Certificate, cert.id)  # both loaded first
        first = openbadges.ensure_credential(session=a, cert=in_a).credential_json
        second = openbadges.ensure_credential(session=b, cert=in_b).credential_json
        assert first == second
        store.revoke(session=a, cert_id=cert.id, actor_id=None, reason="test")
        listed = openbadges.signed_status_list(session=a)
        assert openbadges.is_revoked(json.loads(second), listed, trusted()) is True


def test_cli_refuses_a_credential_from_an_issuer_it_was_not_asked_to_trust(
    session, tmp_path, status_server, capsys
):
    """Review: a forger signs with their own key, names a did:web of their own (whose DID
    document lists that key) and calls the issuer "Data Parallelism Academy". Only the
    academy's own DID (PUBLIC_URL, or --issuer) is trusted, so this is NOT VALID."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder, url = status_server
    private = Ed25519PrivateKey.generate()
    forger = keys.IssuerKey(kid="forger", public=private.public_key(), private=private)
    their_did = proofs.did_web(url)
    cert = issue(session)
    credential = json.loads(cert.credential_json)
    credential.pop("proof")
    credential["issuer"] = {**credential["issuer"], "id": their_did}
    forged = proofs.add_proof(credential, forger, created=credential["validFrom"])
    (folder / ".well-known").mkdir()
    (folder / ".well-known" / "did.json").write_text(
        json.dumps(proofs.did_document(url, {"forger": forger.public})))
    badge = tmp_path / "forged.json"
    badge.write_text(json.dumps(forged))
    assert cli_main(["verify", str(badge), "--offline"]) == 1
    assert capsys.readouterr().out.startswith("NOT VALID")
    # Naming that issuer on purpose is the only way to accept it (and the output says whose it is).
    assert cli_main(["verify", str(badge), "--offline", "--issuer", their_did]) == 0
    assert their_did in capsys.readouterr().out


def test_api_verify_limits_each_client_but_not_the_loopback(client, session, monkeypatch):
    """Review N-19: /api/verify had no limit (300 lookups in 1.7 s). A client may make
    VERIFY_BURST at once, then about VERIFY_PER_S a second: the next gets 429 with
    Retry-After; another client is not affected, nor the loopback (a proxy speaking for all)."""
    monkeypatch.setattr(routes, "_verify_buckets", routes._Buckets(5, 1.0, 100))
    cert = issue(session)
    path = f"/api/verify/{cert.id}"

    def ask(addr: str):
        return client.get(path, headers={"X-Forwarded-For": addr})

    monkeypatch.setenv("TRUSTED_PROXY_HOPS", "1")
    get_settings.cache_clear()
    answers = [ask("203.0.113.5").status_code for _ in range(7)]
    assert answers == [200] * 5 + [429] * 2
    refused = ask("203.0.113.5")
    assert refused.json() == {"status": "too_many_requests"} and int(refused.headers["Retry-After"]) >= 1
    assert ask("198.51.100.7").status_code == 200  # someone else
    assert all(ask("127.0.0.1").status_code == 200 for _ in range(8))  # loopback: not limited


def test_a_token_bucket_refills_with_time():
    buckets = routes._Buckets(2, 0.5, 2)
    assert [buckets.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 2.0]
    assert buckets.take("a", now=2.0) == 0.0  # one token back after 1 / 0.5 s
    buckets.take("b", now=2.0)
    buckets.take("c", now=2.0)  # a third client: the longest idle ("a") is forgotten
    assert list(buckets.tokens) == ["b", "c"]


# --- certificates issued before eddsa-rdfc-2022 ---------------------------------

LEGACY = Path(__file__).resolve().parent / "fixtures" / "credentials-2026-12"


def legacy_keys() -> dict:
    return keys.load_public_keys_file(LEGACY / "public-keys.json")


def insert_legacy_row(session: Session) -> Certificate:
    """The fixture's certificate row, as the database of a site that issued it holds it
    once upgraded: migration 0013 seals its revocation state as it stands (status_mac)."""
    from certificates import keys, signing

    row = json.loads((LEGACY / "row.json").read_text(encoding="utf-8"))
    row.update(learner_id=None, attempt_id=None, issued_at=datetime.fromisoformat(row["issued_at"]),
               credential_json=(LEGACY / "credential.json").read_text(encoding="utf-8"),
               credential_jwt=(LEGACY / "credential.jwt").read_text(encoding="ascii"))
    row["status_mac"] = signing.status_check(row["id"], row["revoked_at"], row["revoked_reason"],
                                             row["replaced_by"], bool(row["show_replacement"]), keys.check_key())
    cert = Certificate(**row)
    session.add(cert)
    session.commit()
    return cert


def test_a_credential_issued_before_keeps_verifying_in_both_forms():
    """Stored credentials are never re-signed: the eddsa-jcs-2022 JSON and the vc+jwt
    VC-JWT (no sub, no proof inside) issued by commit 809ad52 verify as they are,
    here and with the independent checks, and tampering still fails."""
    text = (LEGACY / "credential.json").read_text(encoding="utf-8")
    token = (LEGACY / "credential.jwt").read_text(encoding="ascii")
    trusted_then = legacy_keys()
    as_json = proofs.verify_any(text, trusted_then)
    as_jwt = proofs.verify_any(token, trusted_then)
    assert as_json.suites == ("eddsa-jcs-2022",) and as_jwt.form == "jwt" and as_jwt.suites == ()
    assert as_json.credential == as_jwt.credential
    assert openbadges.summary(as_json.credential)["name"] == "Zoë Ødegård"
    assert independent_di_verify(json.loads(text)) == ["eddsa-jcs-2022"]
    assert jwt_parts(token)[0]["typ"] == "vc+jwt"
    assert pyjwt_verify(token, public_keys=trusted_then)["jti"] == as_json.credential["id"]
    official = json.loads((SCHEMAS[0].parent / "ob_v3p0_achievementcredential_schema.json").read_text())
    validator = jsonschema.validators.validator_for(official)(official)
    assert [e.path[0] for e in validator.iter_errors(json.loads(text))] == ["proof"]  # an object, not a list
    validator.validate(jwt_parts(token)[1])
    with pytest.raises(proofs.CredentialError):
        proofs.verify_any(text.replace("Zoë Ødegård", "Zoe Odegard"), trusted_then)
    with pytest.raises(proofs.UnknownKey):
        proofs.verify_any(text, trusted())  # a different issuer's keys


def test_a_pdf_issued_before_keeps_verifying_and_carries_its_credentials():
    data = (LEGACY / "certificate.pdf").read_bytes()
    result = verify.verify_pdf(data, keys_file=LEGACY / "public-keys.json")
    assert (result.status, result.id, result.name) == ("valid", "DP-WHPS-5CK8-AQ64-EMWM-V7", "Zoë Ødegård")
    for name, blob in credentials_in_pdf(data).items():
        assert proofs.verify_any(blob, legacy_keys()).credential["id"].endswith("DP-WHPS-5CK8-AQ64-EMWM-V7.json"), name


def test_a_site_with_old_certificates_serves_and_revokes_them_unchanged(client, session, tmp_path, capsys):
    """An old row (its key still in the key folder, here the fixture's public key
    trusted beside the new one) is served as stored, looks up as valid, and its bit
    in the new status list, signed by the new key in both suites, follows revocation."""
    cert = insert_legacy_row(session)
    stored = cert.credential_json
    assert client.get(f"/credentials/{cert.id}.json").text == stored
    assert client.get(f"/credentials/{cert.id}.jwt").text == cert.credential_jwt
    listed = client.get("/status/1").json()
    both = {**trusted(), **legacy_keys()}  # the new key (made by that request) and the old one
    assert openbadges.is_revoked(json.loads(stored), listed, both) is False
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    listed = client.get("/status/1").json()
    assert openbadges.is_revoked(json.loads(stored), listed, both) is True
    assert openbadges.is_revoked(json.loads(stored), openbadges.status_list_jwt(listed), both) is True
    badge = tmp_path / "old-badge.json"
    badge.write_text(stored, encoding="utf-8")
    assert cli_main(["verify", str(badge), "--keys", str(LEGACY / "public-keys.json"), "--offline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("VALID DP-WHPS-5CK8-AQ64-EMWM-V7") and "Data Integrity eddsa-jcs-2022" in out


# --- verifiers nobody here wrote (tests/verifiers: Digital Bazaar, jose) --------

VERIFIERS = Path(__file__).resolve().parent / "verifiers"


def third_party(cases: list[dict], *, status_lists: dict, public_keys) -> list[dict]:
    """Run tests/verifiers/verify.mjs (Node) on ``cases``; skipped where Node or the
    packages `make test` installs there (npm ci) are missing."""
    node = shutil.which("node")
    if node is None or not (VERIFIERS / "node_modules" / "@digitalbazaar" / "vc").is_dir():
        pytest.skip("Node.js verifiers not installed (make test runs npm ci in tests/verifiers)")
    did = proofs.did_web(PUBLIC_URL)
    given = {"did": did, "didDocument": proofs.did_document(PUBLIC_URL, public_keys),
             "statusLists": status_lists, "cases": cases}
    done = subprocess.run([node, str(VERIFIERS / "verify.mjs")], input=json.dumps(given), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_digital_bazaar_and_jose_accept_both_forms_and_see_revocation(session):
    """Issue #38's check: Digital Bazaar's verifier with the eddsa-rdfc-2022
    cryptosuite alone (what a certified Open Badges displayer must support: jsonld.js
    safe mode, contexts from npm) verifies the JSON form and its status; jose verifies
    the VC-JWT under Open Badges 3.0's rules (typ JWT, sub = subject id); tampering
    fails; a revocation flips the bit. The certificate issued before the change
    verifies with the eddsa-jcs-2022 suite alone, its status checked against the same
    list (whose proof set serves both)."""
    cert = issue(session)
    credential = json.loads(cert.credential_json)
    renamed = copy.deepcopy(credential)
    renamed["credentialSubject"]["identifier"][0]["identityHash"] = "Mallory"
    extra = {**copy.deepcopy(credential), "nickname": "Mallory"}
    legacy = insert_legacy_row(session)
    old = json.loads(legacy.credential_json)
    head, body, sig = cert.credential_jwt.split(".")
    vc_jwt_typ = ".".join([b64({**jwt_parts(cert.credential_jwt)[0], "typ": "vc+jwt"}), body, sig])
    cases = [
        {"credential": credential, "suites": ["eddsa-rdfc-2022"]},
        {"credential": renamed, "suites": ["eddsa-rdfc-2022"]},
        {"credential": extra, "suites": ["eddsa-rdfc-2022"]},
        {"credential": old, "suites": ["eddsa-jcs-2022"]},
        {"jwt": cert.credential_jwt},
        {"jwt": vc_jwt_typ},
        {"jwt": legacy.credential_jwt},
        {"credential": credential, "suites": ["eddsa-jcs-2022"]},
        {"jwt": cert.credential_jwt, "profile": "vc-jose-cose"},
        {"jwt": legacy.credential_jwt, "profile": "vc-jose-cose"},
    ]
    list_url = credential["credentialStatus"]["statusListCredential"]

    def run():
        listed = openbadges.signed_status_list(session=session)
        return third_party(cases, status_lists={list_url: listed}, public_keys={**trusted(), **legacy_keys()})

    new, renamed_r, extra_r, old_r, jwt_r, typ_r, old_jwt_r, jcs_only, jose_cose, old_jose_cose = run()
    assert new == {"verified": True, "error": None, "statusVerified": True, "revoked": False}
    assert renamed_r["verified"] is False and "Invalid signature" in renamed_r["error"]
    assert extra_r["verified"] is False and "Safe mode" in extra_r["error"]  # jsonld.js: an undefined term
    assert old_r == {"verified": True, "error": None, "statusVerified": True, "revoked": False}
    assert jwt_r["verified"] is True and jwt_r["header"] == {"alg": "EdDSA", "typ": "JWT",
                                                             "kid": f"did:web:academy.example#{cert.key_id}"}
    assert jwt_r["payload"]["sub"] == credential["credentialSubject"]["id"]
    assert jwt_r["payload"]["proof"] == credential["proof"]
    assert typ_r["verified"] is False  # the header is signed too
    assert old_jwt_r["verified"] is False and "typ" in old_jwt_r["error"]  # vc+jwt: why issue #38 changed it
    # What the docs say each verifier does not accept (docs/contributors/open-badges.md):
    assert jcs_only["verified"] is False and "insufficient proofs matched" in jcs_only["error"]
    assert jose_cose["verified"] is False and "typ" in jose_cose["error"]
    assert old_jose_cose["verified"] is True

    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="test")
    store.revoke(session=session, cert_id=legacy.id, actor_id=None, reason="test")
    new, *_rest = run()
    old_r = _rest[2]
    assert (new["verified"], new["revoked"]) == (True, True)  # the library reports it in the status
    assert (old_r["verified"], old_r["revoked"]) == (True, True)


def install_legacy_public_key() -> None:
    """The fixture's issuer key as the site that issued it keeps it: a ``<kid>.pub``
    in the key folder (the private key, gone here, does not matter to verifying)."""
    folder = keys.keys_dir()
    for kid, public in legacy_keys().items():
        (folder / f"{kid}.pub").write_text(keys.public_pem(public))


def test_the_verify_page_and_the_api_answer_for_old_and_new_certificates(client):
    """The public Verify page (AppTest) and /api/verify check an old certificate and a
    new one alike: both rest on the row's signed payload, which this change left as it was."""
    from academy.db import session_scope
    from certificates.i18n import texts
    from tests.apptest import open_page

    install_legacy_public_key()  # the client fixture points the app at this test's database
    with session_scope() as s:
        old = insert_legacy_row(s)
        new = issue(s, email=None)
        ids_ = (old.id, new.id)
    for cert_id in ids_:
        page = open_page("verify", "en", None, id=cert_id)
        assert texts("en")["status"]["valid"] in [m.value for m in page.success], cert_id
        assert any("Zoë Ødegård" in t.value for t in page.text), cert_id
        body = client.get(f"/api/verify/{cert_id}").json()
        assert (body["status"], body["name"]) == ("valid", "Zoë Ødegård"), cert_id
