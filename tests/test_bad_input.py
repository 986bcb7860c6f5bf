"""Hostile and odd input in every form and URL parameter (AppTest).

Each input gets a clear message or is shown as typed; nothing crashes (no
``at.exception``), nothing is executed (it is stored and shown as text),
nothing is lost (a refused quiz answer leaves the earlier ones). Widget
values are set with ``set_value``, which skips the browser's ``max_chars``
as a hand-made websocket message would; Streamlit cuts them on the server.
"""

from __future__ import annotations

import functools

import pytest
from sqlmodel import select
from streamlit.testing.v1 import AppTest

import certificates as certs
from academy import i18n, lessons
from academy.db import session_scope
from academy.models import Certificate, Learner, QuizAnswer, QuizAttempt
from benchmarks.quizkey import right_answer
from quizzes import store
from quizzes.bank import load_bank
from quizzes.engine import draw_attempt
from tests import apptest, factories
from tests.apptest import MAIN, press

PASSWORD = "long enough pw"

HOSTILE = {
    "10k chars": "x" * 10_000,
    "markup": '<b>&"\'</b>',
    "script tag": "<script>alert(1)</script>",
    "img onerror": '<img src=x onerror="alert(1)">',
    "markdown link": "*bold* _it_ [click](javascript:alert(1))",
    "sql": "'; DROP TABLE learner; --",
    "sql or": "' OR '1'='1",
    "nul": "a\x00b",
    "escape": "\x1b[31mred\x1b[0m",
    "rtl override": "\u202egnp.exe",
    "arabic": "مرحبا بالعالم",
    "hebrew": "שלום עולם",
    "emoji": "🎓🚀👩\u200d💻",
    "cjk": "张伟 数据并行",
    "blank": "   ",
}


# Signed up the real way (a browser or AppTest signs in with PASSWORD), the certificate's
# exercises passed (tested in test_exercises_store).
learner = functools.partial(factories.learner, password=PASSWORD, display_name="Ada", exercises=True)


# Where every try costs an Argon2 hash (half a second here), a sample of the table.
COSTLY = ("10k chars", "markup", "script tag", "sql or", "nul", "rtl override", "arabic", "emoji", "blank")
PASSWORDS = {
    "10k chars": "x" * 10_000,
    "blank": "   ",
    "short emoji": "🎓🚀👩\u200d💻",
    "markup": '<b>&"\'</b>',
    "sql": "'; DROP TABLE learner; --",
    "nul inside": "pass\x00word 12",
    "rtl arabic": "\u202eمرحبا بالعالم",
    "emoji": "🎓" * 10,
}


def t(key: str, **values) -> str:
    return i18n.t(key, "en", **values)


def open_page(page: str, learner_id: int | None = None, **params: str) -> AppTest:
    at = apptest.open_page(page, "en", learner_id, **params)
    assert not at.exception, at.exception
    return at


def messages(at: AppTest) -> list[str]:
    return [m.value for kind in (at.error, at.warning, at.success, at.info) for m in kind]


def shown_name(at: AppTest, name: str) -> bool:
    """Whether the page shows ``name`` as escaped text in its own direction (ui.person_name)."""
    import html

    return f'<div dir="auto" style="font-size:1.25rem;font-weight:600">{html.escape(name)}</div>' in [
        h.proto.body for h in at.get("html")]


def as_saved(name: str) -> str:
    """A display name as the account code stores it: NFC, no control or bidi-format
    characters, single spaces, at most 200 characters."""
    from academy.accounts import clean_display_name

    return clean_display_name(name)




def check(problems: list[str], case: str, at: AppTest, ok: bool, what: str) -> None:
    """Collect a failed expectation (every case runs; the test lists them all)."""
    if at.exception:
        problems.append(f"{case}: exception {at.exception[0].message[:200]}")
    elif not ok:
        problems.append(f"{case}: {what}; shown {[m[:80] for m in messages(at)]}")


# --- accounts ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("app_db")
def test_sign_up_names_are_kept_as_typed():
    at, problems = open_page("account"), []
    for n, case in enumerate(COSTLY):
        name, email = HOSTILE[case], f"name{n}@example.org"
        at.text_input(key="up_name").set_value(name)
        at.text_input(key="up_email").set_value(email)
        at.text_input(key="up_password").set_value(PASSWORD)
        press(at, t("account.sign_up"))
        with session_scope() as s:
            stored = s.exec(select(Learner.display_name).where(Learner.email == email)).first()
        expected = as_saved(name)  # the browser cannot send more than 200 characters
        welcome = t("account.welcome", name=expected or email)  # st.text: shown as typed, no Markdown
        check(problems, case, at, stored == expected and welcome in [x.value for x in at.text],
              f"stored {stored!r}")
        press(at, t("account.sign_out"))
    assert problems == []


