"""Accounts: hashing, sign-up validation, sign-in, rate limit, sessions."""

import pytest
from sqlmodel import select

from academy import accounts
from academy.accounts import AccountError
from academy.models import Learner

PW = "correct horse battery"


def test_password_is_hashed_not_stored(session):
    learner = accounts.sign_up(session=session, email="Ada@Example.org", password=PW)
    assert learner.email == "ada@example.org"
    assert PW not in learner.password_hash
    assert learner.password_hash.startswith("$argon2id$")
    assert accounts.check_password(learner.password_hash, PW)
    assert not accounts.check_password(learner.password_hash, PW + "x")


@pytest.mark.parametrize(
    ("email", "password", "code"),
    [
        ("not-an-email", PW, "account.err_email"),
        ("a@b", PW, "account.err_email"),
        ("<script>@x.org", PW, "account.err_email"),
        ("ok@example.org", "short", "account.err_password_short"),
        ("ok@example.org", "x" * 2000, "account.err_password_long"),
    ],
)
def test_bad_sign_up_input(session, email, password, code):
    with pytest.raises(AccountError) as err:
        accounts.sign_up(session=session, email=email, password=password)
    assert err.value.code == code
    assert session.exec(select(Learner)).all() == []


def test_duplicate_email_refused(session):
    accounts.sign_up(session=session, email="dup@example.org", password=PW)
    with pytest.raises(AccountError) as err:
        accounts.sign_up(session=session, email=" DUP@example.org ", password=PW)
    assert err.value.code == "account.err_duplicate"


def test_sign_in_and_wrong_password(session):
    accounts.sign_up(session=session, email="b@example.org", password=PW)
    assert accounts.sign_in(session=session, email="B@example.org", password=PW).email == "b@example.org"
    with pytest.raises(AccountError) as err:
        accounts.sign_in(session=session, email="b@example.org", password="wrong password!")
    assert err.value.code == "account.err_credentials"
    with pytest.raises(AccountError):
        accounts.sign_in(session=session, email="nobody@example.org", password=PW)


def test_sign_in_rate_limited(session):
    accounts.sign_up(session=session, email="c@example.org", password=PW)
    for _ in range(5):
        with pytest.raises(AccountError):
            accounts.sign_in(session=session, email="c@example.org", password="nope nope nope")
    with pytest.raises(AccountError) as err:
        accounts.sign_in(session=session, email="c@example.org", password=PW)  # even the right one
    assert err.value.code == "account.err_rate_limited"


def test_session_token_round_trip_and_revocation(session):
    learner = accounts.sign_up(session=session, email="d@example.org", password=PW)
    token = accounts.open_session(session=session, learner_id=learner.id)
    assert str(learner.id) != token and PW not in token
    assert accounts.learner_for_token(session=session, token=token).id == learner.id
    assert accounts.learner_for_token(session=session, token=token[:-2] + "xx") is None
    assert accounts.learner_for_token(session=session, token="garbage") is None
    accounts.close_session(session=session, token=token)
    assert accounts.learner_for_token(session=session, token=token) is None


def test_admin_from_settings(session, monkeypatch):
    from academy.settings import get_settings

    monkeypatch.setenv("ADMIN_EMAILS", "boss@example.org, other@example.org")
    get_settings.cache_clear()
    try:
        assert accounts.sign_up(session=session, email="boss@example.org", password=PW).is_admin
        assert not accounts.sign_up(session=session, email="pleb@example.org", password=PW).is_admin
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_admin_cli(app_db):
    from academy.admin import main
    from academy.db import session_scope

    with session_scope() as s:
        accounts.sign_up(session=s, email="e@example.org", password=PW)
    assert main(["create-admin", "e@example.org"]) == 0
    with session_scope() as s:
        assert s.exec(select(Learner).where(Learner.email == "e@example.org")).one().is_admin
    assert main(["create-admin", "missing@example.org"]) == 1
