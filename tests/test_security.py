"""Security: no answer key before answering (page and websocket), admin pages and actions
refuse non-admins, passwords only as Argon2 hashes, the signing key nowhere public,
sign-in rate limited."""

from __future__ import annotations

import base64
import html
import re
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlmodel import Session, select
from streamlit.testing.v1 import AppTest

import certificates as certs
from academy import i18n
from academy.accounts import sign_up
from academy.db import session_scope
from academy.models import CertificateEvent, Learner
from app import ui
from benchmarks.quizkey import wrong_answer
from quizzes.bank import load_bank
from quizzes.engine import public_question
from tests.apptest import login_token

ROOT = Path(__file__).resolve().parent.parent
MAIN = str(ROOT / "app" / "main.py")
PASSWORD = "a long enough password"


def t(key: str, **values) -> str:
    return i18n.t(key, "en", **values)


def record_frames(page) -> list[bytes]:
    """Every websocket frame the page receives from the server, from now on."""
    frames: list[bytes] = []

    def on_socket(ws) -> None:
        ws.on("framereceived", lambda data: frames.append(data if isinstance(data, bytes) else data.encode()))

    page.on("websocket", on_socket)
    return frames


def dom(page) -> str:
    """The page's HTML, hidden parts included, with entities decoded."""
    return html.unescape(page.content())


def new_page(browser):
    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    return ctx, ctx.new_page()


# --- no answer key before the answer --------------------------------------------------------


def _chunk(text: str) -> str | None:
    """The longest plain stretch of a Markdown text: found verbatim in frames and in the page."""
    best = max((p.strip() for p in re.split(r"[*_`$\[\]{}()<>\\|#~]", text)), key=len)
    return best if len(best) >= 15 else None


def secrets_of(question, lang: str = "en") -> dict[str, str]:
    """The texts of a question that say which answer is right: every option's and its own explanation
    (numeric and ordering questions have only the latter, single-choice ones only the former)."""
    found = {f"option {i}": _chunk(o.explain.get(lang, "")) for i, o in enumerate(question.options)}
    found["question"] = _chunk((question.explain or {}).get(lang, ""))
    return {k: v for k, v in found.items() if v}


RIGHT_MARK = ":material/check_circle:"  # the quiz page's mark of a right option, as sent
FEEDBACK_MARKERS = (RIGHT_MARK, t("quiz.why_correct"), t("quiz.why_chosen"), t("quiz.correct_answer", answer="").strip())


@pytest.mark.browser
def test_no_explanation_or_key_reaches_the_browser_before_the_answer(server, browser, artifacts):
    from tests import browserkit as kit

    email, bank = "keyless@example.org", load_bank()
    ctx, page = new_page(browser)
    frames = record_frames(page)
    page.goto(f"{server.url}/account?lang=en")
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Kay Less", email=email, password=PASSWORD)
    kit.nav(page, "nav.quiz", "en")
    kit.button(kit.main(page), "quiz.start", "en").click()
    kit.see(page, re.compile(re.escape(t("quiz.question_of", n=1, total=12))))
    kit.wait_app(page)
    attempt = kit.open_attempt(server.env["DATABASE_URL"], email)
    questions = [bank.questions[item["question_id"]] for item in attempt.plan]
    # View questions up to the first single-choice one, answering none of them.
    pos = next(i for i, q in enumerate(questions) if q.type == "single")
    for n in range(pos):
        kit.button(kit.main(page), "quiz.next", "en").click()
        kit.see(page, re.compile(re.escape(t("quiz.question_of", n=n + 2, total=len(questions)))))
    kit.wait_app(page)

    def in_frames(texts) -> list[str]:
        received = b"".join(frames)
        return [s for s in texts if s.encode() in received]

    def in_page(texts) -> list[str]:
        shown = dom(page)
        return [s for s in texts if s in shown]

    def leaks(texts) -> list[str]:
        return sorted(set(in_frames(texts)) | set(in_page(texts)))

    on_screen = [_chunk(public_question(attempt.plan[pos], bank, "en").text)]
    assert in_frames(on_screen) == in_page(on_screen) == on_screen  # what we search is what arrives

    every_secret = [s for q in questions for s in secrets_of(q).values()]
    assert len(every_secret) >= 12
    assert leaks(every_secret) == []
    assert leaks(FEEDBACK_MARKERS) == []

    # Answer it (wrongly): now its explanations arrive, the others' still do not.
    item = attempt.plan[pos]
    kit.answer(page, public_question(item, bank, "en"), wrong_answer(item, bank, "en"), "en")
    kit.alert(page, t("quiz.wrong"))
    kit.wait_app(page)
    page.screenshot(path=str(artifacts / "security-explanation-after-answer.png"), full_page=True)
    q = questions[pos]
    chosen_idx = item["options"]["abcdefghijklmnopqrstuvwxyz".index(wrong_answer(item, bank, "en"))]
    right_idx = next(i for i, o in enumerate(q.options) if o.correct)
    shown_now = {k: v for k, v in secrets_of(q).items() if k in ("question", f"option {chosen_idx}", f"option {right_idx}")}
    assert f"option {chosen_idx}" in shown_now and f"option {right_idx}" in shown_now
    assert in_frames(shown_now.values()) == in_page(shown_now.values()) == list(shown_now.values())
    assert in_frames([RIGHT_MARK, t("quiz.why_correct")]) == [RIGHT_MARK, t("quiz.why_correct")]
    others = [s for i, other in enumerate(questions) if i != pos for s in secrets_of(other).values()]
    assert leaks(others) == []
    ctx.close()