EMAILS = {
    **{case: (value, False) for case, value in HOSTILE.items()},
    "nul inside": ("a\x00b@example.org", False),
    "rtl override inside": ("\u202eevil@example.org", False),
    "escape inside": ("\x1bx@example.org", False),
    "tag local part": ("<script>@example.org", False),
    "tag after domain": ("x@example.org<script>", False),
    "quote": ("' OR '1'='1'@example.org", False),
    "10k before @": ("x" * 10_000 + "@example.org", False),  # cut to 254 characters: no @ left
    "two @": ("a@b@example.org", False),
    "cjk local part": ("张伟@example.org", True),
    "upper case": ("  MiXeD@Example.ORG ", True),
}


@pytest.mark.usefixtures("app_db")
def test_sign_up_emails_are_checked():
    at, problems, known = open_page("account"), [], set()
    for case, (email, ok) in EMAILS.items():
        at.text_input(key="up_name").set_value("Ada")
        at.text_input(key="up_email").set_value(email)
        at.text_input(key="up_password").set_value(PASSWORD)
        press(at, t("account.sign_up"))
        with session_scope() as s:
            new = set(s.exec(select(Learner.email)).all()) - known
        known |= new
        if ok:
            check(problems, case, at, new == {email.strip().lower()} and t("account.created") in messages(at),
                  f"stored {new}")
            press(at, t("account.sign_out"))
        else:
            check(problems, case, at, new == set() and t("account.err_email") in messages(at), f"stored {new}")
    assert problems == []


@pytest.mark.usefixtures("app_db")
def test_sign_up_passwords_round_trip_or_get_a_message():
    at, problems = open_page("account"), []
    for n, (case, password) in enumerate(PASSWORDS.items()):
        email = f"pw{n}@example.org"
        at.text_input(key="up_name").set_value("Ada")
        at.text_input(key="up_email").set_value(email)
        at.text_input(key="up_password").set_value(password)
        press(at, t("account.sign_up"))
        if len(password) < 10 or len(password) > 1024:
            key = "account.err_password_short" if len(password) < 10 else "account.err_password_long"
            check(problems, case, at, t(key) in messages(at) and at.session_state["learner_id"] is None, key)
            continue
        check(problems, case, at, t("account.created") in messages(at), "not created")
        press(at, t("account.sign_out"))
        at.text_input(key="in_email").set_value(email)  # the same password, byte for byte, signs in
        at.text_input(key="in_password").set_value(password)
        press(at, t("account.sign_in"))
        check(problems, case, at, at.session_state["learner_id"] is not None, "could not sign in again")
        press(at, t("account.sign_out"))
    assert problems == []


@pytest.mark.usefixtures("app_db")
def test_sign_in_with_hostile_credentials_is_refused():
    victim = learner(email="victim@example.org")
    at, problems = open_page("account"), []
    tries = {**{case: (HOSTILE[case], HOSTILE[case]) for case in COSTLY if case != "10k chars"},
             "comment out the password check": ("victim@example.org' --", "anything at all"),
             "always true": ("victim@example.org", "' OR '1'='1"),
             "10k password": ("victim@example.org", "x" * 10_000)}
    for case, (email, password) in tries.items():
        at.text_input(key="in_email").set_value(email)
        at.text_input(key="in_password").set_value(password)
        press(at, t("account.sign_in"))
        check(problems, case, at, at.session_state["learner_id"] is None
              and t("account.err_credentials") in messages(at), "not refused")
    assert problems == []
    # The victim lost nothing: the right password still works (4 failures, under the limit).
    at.text_input(key="in_email").set_value("victim@example.org")
    at.text_input(key="in_password").set_value(PASSWORD)
    press(at, t("account.sign_in"))
    assert at.session_state["learner_id"] == victim


@pytest.mark.usefixtures("app_db")
def test_profile_names_are_kept_as_typed():
    learner_id = learner(email="profile@example.org")
    at, problems = open_page("account", learner_id), []
    for case, name in HOSTILE.items():
        at.text_input[0].set_value(name)
        press(at, t("account.save_profile"))
        saved = t("account.profile_saved") in messages(at)
        at.run()  # the sidebar shows the name from the next run on
        with session_scope() as s:
            row = s.get(Learner, learner_id)
        expected = as_saved(name)
        shown = t("account.signed_in_as", name=expected or row.email)  # st.text: as typed
        check(problems, case, at, saved and row.display_name == expected and row.email == "profile@example.org"
              and shown in [x.value for x in at.sidebar.text], f"stored {row.display_name!r}")
    assert problems == []


