"""Accounts: hashing, sign-up validation, sign-in, rate limit, sessions."""

import threading

import pytest
from sqlalchemy import update
from sqlmodel import col, delete, select

from academy import accounts
from academy.accounts import AccountError
from academy.gate import BUSY_NOTICE_S, FairGate
from academy.models import AdminToken, Learner, SigninCounter

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
    assert err.value.key == code
    assert session.exec(select(Learner)).all() == []


def test_duplicate_email_refused(session):
    accounts.sign_up(session=session, email="dup@example.org", password=PW)
    with pytest.raises(AccountError) as err:
        accounts.sign_up(session=session, email=" DUP@example.org ", password=PW)
    assert err.value.key == "account.err_sign_up_neutral"


def test_sign_in_and_wrong_password(session):
    accounts.sign_up(session=session, email="b@example.org", password=PW)
    assert accounts.sign_in(session=session, email="B@example.org", password=PW).email == "b@example.org"
    with pytest.raises(AccountError) as err:
        accounts.sign_in(session=session, email="b@example.org", password="wrong password!")
    assert err.value.key == "account.err_credentials"
    with pytest.raises(AccountError):
        accounts.sign_in(session=session, email="nobody@example.org", password=PW)


def test_sign_in_rate_limited(session):
    accounts.sign_up(session=session, email="c@example.org", password=PW)
    for _ in range(5):
        with pytest.raises(AccountError):
            accounts.sign_in(session=session, email="c@example.org", password="nope nope nope")
    with pytest.raises(AccountError) as err:
        accounts.sign_in(session=session, email="c@example.org", password=PW)  # even the right one
    assert err.value.key == "account.err_rate_limited"


def test_session_token_round_trip_and_revocation(session):
    learner = accounts.sign_up(session=session, email="d@example.org", password=PW)
    token = accounts.open_session(session=session, learner_id=learner.id)
    assert str(learner.id) != token and PW not in token
    assert accounts.learner_for_token(session=session, token=token).id == learner.id
    assert accounts.learner_for_token(session=session, token=token[:-2] + "xx") is None
    assert accounts.learner_for_token(session=session, token="garbage") is None
    accounts.close_session(session=session, token=token)
    assert accounts.learner_for_token(session=session, token=token) is None


def test_admin_addresses_grant_nothing(session, monkeypatch):
    """F-8: whoever signs up first with a configured address must not become admin."""
    from academy.settings import get_settings

    monkeypatch.setenv("ADMIN_EMAILS", "boss@example.org")
    get_settings.cache_clear()
    try:
        assert not accounts.sign_up(session=session, email="boss@example.org", password=PW).is_admin
        assert not accounts.sign_in(session=session, email="boss@example.org", password=PW).is_admin
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_admin_token_is_one_time(session):
    first = accounts.sign_up(session=session, email="first@example.org", password=PW)
    second = accounts.sign_up(session=session, email="second@example.org", password=PW)
    token = accounts.create_admin_token(session=session)
    assert token not in str(session.exec(select(AdminToken.id)).all())  # only its hash is stored
    with pytest.raises(AccountError, check=lambda e: e.key.endswith("admin_token")):
        accounts.redeem_admin_token(session=session, learner_id=first.id, token=token + "x")
    assert accounts.redeem_admin_token(session=session, learner_id=first.id, token=token).is_admin
    with pytest.raises(AccountError, check=lambda e: e.key.endswith("admin_token")):
        accounts.redeem_admin_token(session=session, learner_id=second.id, token=token)
    assert not session.get(Learner, second.id).is_admin


@pytest.mark.usefixtures("app_db")
def test_admin_cli():
    from academy.admin import main
    from academy.db import session_scope

    with session_scope() as s:
        accounts.sign_up(session=s, email="e@example.org", password=PW)
    assert main(["create-admin", "e@example.org"]) == 0
    with session_scope() as s:
        assert s.exec(select(Learner).where(Learner.email == "e@example.org")).one().is_admin
    assert main(["create-admin", "missing@example.org"]) == 1


