"""Review: the questions that are due, one at a time, and when the others come back (issue #42).

The queue is ``quizzes.review``'s: brought up to date (``sync``) on every run of
the page, due questions first. A question is shown from a plan kept in the
session (never sent to the browser); the answer is graded and scheduled by
``review.answer``, and its feedback stays on screen until "Next question".
"""

import secrets
from collections import Counter

import streamlit as st
from sqlalchemy.exc import OperationalError

from academy import lessons
from academy.db import session_scope
from app import quizviews, ui
from quizzes import review
from quizzes.bank import load_bank
from quizzes.engine import QuizError
from quizzes.templates import load_templates

t = ui.t
code = st.session_state["lang"]
st.title(t("nav.review"))
who = ui.require_learner("review.need_account")
if who is None:
    st.stop()

state = st.session_state
bank, templates = load_bank(), load_templates()
titles = {s.id: s.title for s in lessons.sections(code)}
now = review.clock()
with session_scope() as session:
    review.sync(session=session, learner_id=who.id, now=now, bank=bank, templates=templates)
    due, upcoming = review.queue(session=session, learner_id=who.id, now=now, bank=bank, templates=templates)
st.write(t("review.intro"))


def source(item: review.Item) -> str:
    """Where a question comes from: the quiz, or which of the learner's runs, and its section."""
    section = titles.get(item.topic, item.topic)
    if item.run_id is None:
        return t("review.from_quiz", section=section)
    return t("review.from_run", lab=t(f"labs_names.{item.lab}"), run=item.run_id, section=section)


def when(item_due) -> str:
    return ui.date_text(item_due, minutes=True)


def outcome(done: review.Answered, seconds: float | None) -> str:
    """What the answer did to the schedule, in words."""
    if not done.applied:
        return t("review.stale", when=when(done.due))
    name = done.rating.name.lower()  # again | hard | good | easy
    return t(f"review.rated_{name}", when=when(done.due), seconds=round(seconds or 0))


# --- the question on screen: just answered (its feedback), or the first one due ---------------
result = state.get("review_result")
current = state.get("review_current")
if result is None and (current is None or not any(i.card_id == current["item"].card_id
                                                   and i.reps == current["item"].reps for i in due)):
    current = None
    if due:
        try:
            with session_scope() as session:
                plan = review.new_plan(session=session, item=due[0], seed=secrets.randbelow(2**31), bank=bank,
                                       templates=templates)
            current = {"item": due[0], "plan": plan, "shown_at": review.clock()}
        except QuizError as err:
            st.warning(ui.error_text(err))
    state["review_current"] = current

if current is None:
    if not due and not upcoming:
        st.info(t("review.empty"))
        ui.link("quiz", t("nav.quiz"), ":material/quiz:")
        ui.link("labs", t("nav.labs"), ":material/science:")
    elif not due:
        if state.get("review_answered"):
            st.success(t("review.all_done"))
        st.info(t("review.none_due", when=when(upcoming[0].due)))
else:
    item, plan = current["item"], current["plan"]
    if result is None:
        st.markdown(t("review.due", count=len(due)))
    try:
        with session_scope() as session:
            question = review.shown(session=session, item=item, plan=plan, lang=code, bank=bank, templates=templates)
    except QuizError as err:
        state.pop("review_current", None)
        st.warning(ui.error_text(err))
        st.stop()
    with st.container(border=True):
        st.caption(source(item))
        st.markdown(f"## {question.text}")  # a heading, as on the Quiz page (headings in order: h1, h2)
        if result is not None:
            # Graded again in today's language (a switch after answering); nothing is scheduled twice.
            with session_scope() as session:
                shown_feedback = review.feedback(session=session, learner_id=who.id, card_id=item.card_id, plan=plan,
                                                 response=result["response"], lang=code, bank=bank,
                                                 templates=templates)
            quizviews.show_feedback(shown_feedback, titles, code)
            st.info(outcome(result["answered"], result["seconds"]))
            if st.button(t("review.next"), type="primary", icon=":material/arrow_forward:", key="review_next"):
                state.pop("review_result", None)
                state.pop("review_current", None)
                state["review_answered"] = True
                st.rerun()
        else:
            response, complete = quizviews.answer_widget(question, f"rev_{item.card_id}_{item.reps}")
            if st.button(t("review.submit"), type="primary", key=f"rev_submit_{item.card_id}_{item.reps}"):
                if response is None:
                    st.warning(t("quiz.need_choice"))
                elif not complete:
                    st.warning(t("quiz.need_all_items"))
                else:
                    seconds = (review.clock() - current["shown_at"]).total_seconds()
                    try:
                        with session_scope() as session:
                            done = review.answer(session=session, learner_id=who.id, card_id=item.card_id,
                                                 reps=item.reps, plan=plan, response=response, lang=code,
                                                 seconds=seconds, bank=bank, templates=templates)
                        state["review_result"] = {"answered": done, "response": response, "seconds": seconds}
                        st.rerun()
                    except QuizError as err:
                        st.error(ui.error_text(err))
                    except OperationalError:  # e.g. SQLite still locked after its busy timeout
                        st.error(t("common.busy"))

if upcoming:
    # Grouped: the questions of one run or section that come back at one moment are one line.
    st.header(t("review.upcoming"))
    groups = Counter((when(i.due), source(i)) for i in upcoming)  # to the minute, as shown
    st.markdown("\n".join(f"- {t('review.upcoming_row', when=moment, count=count, source=where)}"
                          for (moment, where), count in groups.items()))
