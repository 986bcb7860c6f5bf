"""``python -m certificates`` end to end on a temporary SQLite file and a
temporary secrets folder: the round trip in subprocesses, the rest through
its ``main(argv)`` in this process (the same code behind a cheaper door)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlmodel import Session

from academy.db import make_engine, migrate
from academy.models import Learner, QuizAttempt
from certificates.ids import parse_id
from tests.exercisepass import pass_required_exercises

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def env(tmp_path):
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'academy.db'}",
        "SECRETS_DIR": str(tmp_path / "secrets"),
        "PUBLIC_URL": "https://academy.example",
        "PYTHONPATH": str(ROOT),
    }


def cli(env, *args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "certificates", *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(name="cli")  # beside the function cli, which tests/test_cert_scripts.py imports
def cli_in_process(monkeypatch, capsys):
    """``cli(env, *args)``: ``certificates.__main__.main(argv)`` with ``env``'s database, secrets
    and public URL, its output and exit status as a CompletedProcess."""
    from academy import db
    from academy.settings import get_settings
    from certificates.__main__ import main

    def run(env, *args):
        for key in ("DATABASE_URL", "SECRETS_DIR", "PUBLIC_URL"):
            monkeypatch.setenv(key, env[key])
        get_settings.cache_clear()
        db.set_engine(None)
        capsys.readouterr()
        argv = [str(a) for a in args]
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's refusals
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            db.get_engine().dispose()
            db.set_engine(None)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["python", "-m", "certificates", *argv], code, out, err)

    yield run
    get_settings.cache_clear()


def test_issue_verify_revoke_round_trip(env, tmp_path):
    out = tmp_path / "zoe.pdf"
    issued = cli(
        env, "issue", "--name", "Zoë Ødegård", "--score", "92", "--lang", "en", "--out", out
    )
    assert issued.returncode == 0, issued.stderr
    cert_id = issued.stdout.split()[0]
    assert parse_id(cert_id) == cert_id
    assert f"https://academy.example/verify?id={cert_id}" in issued.stdout

    offline = cli(env, "verify", out)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert "VALID" in offline.stdout and "Zoë Ødegård" in offline.stdout

    online = cli(env, "verify", "--id", cert_id.lower())
    assert online.returncode == 0 and "Zoë Ødegård" in online.stdout

    typo = cert_id[:-1] + ("0" if cert_id[-1] != "0" else "1")
    assert cli(env, "verify", "--id", typo).returncode == 1
    assert "typo" in cli(env, "verify", "--id", typo).stdout

    revoked = cli(env, "revoke", cert_id, "--reason", "issued by mistake")
    assert revoked.returncode == 0, revoked.stderr
    after = cli(env, "verify", "--id", cert_id)
    assert (
        after.returncode == 1 and "revoked" in after.stdout and "issued by mistake" in after.stdout
    )

    # Rotation: the old PDF still verifies offline.
    assert cli(env, "rotate-key").returncode == 0
    assert cli(env, "verify", out).returncode == 0


def test_offline_verify_with_only_an_exported_key(cli, env, tmp_path):
    out = tmp_path / "c.pdf"
    assert (
        cli(
            env, "issue", "--name", "张伟", "--score", "88", "--lang", "zh", "--out", out
        ).returncode
        == 0
    )
    keys = tmp_path / "keys.json"
    exported = cli(env, "public-key", "--json")
    assert exported.returncode == 0
    keys.write_text(exported.stdout)
    stranger = {**env, "SECRETS_DIR": str(tmp_path / "stranger")}
    assert cli(stranger, "verify", out).returncode == 1  # no key known
    checked = cli(stranger, "verify", out, "--keys", keys)
    assert checked.returncode == 0 and "张伟" in checked.stdout
    assert not (tmp_path / "stranger").exists()  # a verifier creates no keys


def test_tampered_pdf_fails(cli, env, tmp_path):
    out = tmp_path / "c.pdf"
    assert (
        cli(
            env,
            "issue",
            "--name",
            "Nguyễn Thị Minh Khai",
            "--score",
            "90",
            "--lang",
            "nl",
            "--out",
            out,
        ).returncode
        == 0
    )
    from pypdf import PdfReader, PdfWriter

    # An attacker edits the signed token in the metadata (however pypdf encodes it).
    writer = PdfWriter(clone_from=PdfReader(out))
    token = str(writer.metadata["/Keywords"])
    assert token.startswith("dp-certificate:eyJ")
    writer.add_metadata({"/Keywords": token.replace("dp-certificate:eyJ", "dp-certificate:eyK", 1)})
    bad = tmp_path / "bad.pdf"
    with open(bad, "wb") as f:
        writer.write(f)
    assert cli(env, "verify", bad).returncode == 1
    assert cli(env, "verify", tmp_path / "c.pdf").returncode == 0


def learner_who_passed(env, email: str) -> None:
    """A learner with one passed quiz attempt (85 %) in the CLI's database."""
    engine = make_engine(env["DATABASE_URL"])
    migrate(engine)
    with Session(engine) as s:
        learner = Learner(email=email, password_hash="x")
        s.add(learner)
        s.commit()
        s.refresh(learner)
        pass_required_exercises(s, learner.id)  # the certificate's exercises (test_exercises_store)
        s.add(QuizAttempt(learner_id=learner.id, seed=1, status="finished", score=85, passed=True))
        s.commit()
    engine.dispose()