# --- quiz numeric answers ---------------------------------------------------------------------------


def numeric_attempt(learner_id: int) -> tuple[QuizAttempt, int, int]:
    """A new attempt with a numeric question at `pos` and question `other` already answered."""
    bank = load_bank()
    seed = next(s for s in range(1000)
                if bank.questions[draw_attempt(bank, seed=s, k=12)[1]["question_id"]].type == "numeric")
    with session_scope() as s:
        old = store.current_attempt(session=s, learner_id=learner_id)
        if old is not None:
            store.finish_attempt(session=s, attempt_id=old.id, learner_id=learner_id)
        attempt = store.start_attempt(session=s, learner_id=learner_id, lang="en", seed=seed, bank=bank)
        store.record_answer(session=s, attempt_id=attempt.id, learner_id=learner_id, position=0,
                            response=right_answer(attempt.plan[0], bank, "en"), lang="en", bank=bank)
    return attempt, 1, 0


def quiz_at(learner_id: int, attempt: QuizAttempt, pos: int) -> AppTest:
    at = apptest.open_page("quiz", "en", learner_id, state={f"quiz_pos_{attempt.id}": pos})
    assert not at.exception, at.exception
    return at


def answers(attempt_id: int) -> dict[int, dict | str | list]:
    with session_scope() as s:
        rows = s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt_id)).all()
    return {a.position: a.response for a in rows}


REFUSED_NUMBERS = {
    "1e309": "quiz_errors.not_finite",
    "-1e999": "quiz_errors.not_finite",
    "NaN": "quiz_errors.not_a_number",
    "inf": "quiz_errors.not_a_number",
    "0x10": "quiz_errors.not_a_number",
    "1/2": "quiz_errors.not_a_number",
    "12abc": "quiz_errors.not_a_number",
    "1_000": "quiz_errors.not_a_number",
    "٣٫٥": "quiz_errors.not_a_number",  # Arabic-Indic digits with the Arabic decimal mark
    "1 2": "quiz_errors.multiple_numbers",
    "1,2,3": "quiz_errors.not_a_number",
    "\x00": "quiz_errors.not_a_number",
    "<script>alert(1)</script>": "quiz_errors.not_a_number",
    "'; DROP TABLE quizanswer; --": "quiz_errors.not_a_number",
    "🎓": "quiz_errors.not_a_number",
    # Markdown, an icon code, LaTeX and a backtick: shown as typed, in a code span
    "**5**[here](http://127.0.0.1/)": "quiz_errors.not_a_number",
    ":material/home: $x^2$": "quiz_errors.not_a_number",
    "1`2": "quiz_errors.not_a_number",
}


def typed_in_markdown(typed: str) -> str:
    """What the page puts in a message for text a learner typed (app.ui.verbatim)."""
    fence = "``" if "`" in typed else "`"
    return f"{fence} {typed} {fence}"


@pytest.mark.usefixtures("app_db")
def test_unreadable_numbers_get_a_message_and_lose_nothing():
    learner_id = learner(email="numbers@example.org")
    attempt, pos, other = numeric_attempt(learner_id)
    before = answers(attempt.id)
    at, problems = quiz_at(learner_id, attempt, pos), []
    for typed, key in REFUSED_NUMBERS.items():
        at.text_input(key=f"ans_{attempt.id}_{pos}").set_value(typed)
        press(at, t("quiz.submit"))
        expected = i18n.t(key, "en", text=typed_in_markdown(" ".join(typed.strip().splitlines())))
        check(problems, repr(typed), at, [e.value for e in at.error] == [expected] and answers(attempt.id) == before,
              f"expected {expected!r}")
    at.text_input(key=f"ans_{attempt.id}_{pos}").set_value("   ")
    press(at, t("quiz.submit"))
    check(problems, "blank", at, t("quiz.need_choice") in messages(at) and answers(attempt.id) == before, "no hint")
    assert problems == []
    assert list(before) == [other]
    with session_scope() as s:
        assert store.attempt_summary(session=s, attempt_id=attempt.id, learner_id=learner_id).answered == 1