# --- admin pages and actions ----------------------------------------------------------------------

ADMIN_TEXTS = (t("admin.make_admin_email"), t("admin.content"), t("admin_certs.revoke"), t("admin_certs.events"))


def _nav_links(page) -> list[str]:
    """The page names in the sidebar navigation (each link also holds its icon's name)."""
    links = page.get_by_test_id("stSidebarNav").get_by_role("link").all_inner_texts()
    return [text.strip().splitlines()[-1] for text in links]


def _make_learner(email: str, *, admin: bool = False) -> int:
    with session_scope() as s:
        learner = sign_up(session=s, email=email, password=PASSWORD, display_name=email.split("@")[0])
        learner.is_admin = admin
        s.add(learner)
    return learner.id


def _sign_in(page, server, email: str, password: str = PASSWORD) -> None:
    from tests import browserkit as kit

    page.goto(f"{server.url}/account?lang=en")
    kit.wait_app(page)
    form = page.get_by_test_id("stForm").filter(has=page.get_by_role("button", name=t("account.sign_in")))
    form.get_by_role("textbox", name=t("account.email"), exact=True).fill(email)
    form.get_by_role("textbox", name=t("account.password"), exact=True).fill(password)
    form.get_by_role("button", name=t("account.sign_in")).click()


@pytest.mark.browser
@pytest.mark.usefixtures("on_server_db")
def test_admin_page_is_not_there_for_guests_and_learners(server, browser):
    from tests import browserkit as kit

    _make_learner("plain-learner@example.org")
    _make_learner("real-admin@example.org", admin=True)
    for who in (None, "plain-learner@example.org", "real-admin@example.org"):
        ctx, page = new_page(browser)
        if who is not None:
            _sign_in(page, server, who)
            kit.see(page, re.compile(re.escape(t("account.welcome", name=who.split("@")[0]))))
            # The cookie is written by the end of that run; the next page load needs it.
            page.wait_for_function("() => document.cookie.includes('dpa_session=')", timeout=kit.WAIT)
        page.goto(f"{server.url}/admin?lang=en")
        kit.wait_app(page)
        if who == "real-admin@example.org":  # the control: the same URL works for an admin
            kit.see(page, t("admin.make_admin_email"))
            assert t("nav.admin") in _nav_links(page)
        else:
            kit.see(page, t("home.course_map"))  # fell back to Home
            assert not re.search(r"/admin(\?|$)", page.url), page.url
            assert t("nav.admin") not in _nav_links(page)
            shown = page.locator("body").inner_text()
            assert not [text for text in ADMIN_TEXTS if text in shown], who
        ctx.close()