def test_issue_for_a_learner(cli, env, tmp_path):
    learner_who_passed(env, "khai@example.org")
    out = tmp_path / "k.pdf"
    missing = cli(
        env, "issue", "--name", "X", "--lang", "en", "--out", out, "--learner", "nobody@example.org"
    )
    assert missing.returncode == 1 and "no learner" in missing.stderr
    ok = cli(
        env,
        "issue",
        "--name",
        "Nguyễn Thị Minh Khai",
        "--lang",
        "nl",
        "--out",
        out,
        "--learner",
        "khai@example.org",
    )
    assert ok.returncode == 0, ok.stderr
    shown = cli(env, "verify", "--id", ok.stdout.split()[0])
    assert shown.returncode == 0 and "85" in shown.stdout and "khai@example.org" not in shown.stdout


def test_revoke_for_cause_blocks_until_lifted(cli, env, tmp_path):
    learner_who_passed(env, "bob@example.org")
    out = tmp_path / "b.pdf"
    claim = ("issue", "--name", "Bob", "--lang", "en", "--out", out, "--learner", "bob@example.org")
    first = cli(env, *claim)
    assert first.returncode == 0, first.stderr
    cert_id = first.stdout.split()[0]
    assert cli(env, *claim).stdout.split()[0] == cert_id  # the same one again, not a second
    other = cli(env, "issue", "--name", "Jane", "--lang", "en", "--out", out, "--learner", "bob@example.org")
    # Refused with the reason, not a traceback: the learner already holds cert_id.
    assert other.returncode == 1 and other.stderr.startswith("not issued:") and cert_id in other.stderr
    assert cli(env, "revoke", cert_id, "--reason", "exam fraud", "--disqualify").returncode == 0
    blocked = cli(env, *claim)
    assert blocked.returncode == 1 and blocked.stderr.startswith("not issued:")
    assert "Traceback" not in blocked.stderr
    assert cli(env, "lift", cert_id, "--reason", "appeal").returncode == 0
    again = cli(env, *claim)
    assert again.returncode == 0 and again.stdout.split()[0] != cert_id


def test_verify_refuses_a_multi_page_pdf(cli, env, tmp_path):
    from pypdf import PdfReader, PdfWriter

    out = tmp_path / "c.pdf"
    assert cli(env, "issue", "--name", "Ann", "--score", "90", "--out", out).returncode == 0
    writer = PdfWriter(clone_from=PdfReader(out))
    writer.add_blank_page()
    two = tmp_path / "two.pdf"
    with two.open("wb") as f:
        writer.write(f)
    checked = cli(env, "verify", two)
    assert checked.returncode == 1 and "pages" in checked.stdout


def test_add_checks_gives_old_rows_theirs_once_their_signature_verifies(cli, env, tmp_path):
    """Rows issued before the keyed check (issue #26) get it from ``add-checks``, each
    only after its Ed25519 signature verifies; an altered row is named and left alone."""
    from sqlalchemy import text

    from certificates import keys, signing

    made = []
    for name in ("Ann", "Ben", "Cai"):
        issued = cli(env, "issue", "--name", name, "--score", "90", "--out", tmp_path / f"{name}.pdf")
        assert issued.returncode == 0, issued.stderr
        made.append(issued.stdout.split()[0])
    engine = make_engine(env["DATABASE_URL"])
    with engine.begin() as conn:  # as before migration 0011: no check; and one row altered since
        conn.execute(text("UPDATE certificate SET check_mac = NULL"))
        conn.execute(text("UPDATE certificate SET payload = replace(payload, 'Cai', 'Eve') WHERE id = :i"),
                     {"i": made[2]})
    done = cli(env, "add-checks")
    assert done.returncode == 1 and done.stdout.startswith("3 certificates read; 2 given their check")
    assert f"{made[2]}: its signature does not verify" in done.stdout and made[0] not in done.stdout
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, check_mac FROM certificate")).all())
        stored = conn.execute(text("SELECT payload, signature FROM certificate WHERE id = :i"),
                              {"i": made[0]}).one()
    check = keys.check_key(Path(env["SECRETS_DIR"]))
    assert rows[made[0]] == signing.row_check(*stored, check) and rows[made[2]] is None
    assert "NOT VALID (bad_signature)" in cli(env, "verify", "--id", made[2]).stdout
    assert cli(env, "verify", "--id", made[1]).returncode == 0
    again = cli(env, "add-checks")  # nothing left to do but the altered row
    assert again.stdout.startswith("3 certificates read; 0 given their check") and again.returncode == 1
    engine.dispose()
