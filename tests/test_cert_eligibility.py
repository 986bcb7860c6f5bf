"""``certificates.eligibility``: the one rule, its reasons in their order, and the store issuing by it."""

from __future__ import annotations

import pytest
from sqlmodel import delete

import certificates as certs
from academy.models import ExercisePass
from certificates import errors, store
from tests.exercisepass import pass_required_exercises
from tests.factories import learner

pytestmark = pytest.mark.usefixtures("secrets")  # own issuer keys (conftest.py)




def test_the_reasons_follow_the_learner_through_the_course(session):
    me = learner(session)
    assert certs.eligibility(session=session, learner_id=me) == certs.Eligibility("quiz_missing")
    other = learner(session, exercises=True, email="other@example.org")
    assert certs.eligibility(session=session, learner_id=other).reason == "quiz_missing"  # exercises alone: no

    me = learner(session, quiz=True, email="quiz@example.org")
    verdict = certs.eligibility(session=session, learner_id=me)
    assert verdict.reason == "exercises_missing" and not verdict.eligible
    assert verdict.missing == ("ring-allreduce", "broadcast", "average-gradients")
    with pytest.raises(errors.ExercisesMissing):
        store.issue_for_learner(session=session, learner_id=me, name="Ann", lang="en")

    pass_required_exercises(session, me)
    verdict = certs.eligibility(session=session, learner_id=me)
    assert verdict.eligible and verdict.attempt is not None and verdict.missing == ()
    cert = store.issue_for_learner(session=session, learner_id=me, name="Ann", lang="en")

    verdict = certs.eligibility(session=session, learner_id=me)
    assert (verdict.reason, verdict.certificate_id) == ("already_issued", cert.id)
    # Already issued outranks a rule that changed since: the holder is done.
    session.exec(delete(ExercisePass).where(ExercisePass.learner_id == me))
    session.commit()
    assert certs.eligibility(session=session, learner_id=me).reason == "already_issued"
    assert store.issue_for_learner(session=session, learner_id=me, name="Ann", lang="en").id == cert.id

    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="fraud", disqualify=True)
    assert certs.eligibility(session=session, learner_id=me).reason == "disqualified"
    with pytest.raises(errors.Disqualified):
        store.issue_for_learner(session=session, learner_id=me, name="Ann", lang="en")


def test_the_setting_off_needs_the_quiz_only(session, monkeypatch):
    from academy.settings import get_settings

    monkeypatch.setenv("CERTIFICATE_REQUIRES_EXERCISES", "false")
    get_settings.cache_clear()
    try:
        me = learner(session, quiz=True)
        assert certs.eligibility(session=session, learner_id=me).eligible
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