@pytest.mark.usefixtures("app_db")
def test_admin_page_and_its_forms_refuse_non_admins():
    learner_id = _make_learner("learner@example.org")
    admin_id = _make_learner("boss@example.org", admin=True)

    def open_as(who: int) -> AppTest:
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.query_params["lang"] = "en"
        at.session_state["session_token"] = login_token(who)
        at.run()
        return at

    with pytest.raises(ValueError, match="Could not find a navigation page"):  # not registered for them
        open_as(learner_id).switch_page(ui.PAGE_PATHS["admin"])
    # The script run directly (as if Streamlit were tricked into it) stops before any form.
    direct = AppTest.from_file(str(ROOT / "app" / ui.PAGE_PATHS["admin"]), default_timeout=60)
    direct.session_state["lang"] = "en"
    direct.session_state["session_token"] = login_token(learner_id)
    direct.run()
    assert [e.value for e in direct.error] == [t("admin.refused")]
    assert not direct.text_input and not direct.button

    # An admin gets the forms; demoted, the next rerun refuses them too.
    at = open_as(admin_id)
    at.switch_page(ui.PAGE_PATHS["admin"])
    at.run()
    assert not at.exception and t("admin.learners") in [h.value for h in at.header]
    at.text_input[0].input("learner@example.org")
    with session_scope() as s:
        boss = s.get(Learner, admin_id)
        boss.is_admin = False
        s.add(boss)
    [b for b in at.button if b.label == t("admin.make_admin")][0].click()
    at.run()
    assert not [s.value for s in at.success]
    with session_scope() as s:
        assert s.exec(select(Learner.email).where(Learner.is_admin)).all() == []


def _tab(token: str, page: str | None = None) -> AppTest:
    """A browser tab of a signed-in learner: the state a sign-in leaves behind."""
    from academy.accounts import learner_for_token

    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["lang"] = "en"
    with session_scope() as s:
        at.session_state["learner_id"] = learner_for_token(session=s, token=token).id
    at.session_state["session_token"] = token
    at.run()
    if page:
        at.switch_page(ui.PAGE_PATHS[page])
        at.run()
    return at


def _signed_in(at: AppTest) -> bool:
    shown = [x.value for x in at.sidebar.text] + [x.value for x in at.sidebar.caption]
    return any(text.startswith(t("account.signed_in_as", name="")) for text in shown)


@pytest.mark.parametrize("how", ["sign_out", "sign_out_everywhere", "change_password"])
@pytest.mark.usefixtures("app_db")
def test_ending_a_session_ends_it_in_every_open_tab(how):
    """F-5: the other tab (same token) and another browser (its own token) are guests at
    their next run; with "sign out everywhere" and a password change the second browser too."""
    from tests.apptest import press

    learner_id = _make_learner("tabs@example.org")
    token, other_browser = login_token(learner_id), login_token(learner_id)
    acting, same_cookie, other = _tab(token, "account"), _tab(token), _tab(other_browser)
    assert _signed_in(acting) and _signed_in(same_cookie) and _signed_in(other)
    if how == "change_password":
        acting.expander[0]  # the form lives in the Security expander
        acting.text_input(key="pw_current").input(PASSWORD)
        acting.text_input(key="pw_new").input("a brand new password")
        [b for b in acting.button if b.label == t("account.change_password")][0].click()
        acting.run()
        assert t("account.password_changed") in [m.value for m in acting.success]
    else:
        press(acting, t(f"account.{how}"))
    same_cookie.run()
    other.run()
    # Which tab must now be a guest: the one sharing the token, the other browser's, or both.
    ended = {"sign_out": [same_cookie], "sign_out_everywhere": [same_cookie, other],
             "change_password": [other]}[how]
    for tab in (same_cookie, other):
        assert not tab.exception
        assert _signed_in(tab) == (tab not in ended)
    for tab in ended:
        assert tab.session_state["learner_id"] is None
        assert t("account.session_ended") in [m.value for m in tab.info]
    if how == "change_password":  # the tab that changed it (and its token's tabs) stay signed in
        acting.run()
        assert _signed_in(acting)