@pytest.mark.usefixtures("app_db")
def test_admin_token_cli_prints_a_token_that_works(capsys):
    from academy.admin import main
    from academy.db import session_scope

    with session_scope() as s:
        learner = accounts.sign_up(session=s, email="f@example.org", password=PW)
    assert main(["admin-token"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1].strip()
    with session_scope() as s:
        assert accounts.redeem_admin_token(session=s, learner_id=learner.id, token=token).is_admin


# --- F-4 / F-15: the limit holds under concurrency, per client, and Argon2 is capped -------------


def _burst(engine, email: str, passwords: list[str], client: str = "203.0.113.9") -> list[str]:
    """Sign in with every password at once from one client; the outcome of each."""
    from sqlmodel import Session

    start = threading.Barrier(len(passwords))
    out: list[str] = []

    def one(password: str) -> None:
        start.wait()
        with Session(engine, expire_on_commit=False) as s:
            try:
                accounts.sign_in(session=s, email=email, password=password, client=client)
                out.append("ok")
            except AccountError as err:
                out.append(err.key)

    threads = [threading.Thread(target=one, args=(p,)) for p in passwords]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def test_concurrent_guesses_are_limited(app_db, monkeypatch):
    """F-4: 12 guesses at once are not all checked; the right one placed last is refused too."""
    from academy.db import session_scope
    from academy.settings import get_settings

    # Enough Argon2 slots that no guess is answered "busy" (that path has its own test).
    monkeypatch.setattr(accounts, "_SLOTS", FairGate(16))
    monkeypatch.setattr(accounts, "ARGON2_WAIT_S", 120)

    with session_scope() as s:
        accounts.sign_up(session=s, email="burst@example.org", password=PW)
    limit = get_settings().signin_max_failures
    out = _burst(app_db, "burst@example.org", [f"wrong password {i}" for i in range(12)])
    assert out.count("account.err_credentials") <= limit, out
    assert out.count("account.err_rate_limited") >= 12 - limit, out
    out = _burst(app_db, "burst@example.org", [PW])
    assert out == ["account.err_rate_limited"]


def test_lock_out_is_per_client(session):
    """F-15: failures from one client do not lock the owner out on another; one client is
    also limited across addresses."""
    from academy.settings import get_settings

    accounts.sign_up(session=session, email="owner@example.org", password=PW)
    attacker, owner = "198.51.100.66", "192.0.2.7"
    for _ in range(get_settings().signin_max_failures):
        with pytest.raises(AccountError):
            accounts.sign_in(session=session, email="owner@example.org", password="nope nope", client=attacker)
    with pytest.raises(AccountError, check=lambda e: e.key.endswith("rate_limited")):
        accounts.sign_in(session=session, email="owner@example.org", password=PW, client=attacker)
    assert accounts.sign_in(session=session, email="owner@example.org", password=PW, client=owner)
    refused = []
    for n in range(get_settings().signin_max_failures_client + 2):
        try:
            accounts.sign_in(session=session, email=f"spray{n}@example.org", password="nope nope", client="198.51.100.1")
        except AccountError as err:
            refused.append(err.key)
    assert refused[-1] == "account.err_rate_limited_client"


def test_argon2_verifications_are_capped(session, monkeypatch):
    """Over the cap a sign-in is answered "busy" at once and costs the learner no attempt."""
    accounts.sign_up(session=session, email="cap@example.org", password=PW)
    slots = FairGate(1)
    monkeypatch.setattr(accounts, "_SLOTS", slots)
    monkeypatch.setattr(accounts, "ARGON2_WAIT_S", 0.01)
    assert slots.acquire(timeout=1)  # another verification holds the only slot
    try:
        with pytest.raises(AccountError, check=lambda e: e.key.endswith("busy")):
            accounts.sign_in(session=session, email="cap@example.org", password=PW)
    finally:
        slots.release()
    charged = session.exec(select(SigninCounter.key).where(SigninCounter.count > 0)).all()
    assert [key for key in charged if not key.startswith("signup:")] == []
    assert accounts.sign_in(session=session, email="cap@example.org", password=PW)


def test_argon2_turns_are_first_come_first_served():
    """Waiters go through in the order they came, not as the scheduler picks; one that
    gives up (its wait is bounded) hands its place on."""
    gate = FairGate(1)
    assert gate.acquire(timeout=1)
    order: list[int] = []
    threads = []

    def wait_turn(n: int) -> None:
        if gate.acquire(timeout=30):
            order.append(n)
            gate.release()

    for n in range(8):
        threads.append(threading.Thread(target=wait_turn, args=(n,)))
        threads[-1].start()
        while len(gate._line) < n + 1:  # in line before the next one comes
            threading.Event().wait(0.001)
    assert not gate.acquire(timeout=0.05)  # a ninth waits its bounded time and gives up
    gate.release()
    for th in threads:
        th.join()
    assert order == list(range(8))
    assert gate.acquire(timeout=0.05)  # nothing left held
    gate.release()


def test_a_sign_in_that_waits_is_told_busy_retrying_and_goes_through(session, monkeypatch):
    accounts.sign_up(session=session, email="wait@example.org", password=PW)
    gate = FairGate(1)
    monkeypatch.setattr(accounts, "_SLOTS", gate)
    monkeypatch.setattr(accounts, "ARGON2_WAIT_S", 30)
    assert gate.acquire(timeout=1)
    told: list[str] = []
    threading.Timer(BUSY_NOTICE_S + 0.3, gate.release).start()
    learner = accounts.sign_in(session=session, email="wait@example.org", password=PW,
                               on_wait=lambda: told.append("busy_retrying"))
    assert learner.email == "wait@example.org" and told == ["busy_retrying"]


def test_a_hash_with_other_parameters_is_replaced_at_sign_in(session):
    """Rehash on sign-in (argon2-cffi's check_needs_rehash), committed with the sign-in."""
    from argon2 import PasswordHasher

    learner = accounts.sign_up(session=session, email="old@example.org", password=PW)
    cheap = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(PW)
    session.exec(update(Learner).where(col(Learner.id) == learner.id).values(password_hash=cheap))
    session.commit()
    assert accounts.needs_rehash(cheap)
    signed_in = accounts.sign_in(session=session, email="old@example.org", password=PW)
    stored = session.exec(select(Learner.password_hash).where(Learner.id == learner.id)).one()
    assert signed_in.password_hash == stored != cheap
    assert not accounts.needs_rehash(stored) and accounts.check_password(stored, PW)
    accounts.sign_in(session=session, email="old@example.org", password=PW)  # today's: kept
    assert session.exec(select(Learner.password_hash).where(Learner.id == learner.id)).one() == stored
    with pytest.raises(AccountError):  # a wrong password changes nothing
        accounts.sign_in(session=session, email="old@example.org", password=PW + "x")


def test_sign_up_is_throttled_per_client(session):
    from academy.settings import get_settings

    codes = []
    for n in range(get_settings().signup_max_per_client + 1):
        try:
            accounts.sign_up(session=session, email=f"new{n}@example.org", password=PW, client="198.51.100.3")
            codes.append("ok")
        except AccountError as err:
            codes.append(err.key)
    assert codes[-1] == "account.err_rate_limited_client" and codes[0] == "ok"
    # Localhost (every visitor, behind a proxy on this machine) is no client to limit.
    for n in range(get_settings().signup_max_per_client + 1):
        accounts.sign_up(session=session, email=f"local{n}@example.org", password=PW)


def test_duplicate_sign_up_answer_does_not_say_the_account_exists(session):
    accounts.sign_up(session=session, email="known@example.org", password=PW)
    with pytest.raises(AccountError) as err:
        accounts.sign_up(session=session, email="known@example.org", password=PW)
    assert err.value.key == "account.err_sign_up_neutral"


# --- F-16: look-alike addresses ---------------------------------------------------------------


@pytest.mark.parametrize(
    "email",
    [
        "admin\u200b@example.org",  # zero-width space
        "ad\u2060min@example.org",  # word joiner
        "\u0430dmin@example.org",  # Cyrillic a in a Latin name
        "p\u0430yp\u0430l@example.org",
        "\u202eadmin@example.org",  # right-to-left override
        "admin@ex\u0430mple.org",  # Cyrillic a in the domain
    ],
)
def test_look_alike_addresses_are_refused(session, email):
    with pytest.raises(AccountError) as err:
        accounts.sign_up(session=session, email=email, password=PW)
    assert err.value.key == "account.err_email"


def test_addresses_are_nfkc_normalised(session):
    first = accounts.sign_up(session=session, email="\uff41dmin@example.org", password=PW)  # full-width a
    assert first.email == "admin@example.org"
    for ok in ("zo\u00eb@example.org", "\u5f20\u4f1f@example.cn", "\u0438\u0432\u0430\u043d@example.ru"):
        assert accounts.sign_up(session=session, email=ok, password=PW).email == ok


# --- F-5: sign-out ends every session; sign out everywhere; password change -------------------


def test_sign_out_everywhere_and_password_change(session):
    learner = accounts.sign_up(session=session, email="many@example.org", password=PW)
    tokens = [accounts.open_session(session=session, learner_id=learner.id) for _ in range(3)]
    new_pw = "another long password"
    with pytest.raises(AccountError, check=lambda e: e.key.endswith("credentials")):
        accounts.change_password(session=session, learner_id=learner.id, current="wrong wrong",
                                 new=new_pw, keep_token=tokens[0])
    with pytest.raises(AccountError, check=lambda e: e.key.endswith("password_short")):
        accounts.change_password(session=session, learner_id=learner.id, current=PW, new="short",
                                 keep_token=tokens[0])
    assert all(accounts.learner_for_token(session=session, token=tok) for tok in tokens)
    accounts.change_password(session=session, learner_id=learner.id, current=PW, new=new_pw, keep_token=tokens[0])
    assert [bool(accounts.learner_for_token(session=session, token=tok)) for tok in tokens] == [True, False, False]
    with pytest.raises(AccountError):
        accounts.sign_in(session=session, email="many@example.org", password=PW)
    assert accounts.sign_in(session=session, email="many@example.org", password=new_pw)
    assert accounts.close_all_sessions(session=session, learner_id=learner.id) == 1
    assert accounts.learner_for_token(session=session, token=tokens[0]) is None


def test_ended_windows_are_pruned(session, monkeypatch):
    from datetime import timedelta

    from academy.models import utcnow

    accounts.sign_up(session=session, email="prune@example.org", password=PW, client="192.0.2.1")
    with pytest.raises(AccountError):
        accounts.sign_in(session=session, email="prune@example.org", password="nope nope", client="192.0.2.1")
    assert accounts.prune_counters(session=session) == 0  # all still in their window
    later = utcnow() + timedelta(seconds=3600)
    monkeypatch.setattr(accounts, "utcnow", lambda: later)
    assert accounts.prune_counters(session=session) == 4  # signup, client, pair, address
    assert session.exec(select(SigninCounter)).all() == []


@pytest.mark.postgres
def test_concurrent_guesses_are_limited_on_postgres(postgres_url, monkeypatch):
    """The same burst on PostgreSQL: its row locks must make UPDATE … RETURNING count exactly."""
    import os

    from sqlmodel import Session

    from academy.db import make_engine, migrate

    monkeypatch.setattr(accounts, "_SLOTS", FairGate(16))
    monkeypatch.setattr(accounts, "ARGON2_WAIT_S", 120)
    engine = make_engine(postgres_url)
    migrate(engine)
    email = f"pg-burst-{os.getpid()}@example.org"
    with Session(engine) as s:
        accounts.sign_up(session=s, email=email, password=PW, client=f"pg-{os.getpid()}")
    try:
        out = _burst(engine, email, [f"wrong password {i}" for i in range(12)], client=f"pg-{os.getpid()}")
        checked, refused = out.count("account.err_credentials"), out.count("account.err_rate_limited")
        assert checked <= 5 and checked + refused == 12, out
    finally:
        with Session(engine) as s:
            s.exec(delete(Learner).where(Learner.email == email))
            s.exec(delete(SigninCounter).where(col(SigninCounter.key).contains(str(os.getpid()))))
            s.commit()
        engine.dispose()


def test_an_overlong_address_at_sign_in_is_a_wrong_password_not_a_crash(session):
    """Review: the rate-limit key built from an unbounded address overflowed its column
    on PostgreSQL (DataError, a crashed page)."""
    with pytest.raises(AccountError) as err:
        accounts.sign_in(session=session, email="a" * 5000 + "@example.org", password="whatever pw")
    assert err.value.key == "account.err_credentials"


# --- N-5: one spelling per client; loopback in every form is no client ---------------------------


@pytest.mark.parametrize(("peer", "forwarded", "hops", "expected"), [
    (None, None, 0, accounts.UNKNOWN_CLIENT),  # Streamlit's own "localhost"
    ("127.0.0.1", None, 0, accounts.UNKNOWN_CLIENT),
    ("127.8.9.10", None, 0, accounts.UNKNOWN_CLIENT),  # all of 127.0.0.0/8
    ("::1", None, 0, accounts.UNKNOWN_CLIENT),
    ("::ffff:127.0.0.1", None, 0, accounts.UNKNOWN_CLIENT),  # a dual-stack socket's IPv4 peer
    ("::FFFF:7f00:1", None, 0, accounts.UNKNOWN_CLIENT),
    ("::ffff:203.0.113.9", None, 0, "203.0.113.9"),  # mapped: the same client as plain IPv4
    ("203.0.113.9", None, 0, "203.0.113.9"),
    ("2001:DB8:0:0::1", None, 0, "2001:db8::/64"),  # an IPv6 client is its /64 (M-1)
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", None, 0, "2001:db8:1:2::/64"),
    ("[2001:db8:1:2::9%eth0]", None, 0, "2001:db8:1:2::/64"),
    # Behind our proxy: the address it appended; what the client wrote left of it is ignored.
    ("::ffff:127.0.0.1", "6.6.6.6, ::ffff:198.51.100.7", 1, "198.51.100.7"),
    ("127.0.0.1", "6.6.6.6, 198.51.100.7, 10.0.0.2", 2, "198.51.100.7"),
    ("127.0.0.1", "127.0.0.1", 1, accounts.UNKNOWN_CLIENT),
    ("203.0.113.9", "", 1, "203.0.113.9"),  # fewer addresses than hops: the peer
    # Without TRUSTED_PROXY_HOPS the header is the client's to forge: never read.
    ("203.0.113.9", "198.51.100.7", 0, "203.0.113.9"),
])
def test_a_client_has_one_spelling_and_loopback_is_none(peer, forwarded, hops, expected):
    assert accounts.client_key(peer, forwarded=forwarded, hops=hops) == expected


def test_ipv6_clients_are_their_64_so_one_host_cannot_be_many_clients(session, monkeypatch):
    """Review 2026-12-04 M-1: the 45 sign-ups from ``2001:db8:1:2::1..2d`` were 45 clients, each
    under the limit. Every address of one /64 is one client now (behind our proxy too), another
    /64 is another client, and CLIENT_IPV6_PREFIX sets the prefix."""
    from academy.settings import get_settings

    limit = get_settings().signup_max_per_client
    codes = []
    for n in range(1, limit + 2):
        try:
            accounts.sign_up(session=session, email=f"v6-{n}@example.org", password=PW,
                             client=accounts.client_key(f"2001:db8:1:2::{n:x}"))
            codes.append("ok")
        except AccountError as err:
            codes.append(err.key)
    assert codes == ["ok"] * limit + ["account.err_rate_limited_client"]
    other = accounts.client_key("2001:db8:1:3::1")  # the next /64: someone else
    assert accounts.sign_up(session=session, email="v6-other@example.org", password=PW, client=other)
    assert accounts.client_key("127.0.0.1", forwarded="2001:db8:1:2::99", hops=1) == "2001:db8:1:2::/64"
    assert accounts.client_key("2001:db8:1:2::1", ipv6_prefix=48) == "2001:db8:1::/48"
    assert accounts.client_key("2001:db8:1:2::1", ipv6_prefix=128) == "2001:db8:1:2::1"
    monkeypatch.setenv("CLIENT_IPV6_PREFIX", "56")
    get_settings.cache_clear()
    try:
        assert accounts.client_key("2001:db8:1:2ff::1") == accounts.client_key("2001:db8:1:200::1") \
            == "2001:db8:1:200::/56"
        assert accounts.client_key("203.0.113.9") == "203.0.113.9"  # IPv4: the address, as ever
    finally:
        monkeypatch.delenv("CLIENT_IPV6_PREFIX")
        get_settings.cache_clear()


def test_a_same_host_proxy_without_trusted_hops_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(accounts, "_proxy_warned", threading.Event())
    with caplog.at_level("ERROR", logger="academy.accounts"):
        for peer in ("::ffff:127.0.0.1", None, "::1"):
            assert accounts.client_key(peer, forwarded="198.51.100.7", hops=0) == accounts.UNKNOWN_CLIENT
        accounts.client_key("::ffff:127.0.0.1", forwarded=None, hops=0)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "TRUSTED_PROXY_HOPS" in errors[0].getMessage()
    caplog.clear()
    monkeypatch.setattr(accounts, "_proxy_warned", threading.Event())
    with caplog.at_level("ERROR", logger="academy.accounts"):
        accounts.client_key("::ffff:127.0.0.1", forwarded="198.51.100.7", hops=1)  # configured
        accounts.client_key("203.0.113.9", forwarded="198.51.100.7", hops=0)  # no proxy here
    assert not caplog.records


def test_wrong_passwords_through_a_same_host_proxy_lock_nobody_out(session):
    """N-5: 30 guesses from ``::ffff:127.0.0.1`` (every visitor behind a same-host proxy) do
    not close sign-in for another learner coming through that proxy."""
    accounts.sign_up(session=session, email="alice@example.org", password=PW)
    proxy = accounts.client_key("::ffff:127.0.0.1")
    for n in range(30):
        with pytest.raises(AccountError):
            accounts.sign_in(session=session, email=f"carol{n % 3}@example.org", password="nope nope",
                             client=proxy)
    assert accounts.sign_in(session=session, email="alice@example.org", password=PW, client=proxy)


# --- N-15: joiners stay in display names where they join ------------------------------------------


@pytest.mark.parametrize(("typed", "stored"), [
    ("\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f469\u200d\U0001f469\u200d\U0001f467"),  # a family
    ("\U0001f469\U0001f3fd\u200d\U0001f4bb Ada", "\U0001f469\U0001f3fd\u200d\U0001f4bb Ada"),
    ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"),  # Persian ZWNJ
    ("\u0915\u094d\u200d\u0937", "\u0915\u094d\u200d\u0937"),  # a Devanagari half form
    ("Bob\u200dWidth", "BobWidth"),  # between Latin letters: only a look-alike
    ("\u200d\U0001f4bb", "\U0001f4bb"),  # at an edge
    ("Bob\u200b\u200dZero", "BobZero"),  # next to another invisible character
    ("\u202eevil\u202c Name", "evil Name"),  # bidi controls still go
])
def test_display_names_keep_joiners_where_they_join(typed, stored):
    """N-15: "👩‍👩‍👧" was stored as "👩👩👧" and Persian or Indic names changed spelling; the
    display name now keeps joiners exactly where the certificate-name check does."""
    from certificates import names

    assert accounts.clean_display_name(typed) == stored
    assert names._joins_here is accounts.joins_here  # one rule for both names


def test_a_joined_display_name_is_stored_as_typed(session):
    family = "\U0001f469\u200d\U0001f469\u200d\U0001f467 Lee"
    learner = accounts.sign_up(session=session, email="family@example.org", password=PW, display_name=family)
    assert learner.display_name == family
