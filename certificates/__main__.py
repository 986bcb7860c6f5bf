"""Certificates from the command line (admins, tests and offline checkers).

    python -m certificates issue --name NAME --score N --lang en|zh|nl|... --out FILE.pdf [--learner EMAIL]
    python -m certificates verify FILE.pdf [--keys KEYS.json]   # offline, no database
    python -m certificates verify FILE.json [--keys KEYS.json] [--status-url URL]
                                                  # Open Badges credential (.json or .jwt)
    python -m certificates verify --id ID                       # database, sees revocation
    python -m certificates revoke ID --reason TEXT [--disqualify]
    python -m certificates lift ID [--reason TEXT]              # end a disqualification
    python -m certificates rotate-key
    python -m certificates add-checks                           # rows issued before their check
    python -m certificates public-key [--json]

``verify`` exits 0 only for a valid certificate. A PDF is read in a
resource-limited child process (one page, size cap) and only its embedded
signed data is checked, never its printed text: compare the name and ID it
prints with the document. ``revoke --disqualify`` is revocation for cause:
the learner gets no new certificate until ``lift``. The database is
DATABASE_URL's (migrated on first use); keys live under SECRETS_DIR.

An Open Badges credential (``/credentials/<ID>.json`` or ``.jwt``) is checked
against the local keys and ``--keys``, or else the keys of the issuer's
``did:web`` DID document; then, when the status list (the credential's own
``statusListCredential``, or ``--status-url``) can be fetched, for revocation.
A list past its signed ``validUntil`` (a few minutes after it was served) is
refused like an unreachable one: a saved or mirrored copy could hide a later
revocation. Without a current list the result is "UNCHECKED", exit 2, unless
``--offline`` asks for the signature alone. The issuer trusted is ``--issuer``, else the
did:web of the public address (``PUBLIC_URL``); where PUBLIC_URL is not set, this
process cannot know the port the app served on, so a credential signed by this
academy's own keys is trusted under whichever address it names.

``issue`` signs links with the public address and refuses (exit 1, saying why)
when that address does not answer as this academy: the app must be running
there (``certificates.addresscheck``).
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from certificates import address, errors, ids, keys, openbadges, proofs, statuslist, store, verify
from certificates.eligibility import eligible_attempt
from certificates.i18n import languages


def _show(result: verify.VerifyResult, *, offline: bool) -> int:
    if not result.valid:
        print(f"NOT VALID ({result.status}){': ' + result.detail if result.detail else ''}")
        if result.status == "revoked":
            print(f"  revoked at: {result.revoked_at:%Y-%m-%d %H:%M} UTC")
            print(f"  reason:     {result.revoked_reason}")
        if result.status == "replaced":  # by a newer certificate of the same learner, not for cause
            print(f"  replaced at: {result.revoked_at:%Y-%m-%d %H:%M} UTC ({result.revoked_reason})")
            if result.replaced_by:
                print(f"  newer certificate: {result.replaced_by} (shown by the holder's choice)")
        if result.name:
            print(f"  name:       {result.name}")
        return 1
    print(f"VALID {result.id}")
    print(f"  name:       {result.name}")
    print(f"  course:     {result.course_title} ({result.course})")
    print(f"  score:      {result.score}%")
    print(f"  passed on:  {result.pass_date}")
    print(f"  language:   {result.lang}")
    print(f"  issuer:     {result.issuer} (key {result.key_id})")
    if result.issued_at:
        print(f"  issued at:  {result.issued_at:%Y-%m-%d %H:%M} UTC")
    if offline:
        print("  (offline signature check of the embedded data: compare this name and ID with the")
        print("   printed document; revocation is only visible with --id)")
    return 0


def _session():
    from sqlmodel import Session

    from academy.db import get_engine

    return Session(get_engine(), expire_on_commit=False)


def cmd_issue(args: argparse.Namespace) -> int:
    if not args.learner and args.score is None:
        print("--score is required without --learner", file=sys.stderr)
        return 2
    with _session() as session:
        try:
            cert = _issue(session, args)
        except errors.CertificateError as err:  # refused: say why, in English, for the operator
            print(f"not issued: {err}", file=sys.stderr)
            return 1
        if cert is None:
            return 1
        Path(args.out).write_bytes(store.render_pdf(cert))
    print(cert.id)
    print(f"  wrote {args.out}")
    print(f"  verify at {store.verify_link(cert)}")
    return 0


def _issue(session, args: argparse.Namespace):
    """The certificate ``issue`` asks for, or None after saying why there is none."""
    from sqlmodel import select

    from academy.accounts import normalise_email
    from academy.models import Learner

    if not args.learner:  # tied to nobody: the operator vouches for name and score
        return store.issue_certificate(
            session=session, learner_id=None, attempt_id=None, name=args.name, lang=args.lang,
            score=args.score, pass_date=args.date or datetime.now(UTC).date().isoformat(),
        )
    learner = session.exec(select(Learner).where(Learner.email == normalise_email(args.learner))).first()
    if learner is None:
        print(f"no learner with e-mail {args.learner}", file=sys.stderr)
        return None
    attempt = eligible_attempt(session=session, learner_id=learner.id)
    if attempt is None:
        print(f"{args.learner} has no passed quiz attempt", file=sys.stderr)
        return None
    return store.issue_certificate(
        session=session, learner_id=learner.id, attempt_id=attempt.id, name=args.name, lang=args.lang,
        score=args.score if args.score is not None else attempt.score,
        pass_date=args.date or store.attempt_date(attempt),
    )


FETCH_TIMEOUT_S = 10
FETCH_MAX_BYTES = 1 << 20  # a status list is ~200 bytes gzipped; a DID document a few KiB


def _fetch(url: str, accept: str) -> str:
    """GET a public JSON document (http(s) only, size-capped)."""
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"not an http(s) URL: {url}")
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:  # scheme checked
        return response.read(FETCH_MAX_BYTES).decode("utf-8")


def did_web_url(did: str) -> str:
    """Where a did:web DID document lives (the did:web method's rule); plain
    http only for localhost, as in development."""
    parts = [urllib.parse.unquote(p) for p in did.removeprefix("did:web:").split(":")]
    host, path = parts[0], "/".join(parts[1:])
    scheme = "http" if host.split(":")[0] in ("localhost", "127.0.0.1") else "https"
    return f"{scheme}://{host}/{path}/did.json" if path else f"{scheme}://{host}/.well-known/did.json"


def _did_keys(did: str) -> dict:
    """The Ed25519 keys in the did:web DID document of ``did``, the issuer we
    trust (never a DID the credential itself names: anyone can publish a DID
    document for a domain of their own)."""
    try:
        document = proofs.parse_json(_fetch(did_web_url(did), "application/did+json, application/json"))
        return proofs.keys_from_did_document(document, did)
    except (OSError, ValueError, TypeError, AttributeError, proofs.CredentialError):
        return {}


def cmd_verify_credential(args: argparse.Namespace) -> int:
    text = Path(args.file).read_bytes()  # verify_any decodes: UTF-8, a BOM allowed
    # The issuer we vouch for: this academy's did:web (of its public address), or one named on purpose.
    expected = args.issuer or proofs.did_web(address.public_url())
    trusted = keys.public_keys(extra_file=args.keys)
    try:
        try:
            verified = proofs.verify_any(text, trusted)
        except proofs.UnknownKey:
            trusted = {**_did_keys(expected), **trusted}
            verified = proofs.verify_any(text, trusted)
    except proofs.CredentialError as e:
        print(f"NOT VALID ({e.kind}): {e}")
        return 1
    credential = verified.credential
    issuer_did = openbadges.summary(credential)["issuer_did"]
    # Without PUBLIC_URL this process cannot know the port the app served on when it signed
    # (make run PORT=...): a credential signed by this academy's own key names whichever
    # address the app had then, and that issuer is ours.
    ours = not args.issuer and not address.configured() and verified.kid in keys.local_public_keys()
    if issuer_did != expected and not ours:
        print(f"NOT VALID (other_issuer): issued by {issuer_did}, not by {expected} (see --issuer)")
        return 1
    checked = False
    revoked = False
    unchecked = "revocation unknown"
    list_url = args.status_url
    try:
        list_url = list_url or statuslist.index_of(credential.get("credentialStatus"))[0]
        document = _fetch(list_url, "application/vc, application/json")
    except (OSError, ValueError) as e:
        note = f"revocation not checked: the status list could not be fetched ({e})"
    else:
        try:
            revoked = openbadges.is_revoked(credential, document, trusted)
            note, checked = f"revocation checked against {list_url}", True
        except statuslist.StatusListExpired as e:
            # A genuine but old list (N-7): replayed, it would hide a later revocation.
            note = f"revocation not checked: {e}"
            unchecked = f"the status list at {list_url} is not current, so a revocation since may be missing"
        except ValueError as e:  # CredentialError and StatusListError are ValueErrors
            note = f"revocation not checked: the status list at {list_url} was refused ({e})"
    info = openbadges.summary(credential)
    if revoked:
        print(f"NOT VALID (revoked) {info['id']}")
        print(f"  name:       {info['name']}")
        print(f"  ({note})")
        # The list's bit means "no longer current": revoked by the issuer or replaced by a reissue.
        base = str(credential.get("id", "")).rpartition("/credentials/")[0]
        print(f"  (revoked, or replaced by a newer certificate: {base}/api/verify/{info['id']} says which)")
        return 1
    suites = " + ".join(verified.suites)
    if verified.form == "jwt":
        proof = "VC-JWT (EdDSA)" + (f", with Data Integrity {suites} inside" if suites else "")
    else:
        proof = f"Data Integrity {suites}"
    print(f"VALID {info['id']}")
    print(f"  name:       {info['name']}")
    print(f"  course:     {info['course']}")
    print(f"  score:      {info['score']}%")
    print(f"  passed on:  {info['pass_date']}")
    print(f"  issuer:     {info['issuer']} ({info['issuer_did']}, key {verified.kid})")
    print(f"  proof:      {proof}")
    print(f"  ({note})")
    if not checked and not args.offline:
        # The signature is good but a revoked credential would look the same:
        # fail closed unless the caller asked for the signature alone.
        print(f"UNCHECKED: {unchecked} (use --offline to accept the signature alone)")
        return 2
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    if args.file and Path(args.file).suffix.lower() in (".json", ".jwt"):
        return cmd_verify_credential(args)
    if args.id:
        with _session() as session:
            result = verify.lookup(session=session, text=args.id)
            code = _show(result, offline=False)
            if result.status in ("revoked", "replaced") and result.id:
                # The operator sees what the public does not: the admin's words, the replacement.
                row = store.get_certificate(session=session, cert_id=result.id)
                print(f"  recorded reason: {row.revoked_reason}")
                if row.replaced_by:
                    print(f"  replaced by: {row.replaced_by}")
            return code
    if not args.file:
        print("give a PDF file or --id ID", file=sys.stderr)
        return 2
    data = Path(args.file).read_bytes()
    return _show(verify.verify_pdf(data, keys_file=args.keys), offline=True)


def cmd_revoke(args: argparse.Namespace) -> int:
    with _session() as session:
        cert = store.revoke(
            session=session, cert_id=args.id, actor_id=None, reason=args.reason, disqualify=args.disqualify
        )
    print(f"revoked {cert.id}: {cert.revoked_reason}")
    if cert.disqualified:
        print("  its learner gets no new certificate until: python -m certificates lift " + cert.id)
    return 0


def cmd_lift(args: argparse.Namespace) -> int:
    with _session() as session:
        cert = store.lift_disqualification(session=session, cert_id=args.id, actor_id=None, reason=args.reason)
    print(f"lifted the disqualification of {cert.id}; it stays revoked")
    return 0


def cmd_rotate_key(_args: argparse.Namespace) -> int:  # every command takes the parsed args
    key = keys.rotate_key()
    print(f"new active key {key.kid}; old keys stay for verifying")
    return 0


def cmd_add_checks(_args: argparse.Namespace) -> int:
    """Exit 1 when a row's signature does not verify (named; it is left as it was)."""
    with _session() as session:
        done = store.add_checks(session=session)
    print(f"{done.rows} certificates read; {done.added} given their check, "
          f"{done.sealed} their revocation state's check (as the database holds it now)")
    for cert_id in done.refused:
        print(f"  {cert_id}: its signature does not verify, left without a check")
    return 1 if done.refused else 0


def cmd_public_key(args: argparse.Namespace) -> int:
    if args.json:
        print(keys.export_public_keys_json())
        return 0
    for info in keys.public_key_info():
        print(f"# kid {info.kid}{' (active)' if info.active else ''}; raw base64 {info.raw_b64}")
        print(info.pem, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m certificates", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("issue", help="issue a certificate and write its PDF")
    p.add_argument("--name", required=True)
    p.add_argument("--score", type=float, help="percent (default with --learner: the attempt's)")
    p.add_argument("--lang", choices=languages(), default="en")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--learner", metavar="EMAIL", help="tie it to this learner's passed attempt")
    p.add_argument("--date", help="pass date YYYY-MM-DD (default: the attempt's, or today)")
    p.set_defaults(func=cmd_issue)

    p = sub.add_parser(
        "verify", help="check a PDF or an Open Badges credential, or an ID in the database"
    )
    p.add_argument("file", nargs="?", type=Path, help="certificate PDF, or credential .json/.jwt")
    p.add_argument("--id", help="look the ID up in the database (sees revocation)")
    p.add_argument("--keys", type=Path, help="extra public keys file (from public-key --json)")
    p.add_argument(
        "--status-url",
        help="fetch the revocation list here instead of the credential's own URL",
    )
    p.add_argument("--issuer", metavar="DID",
                   help="the issuer to trust for a credential (default: did:web of the public address, "
                        "PUBLIC_URL; without it, whichever address this academy's own keys signed)")
    p.add_argument("--offline", action="store_true",
                   help="for a credential: accept a good signature when revocation cannot be checked")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("revoke", help="revoke a certificate")
    p.add_argument("id")
    p.add_argument("--reason", required=True)
    p.add_argument("--disqualify", action="store_true",
                   help="for cause: no new certificate for its learner until 'lift'")
    p.set_defaults(func=cmd_revoke)

    p = sub.add_parser("lift", help="let a disqualified learner claim a certificate again")
    p.add_argument("id")
    p.add_argument("--reason", help="kept in the audit trail")
    p.set_defaults(func=cmd_lift)

    p = sub.add_parser("rotate-key", help="make a new active issuer key")
    p.set_defaults(func=cmd_rotate_key)

    p = sub.add_parser("add-checks", help="give rows issued before the keyed checks theirs, each "
                       "once its signature verifies (look-ups of such rows check Ed25519 until then, and "
                       "do not trust a revocation state without its check)")
    p.set_defaults(func=cmd_add_checks)

    p = sub.add_parser("public-key", help="print the issuer public keys")
    p.add_argument("--json", action="store_true", help="JSON for verify --keys")
    p.set_defaults(func=cmd_public_key)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (errors.CertificateError, ids.InvalidId) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