@pytest.mark.parametrize("how", ["sign_out", "sign_out_everywhere"])
@pytest.mark.usefixtures("app_db")
def test_the_run_that_signs_out_does_not_say_signed_in(how, monkeypatch):
    """N-18: the run that handles *Sign out everywhere* rendered "Signed in as …" in its
    sidebar; the rerun after it was a guest. AppTest shows only the rerun, so st.rerun is
    made a no-op here: what the sign-out run itself sends must already be a guest's sidebar."""
    import streamlit as st

    from tests.apptest import press

    acting = _tab(login_token(_make_learner("sidebar@example.org")), "account")
    assert _signed_in(acting)
    monkeypatch.setattr(st, "rerun", lambda *_args, **_kwargs: None)
    press(acting, t(f"account.{how}"))
    assert not acting.exception
    assert acting.session_state["learner_id"] is None
    assert not _signed_in(acting)
    assert t("account.guest") in [c.value for c in acting.sidebar.caption]


@pytest.mark.usefixtures("app_db")
def test_signing_out_clears_the_cookie_and_a_dead_token_too():
    """The cookie to write is a typed ``ui.CookieWrite`` in the session state, not a
    magic empty string: signing out, and a token the server no longer knows, clear it."""
    from tests import apptest
    from tests.apptest import press

    def cookie_scripts(at) -> list[str]:
        return [h.proto.body for h in at.get("html") if "document.cookie" in h.proto.body]

    learner_id = _make_learner("cookie@example.org")
    token = login_token(learner_id)
    acting = _tab(token, "account")
    press(acting, t("account.sign_out"))
    assert [c for c in cookie_scripts(acting) if "dpa_session=;" in c and "max-age=0" in c]
    # Another tab with the same token after sign-out: the server has closed it.
    dead = apptest.open_page("home", state={"session_token": token, "learner_id": learner_id})
    assert [c for c in cookie_scripts(dead) if "dpa_session=;" in c and "max-age=0" in c]
    fresh = _tab(login_token(learner_id))  # a live token is kept, not rewritten on every run
    assert cookie_scripts(fresh) == []


@pytest.mark.browser
@pytest.mark.usefixtures("on_server_db")
def test_sign_out_ends_the_other_tab_at_its_next_click(server, browser):
    """F-5 in a real browser: tab 2 (no reload) is a guest at its next navigation."""
    from tests import browserkit as kit

    email = "two-tabs@example.org"
    _make_learner(email)
    ctx, page = new_page(browser)
    _sign_in(page, server, email)
    welcome = re.compile(re.escape(t("account.welcome", name="two-tabs")))
    kit.see(page, welcome)
    page.wait_for_function("() => document.cookie.includes('dpa_session=')", timeout=kit.WAIT)
    tab2 = ctx.new_page()
    tab2.goto(f"{server.url}/account?lang=en")
    kit.wait_app(tab2)
    kit.see(tab2, welcome)
    kit.button(kit.main(page), "account.sign_out", "en").click()
    kit.alert(page, t("account.signed_out"))
    kit.nav(tab2, "nav.quiz", "en")
    kit.alert(tab2, t("account.session_ended"))
    sidebar = tab2.get_by_test_id("stSidebar").inner_text()
    assert t("account.guest") in sidebar and "two-tabs" not in sidebar
    ctx.close()


@pytest.mark.usefixtures("app_db")
def test_a_redeemed_admin_token_makes_an_admin_once():
    from academy.accounts import create_admin_token

    learner_id = _make_learner("future-admin@example.org")
    with session_scope() as s:
        token = create_admin_token(session=s)
    at = _tab(login_token(learner_id), "account")
    at.text_input(key="admin_token").input(token)
    [b for b in at.button if b.label == t("account.redeem_admin_token")][0].click()
    at.run()
    assert t("account.admin_token_redeemed") in [m.value for m in at.success]
    at.switch_page(ui.PAGE_PATHS["admin"])  # registered for an admin now
    at.run()
    assert not at.exception and t("admin.learners") in [h.value for h in at.header]