@pytest.mark.parametrize(("typed", "value"), [
    ("-0", 0.0), ("١٢٣", 123.0), ("１２３", 123.0), ("1 000 000,5", 1_000_000.5), ("+5", 5.0), ("−5", -5.0),
    ("9" * 64, 1e64),
])
@pytest.mark.usefixtures("app_db")
def test_odd_but_readable_numbers_are_taken_as_typed(typed, value):
    learner_id = learner(email="odd-number@example.org")
    attempt, pos, other = numeric_attempt(learner_id)
    at = quiz_at(learner_id, attempt, pos)
    at.text_input(key=f"ans_{attempt.id}_{pos}").set_value(typed)
    press(at, t("quiz.submit"))
    assert not at.exception
    stored = answers(attempt.id)
    assert set(stored) == {other, pos}
    assert stored[pos]["text"] == typed and stored[pos]["value"] == pytest.approx(value)
    assert t("quiz.your_answer", answer=typed) in [m.value for m in at.markdown]


# --- certificates and the Verify page ------------------------------------------------------------------

NAME_200 = ("Zoë Ødegård-Łukasiewicz " * 9)[:200].strip() + "x"

CERT_NAMES = {  # long names last: the page renders every PDF on each run, a long name in ~0.5 s
    "nul": ("a\x00b", False),
    "escape": ("\x1b[31mred\x1b[0m", False),
    "rtl override": ("\u202egnp.exe", False),
    "private use": ("Ada \ue000", False),  # no font has it: the page names it by code point
    "unassigned": ("Ada \U000e0080", False),
    "arabic": ("مرحبا بالعالم", True),  # every script prints (issue #13)
    "emoji": ("🎓🚀", True),
    "blank": ("   ", False),
    "markup": ('<b>&"\'</b>', True),
    "script tag": ("<script>alert(1)</script>", True),
    "img onerror": ('<img src=x onerror="alert(1)">', True),
    "markdown link": ("*bold* _it_ [click](javascript:alert(1))", True),
    "sql": ("'; DROP TABLE certificate; --", True),
    "cjk": ("张伟 数据并行", True),
    "200 characters": (NAME_200, True),
    "10k chars": ("x" * 10_000, True),  # cut to 200 by the server, as the browser would
}


@pytest.mark.usefixtures("app_db")
def test_certificate_names_are_signed_and_shown_as_typed():
    from tests.test_certificate_pages import learner_who_passed

    # One active certificate per learner: each name is a different learner's first certificate.
    problems, issued = [], {}
    for n, (case, (name, ok)) in enumerate(CERT_NAMES.items()):
        at = open_page("certificate", learner_who_passed(f"names-{n}@example.org"))
        at.text_input[0].set_value(name)
        press(at, t("certificate.create"))
        with session_scope() as s:
            found = s.exec(select(Certificate).where(Certificate.name == name[:200].strip())).first()
        if ok:
            check(problems, case, at, found is not None and t("certificate.created") in messages(at)
                  and shown_name(at, found.name), "not issued as typed")
            if found is not None:
                issued[case] = found
        else:
            refused = [e.value for e in at.error]
            check(problems, case, at, found is None and len(refused) == 1, "no single clear message")
    assert problems == []
    # The public page shows each name as typed, as plain text (never Markdown), and valid.
    for case in ("200 characters", "markup", "script tag", "markdown link", "arabic"):
        cert = issued[case]
        v = open_page("verify", None, id=cert.id)
        assert certs.texts("en")["status"]["valid"] in [m.value for m in v.success]
        assert any(f": {cert.name}\n" in x.value for x in v.text), case
        assert not any(cert.name in m.value for m in v.markdown), case
        assert shown_name(v, cert.name), case  # escaped, in its own direction


@pytest.mark.usefixtures("app_db")
def test_verify_ids_junk_in_the_url_and_typed():
    from tests.test_certificate_pages import learner_who_passed

    learner_id = learner_who_passed("verify-me@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Ada", lang="en")
    junk = {**HOSTILE, "prefix only": "DP-", "short": "DP-0000", "lower junk": "dp-xxxx-xxxx-xxxx-xxxx-xx",
            "path": "../../etc/passwd", "other site": "https://evil.example/verify?id=<script>",
            "percent nul": "%00", "typo": cert.id[:-1] + ("0" if cert.id[-1] != "0" else "1")}
    valid = {"lower case, spaces": f"  {cert.id.lower()}  ", "pasted link": certs.verify_link(cert)}
    problems = []

    def verdict_ok(at: AppTest, text: str, good: bool, pressed: bool = False) -> bool:
        if good:
            return bool(at.success)
        if not text.strip():  # nothing asked: nothing said, or, after Verify, what to type (Minor 11)
            return [m.value for m in at.warning] == [t("verify.empty")] and not at.error if pressed \
                else not messages(at)
        return not at.success and bool(at.error or at.warning)

    at = open_page("verify")
    for case, text in {**junk, **valid}.items():
        at.query_params["id"] = text
        at.run()
        check(problems, f"?id= {case}", at, verdict_ok(at, text, case in valid), "wrong verdict")
        at.text_input[0].set_value(text)
        press(at, t("verify.check"))
        ok = verdict_ok(at, text, case in valid, pressed=True)
        check(problems, f"typed {case}", at, ok and at.query_params["id"] in (text.strip()[:200],
                                                                            [text.strip()[:200]]), "wrong verdict")
    assert problems == []


