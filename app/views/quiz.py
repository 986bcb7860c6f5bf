"""Quiz: one question at a time, instant feedback, score, review, practice."""

import streamlit as st
from sqlalchemy.exc import OperationalError

import certificates as certs
from academy import lessons
from academy.db import session_scope
from academy.settings import get_settings
from app import quizviews, ui
from quizzes import review, store
from quizzes.bank import load_bank
from quizzes.engine import QuizError, public_question

t = ui.t
code = st.session_state["lang"]
st.title(t("nav.quiz"))
who = ui.require_learner("quiz.need_account")
if who is None:
    st.stop()

settings = get_settings()
bank = load_bank()
titles = {s.id: s.title for s in lessons.sections(code)}
state = st.session_state


def show_feedback(fb) -> None:
    quizviews.show_feedback(fb, titles, code)


def certificate_link() -> None:
    """"Claim" only when the store would issue (``certs.eligibility``); else a link to what is missing."""
    with session_scope() as session:
        verdict = certs.eligibility(session=session, learner_id=who.id)
    if verdict.eligible:
        ui.link("certificate", t("quiz.claim"), ":material/workspace_premium:")
    elif verdict.reason == "exercises_missing":
        ui.link("certificate", t("quiz.certificate_next"), ":material/workspace_premium:")


def show_summary(summary) -> None:
    st.header(t("quiz.score", score=round(summary.score), correct=summary.correct, total=summary.total))
    if summary.practice:
        st.info(t("quiz.practice_done", correct=summary.correct, total=summary.total))
    elif summary.passed:
        st.success(t("quiz.passed", pass_mark=settings.quiz_pass_percent))
        certificate_link()
    else:
        st.error(t("quiz.failed", pass_mark=settings.quiz_pass_percent))


def show_review(attempt_id: int) -> None:
    with session_scope() as session:
        items = store.review(session=session, attempt_id=attempt_id, lang=code, learner_id=who.id, bank=bank)
    for item in items:
        if item.question is None or item.feedback is None:
            continue
        with st.expander(f"{t('quiz.question_of', n=item.position + 1, total=len(items))}: "
                         f"{item.question.text[:90]}",
                         icon=":material/check_circle:" if item.correct else ":material/cancel:"):
            st.markdown(item.question.text)
            show_feedback(item.feedback)


# --- a just-finished attempt: score, review, next steps -------------------------------
finished_id = state.get("quiz_finished_id")
if finished_id is not None:
    with session_scope() as session:
        summary = store.attempt_summary(session=session, attempt_id=finished_id, learner_id=who.id)
        missed = store.missed_questions(session=session, attempt_id=finished_id, learner_id=who.id)
    show_summary(summary)
    st.header(t("quiz.review"))
    show_review(finished_id)
    c1, c2 = st.columns(2)
    if missed and c1.button(t("quiz.practice_start", count=len(missed)), icon=":material/replay:"):
        with session_scope() as session:
            store.start_attempt(session=session, learner_id=who.id, lang=code,
                                practice_question_ids=missed, bank=bank)
        state.pop("quiz_finished_id")
        state["quiz_practice"] = True
        st.rerun()
    if not summary.passed and c2.button(t("quiz.start"), type="primary", key="again"):
        state.pop("quiz_finished_id")
        state["quiz_practice"] = False
        with session_scope() as session:
            store.start_attempt(session=session, learner_id=who.id, lang=code, k=settings.quiz_questions,
                                bank=bank)
        st.rerun()
    if st.button(t("quiz.back"), key="back_overview", icon=":material/arrow_back:"):
        state.pop("quiz_finished_id")
        st.rerun()
    st.stop()

# --- the attempt in progress (graded, or practice) ------------------------------------
practice = bool(state.get("quiz_practice"))
with session_scope() as session:
    attempt = store.current_attempt(session=session, learner_id=who.id, practice=practice)
    if attempt is None and practice:
        state["quiz_practice"] = practice = False
        attempt = store.current_attempt(session=session, learner_id=who.id)
    history = store.attempt_history(session=session, learner_id=who.id)
best = store.best_of(history)  # from the history just read: one read of the attempts per run

if attempt is None:
    st.write(t("quiz.intro", count=settings.quiz_questions, pass_mark=settings.quiz_pass_percent))
    if best is not None:
        st.info(t("quiz.best", score=round(best.score),
                  result=t("quiz.result_pass") if best.passed else t("quiz.result_fail")))
        if best.passed:
            certificate_link()
    if st.button(t("quiz.start"), type="primary", icon=":material/play_arrow:"):
        with session_scope() as session:
            store.start_attempt(session=session, learner_id=who.id, lang=code, k=settings.quiz_questions,
                                bank=bank)
        st.rerun()
    last = next((h for h in history if h.status == store.FINISHED), None)
    if last is not None:
        with session_scope() as session:
            missed = store.missed_questions(session=session, attempt_id=last.attempt_id, learner_id=who.id)
        if missed and st.button(t("quiz.practice_start", count=len(missed)), icon=":material/replay:"):
            with session_scope() as session:
                store.start_attempt(session=session, learner_id=who.id, lang=code,
                                    practice_question_ids=missed, bank=bank)
            state["quiz_practice"] = True
            st.rerun()