def test_revoking_needs_an_admin(session):
    learner = sign_up(session=session, email="someone@example.org", password=PASSWORD)
    cert = certs.issue_certificate(session=session, learner_id=None, attempt_id=None, name="Ada Lovelace",
                                   lang="en", score=95, pass_date="2026-01-15")
    for actor in (learner.id, 999_999):
        with pytest.raises(certs.NotAllowed):
            certs.revoke(session=session, cert_id=cert.id, actor_id=actor, reason="I do not like it")
    assert certs.lookup(session=session, text=cert.id).status == "valid"
    actions = session.exec(select(CertificateEvent.action).where(CertificateEvent.certificate_id == cert.id)).all()
    assert actions == ["issued"]


# --- passwords ------------------------------------------------------------------------------------


@pytest.mark.browser
def test_password_is_stored_only_as_an_argon2_hash(server, browser):
    from argon2 import PasswordHasher

    from tests import browserkit as kit

    password = "correct horse battery staple 7f3a"
    ctx, page = new_page(browser)
    frames = record_frames(page)
    page.goto(f"{server.url}/account?lang=en")
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Hash Only", email="hash-only@example.org", password=password)
    ctx.close()
    db_file = Path(server.env["DATABASE_URL"].removeprefix("sqlite:///"))
    for path in db_file.parent.glob(db_file.name + "*"):  # the database, its WAL and shared memory
        assert password.encode() not in path.read_bytes(), path.name
    with sqlite3.connect(db_file) as conn:
        (stored,) = conn.execute("SELECT password_hash FROM learner WHERE email = 'hash-only@example.org'").fetchone()
    assert stored.startswith("$argon2id$") and PasswordHasher().verify(stored, password)
    assert password not in (server.base / "server.log").read_text(errors="replace")
    assert password.encode() not in b"".join(frames)  # never echoed back to the browser


# --- the certificate signing key -----------------------------------------------------------------


PEM_PRIVATE = [b"-----BEGIN " + kind + b"PRIVATE KEY-----" for kind in (b"", b"OPENSSH ", b"EC ", b"RSA ")]


def _key_material(secrets_dir: Path) -> list[bytes]:
    """Every private key of a secrets folder (and the rows' check key) in the forms it could leak in."""
    from cryptography.hazmat.primitives import serialization

    found = []
    for path in (secrets_dir / "certificate-keys").glob("*.key"):
        pem = path.read_bytes()
        key = serialization.load_pem_private_key(pem, None)
        raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
        body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
        found += [body, raw, raw.hex().encode(), base64.b64encode(raw).rstrip(b"="),
                  base64.urlsafe_b64encode(raw).rstrip(b"=")]
    assert found, "no private key in " + str(secrets_dir)
    check = secrets_dir / "certificate-keys" / "row-check"  # the rows' HMAC key (keys.check_key)
    assert check.exists(), "no row-check key in " + str(secrets_dir)
    raw = bytes.fromhex(check.read_text().strip())
    found += [check.read_bytes().strip(), raw, base64.b64encode(raw).rstrip(b"="),
              base64.urlsafe_b64encode(raw).rstrip(b"=")]
    return found


@pytest.mark.browser
@pytest.mark.usefixtures("on_server_db")
def test_signing_key_is_in_no_page_log_or_repository(server, browser):
    from tests import browserkit as kit

    with session_scope() as s:
        cert = certs.issue_certificate(session=s, learner_id=None, attempt_id=None, name="Key Keeper",
                                       lang="en", score=90, pass_date="2026-02-01")
    secret = _key_material(Path(server.env["SECRETS_DIR"]))

    ctx, page = new_page(browser)
    frames = record_frames(page)
    page.goto(f"{server.url}/verify?lang=en&id={cert.id}")
    kit.wait_app(page)
    kit.alert(page, certs.texts("en")["status"]["valid"])
    page.get_by_text(t("verify.public_keys")).click()  # open the public keys
    page.get_by_text("BEGIN PUBLIC KEY").first.wait_for()
    received, shown = b"".join(frames), dom(page).encode()
    ctx.close()
    assert b"PRIVATE KEY" not in received and b"PRIVATE KEY" not in shown
    assert [s for s in secret if s in received or s in shown] == []
    assert b"PRIVATE KEY" not in certs.export_public_keys_json().encode()

    log = (server.base / "server.log").read_bytes()
    assert [s for s in secret if s in log] == [] and b"PRIVATE KEY" not in log

    # The repository: nothing tracked or about to be, and the default secrets folder is ignored.
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    offenders = []
    for name in filter(None, listed):
        path = ROOT / name.decode()
        if path.is_file():
            data = path.read_bytes()
            if any(marker in data for marker in PEM_PRIVATE) or any(s in data for s in secret):
                offenders.append(name.decode())
    assert offenders == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "data/secrets/certificate-keys/x.key"], cwd=ROOT)
    assert ignored.returncode == 0, "the default secrets folder is not ignored by git"