# --- URL parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "code"), [
    ("xx", None), ("<script>alert(1)</script>", None), ("' OR 1=1 --", None), ("\x00", None),
    ("x" * 10_000, None), ("🎓", None), ("../en", None), ("zh-CN", "zh"), ("NL", "nl"), ("nl_BE", "nl"),
    ("[Verify](//0.0.0.0)", None), ("![](//0.0.0.0/a.png)", None), ("**BOLD** :red[x]", None),
])
@pytest.mark.usefixtures("app_db")
def test_lang_parameter(asked, code):
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["lang"] = asked
    at.run()
    assert not at.exception
    shown = [w.value for w in at.warning]
    if code is None:  # a clear message that does not repeat what was asked (F-10), the page in English
        assert shown == [i18n.t("common.unknown_language_link", "en")]
        assert not [w for w in shown if asked[:20] in w]
        code = "en"
    else:
        assert shown == []
    assert at.query_params["lang"] in (code, [code])
    assert at.title[0].value == i18n.t("app.title", code)


@pytest.mark.usefixtures("app_db")
def test_section_parameter():
    first = lessons.sections("en")[0]
    at, problems = open_page("lessons"), []
    for case, asked in {**HOSTILE, "path": "../../etc/passwd", "near miss": f" {first.id} "}.items():
        at.query_params["section"] = asked
        at.run()
        check(problems, case, at, at.title[0].value == f"1. {first.title}"
              and at.query_params["section"] in (first.id, [first.id]), "not the first section")
    assert problems == []


# --- admin forms -----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("app_db")
def test_admin_forms_with_hostile_input():
    from tests.test_certificate_pages import learner_who_passed

    admin_id = learner(email="root@example.org", admin=True)
    at, problems = open_page("admin", admin_id), []
    for case, email in HOSTILE.items():
        at.text_input[0].set_value(email)
        press(at, t("admin.make_admin"))
        check(problems, f"make admin {case}", at, t("account.err_no_such_account") in messages(at), "no message")
        at.text_input[-2].set_value(email)
        at.text_input[-1].set_value("issued in error")
        press(at, t("admin_certs.revoke_button"))
        revoked = [m.value for m in at.success if m.value != t("admin.content_ok")]
        check(problems, f"revoke {case}", at, bool(at.error or at.warning) and not revoked, "no message")
    with session_scope() as s:
        assert s.exec(select(Learner.email).where(Learner.is_admin)).all() == ["root@example.org"]
        assert s.exec(select(Certificate).where(Certificate.revoked_at.is_not(None))).all() == []

    # Reasons: blank is refused; markup and 10,000 characters are kept as typed (cut to 500).
    for case, reason, stored in (("blank", "   ", None), ("markup", '<b>&"\'</b> *x*', '<b>&"\'</b> *x*'),
                                 ("10k chars", "y" * 10_000, "y" * 500)):
        owner = learner_who_passed(f"revokee-{case.replace(' ', '-')}@example.org")  # one each
        with session_scope() as s:
            cert = certs.issue_for_learner(session=s, learner_id=owner, name=f"Ada {case}", lang="en")
        at.text_input[-2].set_value(cert.id)
        at.text_input[-1].set_value(reason)
        press(at, t("admin_certs.revoke_button"))
        with session_scope() as s:
            row = s.get(Certificate, cert.id)
        if stored is None:
            check(problems, f"reason {case}", at, row.revoked_at is None
                  and t("admin_certs.need_reason") in messages(at), "not refused")
            continue
        check(problems, f"reason {case}", at, row.revoked_reason == stored
              and t("admin_certs.revoked", id=cert.id) in messages(at), f"stored {row.revoked_reason!r}")
        v = open_page("verify", None, id=cert.id)
        # The public page says only that it was revoked: an admin's words are not for everyone.
        page = " ".join(x.value for x in [*v.text, *v.markdown, *v.error])
        check(problems, f"reason {case} on Verify", v,
              stored not in page and certs.texts("en")["reasons"]["revoked"] in page, "admin's reason shown")
    assert problems == []