else:
    if attempt.practice:
        st.info(t("quiz.practice_banner"))
    with session_scope() as session:
        answered = store.answered_positions(session=session, attempt_id=attempt.id, learner_id=who.id)
    total = len(attempt.plan)
    pos_key = f"quiz_pos_{attempt.id}"
    if not attempt.practice and answered and pos_key not in state:
        st.caption(t("quiz.resume_note"))  # a refresh or a new tab: we continue where they were
    first_open = next((i for i in range(total) if i not in answered), total - 1)
    pos = state[pos_key] = min(state.get(pos_key, first_open), total - 1)
    st.progress(len(answered) / total, text=t("quiz.answered_of", answered=len(answered), total=total))

    question = public_question(attempt.plan[pos], bank, code)
    with st.container(border=True):
        st.caption(t("quiz.question_of", n=pos + 1, total=total) + f" · {titles.get(question.topic, '')}")
        st.markdown(f"## {question.text}")
        if pos in answered:
            # The feedback record_answer returned, kept per language; graded
            # again (this one question only) after a refresh or a language switch.
            fb_key = f"quiz_fb_{attempt.id}_{pos}_{code}"
            if fb_key not in state:
                with session_scope() as session:
                    state[fb_key] = store.position_feedback(
                        session=session, attempt_id=attempt.id, learner_id=who.id, position=pos,
                        lang=code, bank=bank)
            if state[fb_key] is None:
                st.warning(t("quiz_errors.question_unavailable"))
            else:
                show_feedback(state[fb_key])
        else:
            # When the question was first shown: the review schedule rates a slow right answer Hard.
            shown_at = state.setdefault(f"quiz_shown_{attempt.id}_{pos}", review.clock())
            response, complete = quizviews.answer_widget(question, f"ans_{attempt.id}_{pos}")
            if st.button(t("quiz.submit"), type="primary", key=f"submit_{attempt.id}_{pos}"):
                if response is None:
                    st.warning(t("quiz.need_choice"))
                elif not complete:
                    st.warning(t("quiz.need_all_items"))
                else:
                    try:
                        with session_scope() as session:
                            state[f"quiz_fb_{attempt.id}_{pos}_{code}"] = store.record_answer(
                                session=session, attempt_id=attempt.id, learner_id=who.id,
                                position=pos, response=response, lang=code, bank=bank,
                                seconds=(review.clock() - shown_at).total_seconds())
                        st.rerun()
                    except QuizError as err:
                        st.error(ui.error_text(err))
                    except OperationalError:  # e.g. SQLite still locked after its busy timeout
                        st.error(t("common.busy"))

    c1, c2, c3 = st.columns(3)
    if pos > 0 and c1.button(t("quiz.previous"), key="prev_q"):
        state[pos_key] = pos - 1
        st.rerun()
    if pos < total - 1 and c2.button(t("quiz.next"), key="next_q", type="primary" if pos in answered else "secondary"):
        state[pos_key] = pos + 1
        st.rerun()
    unanswered = total - len(answered)

    def finish() -> None:
        try:
            with session_scope() as session:
                store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=who.id)
        except OperationalError:
            st.error(t("common.busy"))
            st.stop()
        state["quiz_finished_id"] = attempt.id
        state.pop(pos_key, None)
        state["quiz_practice"] = False

    if unanswered == 0:
        if c3.button(t("quiz.finish"), type="primary", icon=":material/flag:", key="finish"):
            finish()
            st.rerun()
    else:
        with c3.popover(t("quiz.finish_early", count=unanswered)):
            if st.button(t("quiz.finish_confirm"), key="finish_early"):
                finish()
                st.rerun()
    if attempt.practice and st.button(t("quiz.practice_end"), key="end_practice"):
        finish()
        st.rerun()

st.divider()
st.header(t("quiz.history"))
if not any(h.status == store.FINISHED for h in history):
    st.caption(t("quiz.no_history"))
for h in history:
    if h.status != store.FINISHED:
        continue
    row = t("quiz.history_row", id=h.attempt_id, date=ui.date_text(h.finished_at, minutes=True), score=round(h.score),
            result=t("quiz.result_pass") if h.passed else t("quiz.result_fail"))
    if st.button(row, key=f"hist_{h.attempt_id}", icon=":material/history:"):
        state["quiz_finished_id"] = h.attempt_id
        st.rerun()