def test_session_key_is_never_empty_when_two_requests_create_it(tmp_path, monkeypatch):
    """Two first requests at once: both must get the one real key (an empty one signs forgeable tokens)."""
    from academy import keystore
    from academy.settings import get_settings

    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "secrets"))
    get_settings.cache_clear()
    real_token_hex = keystore.secrets.token_hex

    def slow_token_hex(n: int) -> str:  # widen the window between creating the file and writing it
        time.sleep(0.2)
        return real_token_hex(n)

    monkeypatch.setattr(keystore.secrets, "token_hex", slow_token_hex)
    got: list[bytes | Exception] = []
    start = threading.Barrier(8)

    def first_request() -> None:
        start.wait()
        try:
            got.append(keystore.session_secret())
        except Exception as exc:  # noqa: BLE001
            got.append(exc)

    threads = [threading.Thread(target=first_request) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    monkeypatch.undo()
    get_settings.cache_clear()
    assert all(isinstance(g, bytes) and len(g) == 64 for g in got), got
    assert len(set(got)) == 1


# --- sign-in rate limit ----------------------------------------------------------------------------


@pytest.mark.browser
def test_sixth_wrong_sign_in_is_rate_limited(server, browser, on_server_db):
    from academy.settings import get_settings
    from tests import browserkit as kit

    email = "limited@example.org"
    _make_learner(email)
    db_file = server.env["DATABASE_URL"].removeprefix("sqlite:///")

    def failures() -> int:
        """Failures counted for this address (from this one client, the browser on localhost)."""
        with sqlite3.connect(db_file) as conn:
            row = conn.execute("SELECT count FROM signincounter WHERE key = ?", (f"address:{email}",)).fetchone()
        return row[0] if row else 0

    ctx, page = new_page(browser)
    limit = get_settings().signin_max_failures
    for n in range(1, limit + 1):
        _sign_in(page, server, email, "wrong password, try again")
        kit.alert(page, t("account.err_credentials"))
        for _ in range(100):
            if failures() == n:
                break
            page.wait_for_timeout(100)
        assert failures() == n
    # The sixth is refused before the password is even checked.
    _sign_in(page, server, email, "wrong password, try again")
    kit.alert(page, t("account.err_rate_limited"))
    kit.wait_app(page)
    assert t("account.sign_out") not in page.locator("body").inner_text()
    assert failures() == limit
    ctx.close()
    with Session(on_server_db) as s:  # the account is locked for now, even with the right password
        from academy.accounts import AccountError, sign_in

        with pytest.raises(AccountError) as refused:
            sign_in(session=s, email=email, password=PASSWORD)
        assert refused.value.key == "account.err_rate_limited"


# --- who the client is (N-5) -------------------------------------------------------------------


@pytest.mark.parametrize(("peer", "header", "hops", "expected"), [
    ("::ffff:127.0.0.1", None, 0, "local"),  # nginx on this host, reached over a dual-stack socket
    ("127.0.0.2", None, 0, "local"),
    ("::ffff:203.0.113.9", None, 0, "203.0.113.9"),
    ("::ffff:127.0.0.1", "9.9.9.9, ::ffff:198.51.100.7", 1, "198.51.100.7"),
])
def test_the_page_counts_loopback_in_any_spelling_as_no_client(monkeypatch, peer, header, hops, expected):
    """N-5: ``ui.client()``, the key of every per-client limit, is one spelling per client and
    no client for loopback however the socket spells it."""
    from types import SimpleNamespace

    from academy.settings import get_settings

    monkeypatch.setenv("TRUSTED_PROXY_HOPS", str(hops))
    get_settings.cache_clear()
    headers = {"X-Forwarded-For": header} if header else {}
    monkeypatch.setattr(ui.st, "context", SimpleNamespace(ip_address=peer, headers=headers))
    try:
        assert ui.client() == expected
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


# --- the database file ------------------------------------------------------------------------------


def test_database_files_are_readable_by_the_owner_only(tmp_path):
    """F-18: the SQLite file, its -wal and -shm are 0600 and a folder we create is 0700,
    also for a database that an older version left 0644."""
    import os
    import stat

    from sqlalchemy import text

    from academy.db import make_engine

    old = tmp_path / "old.db"
    old.touch(mode=0o644)
    old.chmod(0o644)
    for db_file in (tmp_path / "new" / "academy.db", old):
        engine = make_engine(f"sqlite:///{db_file}")
        with engine.begin() as conn:  # a write: WAL mode creates -wal and -shm
            conn.execute(text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
            files = [p for p in db_file.parent.iterdir() if p.name.startswith(db_file.name)]
            assert {p.name.removeprefix(db_file.name) for p in files} >= {"", "-wal", "-shm"}
            modes = {p.name: oct(stat.S_IMODE(os.stat(p).st_mode)) for p in files}
        engine.dispose()
        assert set(modes.values()) == {"0o600"}, modes
    assert oct(stat.S_IMODE(os.stat(tmp_path / "new").st_mode)) == "0o700"


def test_the_server_makes_the_secrets_folder_0700_at_start_up(tmp_path, monkeypatch):
    """Review 2026-12-04 I-5: a secrets folder that existed before the first start kept its
    0755; only its ``certificate-keys`` was made 0700. The server's start-up (``streamlit run``
    imports app/main.py as a module) makes it 0700; one it cannot change and others may enter
    stops it with the reason."""
    import os
    import runpy
    import stat

    from streamlit.runtime.app_session import AppSession

    from academy import keystore
    from academy.settings import ROOT, get_settings

    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    monkeypatch.setenv("SECRETS_DIR", str(folder))
    get_settings.cache_clear()
    before = AppSession._handle_clear_cache_request
    try:
        runpy.run_path(str(ROOT / "app" / "main.py"), run_name="main")
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        folder.chmod(0o755)

        def refused(*_args, **_kwargs):
            raise PermissionError("not the owner")

        with monkeypatch.context() as patched:
            patched.setattr(keystore.os, "chmod", refused)
            with pytest.raises(RuntimeError, match="open to others"):
                keystore.secrets_dir()
        folder.chmod(0o700)
        with monkeypatch.context() as patched:
            patched.setattr(keystore.os, "chmod", refused)
            assert keystore.secrets_dir() == folder  # already private: fine as it is
    finally:
        AppSession._handle_clear_cache_request = before
        monkeypatch.undo()
        get_settings.cache_clear()


def test_lab_queue_files_are_readable_by_the_owner_only(tmp_path):
    """N-16: huey's SQLite queue (``labqueue.db``), its -wal and -shm are 0600 like the
    database, also when an older version left the file 0644."""
    import os
    import stat

    from academy.labruns import queue as labqueue

    old = tmp_path / "old" / "labqueue.db"
    old.parent.mkdir()
    old.touch(mode=0o644)
    old.chmod(0o644)
    for queue_file in (tmp_path / "new" / "labqueue.db", old):
        huey, task = labqueue._huey("cpu", "", str(queue_file))
        task(1)  # a write: WAL mode creates -wal and -shm
        files = [p for p in queue_file.parent.iterdir() if p.name.startswith(queue_file.name)]
        assert {p.name.removeprefix(queue_file.name) for p in files} >= {"", "-wal", "-shm"}
        modes = {p.name: oct(stat.S_IMODE(os.stat(p).st_mode)) for p in files}
        huey.storage.close()
        assert set(modes.values()) == {"0o600"}, modes


def test_an_in_memory_database_leaves_no_file(tmp_path, monkeypatch):
    from academy.db import make_engine

    monkeypatch.chdir(tmp_path)
    make_engine("sqlite://").dispose()
    make_engine("sqlite:///:memory:").dispose()
    assert list(tmp_path.iterdir()) == []
