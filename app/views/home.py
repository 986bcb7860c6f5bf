"""Home: what the course is, the course map and the learner's progress, with how many
questions are due for review.

The course map is laid out row by row (one ``st.columns`` per row), so the
page's order, which a keyboard, a screen reader and a phone's stacked
columns follow, is the reading order 1, 2, 3, ... The certificate card says
what ``certificates.eligibility`` answers, the rule the store issues by.
"""

import streamlit as st

import certificates as certs
from academy import exercises, lessons
from academy.db import session_scope
from academy.labruns.pages import lab_run_count
from academy.settings import get_settings
from app import ui
from quizzes import review
from quizzes import store as quiz_store

PER_ROW = 3

t = ui.t
code = st.session_state["lang"]
who = ui.learner()
settings = get_settings()

# One h1, then h2s. The course's name is the h1's subtitle, not a second heading (journey
# review Minor 13: "Data Parallelism Academy" over "Data Parallelism" read as two titles).
st.title(t("app.title"))
st.caption(lessons.course_title(code))
st.write(t("home.intro"))

all_sections = lessons.sections(code)
done = ui.done_sections(who)
count = sum(1 for s in all_sections if s.id in done)
st.header(t("home.course_map"))
st.progress(count / len(all_sections), text=t("home.progress", done=count, total=len(all_sections)))
if who is None:
    st.caption(t("home.guest_progress"))

next_up = next((s for s in all_sections if s.id not in done), None)
if next_up is not None:
    label = t("home.start") if count == 0 else t("home.continue", title=next_up.title)
    ui.link("lessons", label, ":material/play_arrow:", section=next_up.id)

for row_start in range(0, len(all_sections), PER_ROW):
    row = all_sections[row_start:row_start + PER_ROW]
    for number, sec, col in zip(range(row_start + 1, row_start + 1 + len(row)), row, st.columns(PER_ROW),
                                strict=False):
        with col.container(border=True):
            # The card's title is its link (once, and wrapped rather than cut short: Minor 13).
            mark = f" ✓ *{t('home.done_mark')}*" if sec.id in done else ""
            ui.link("lessons", f"**{number}. {sec.title}**{mark}", ":material/menu_book:", section=sec.id)
            st.caption(sec.summary)

# --- the learner's status: quiz, exercises, certificate, labs -------------------------
st.header(t("home.status"))
best = verdict = due = None
passed_exercises: dict = {}
runs = 0
if who is not None:
    with session_scope() as session:
        best = quiz_store.best_attempt(session=session, learner_id=who.id)
        passed_exercises = exercises.passes(session=session, learner_id=who.id)
        verdict = certs.eligibility(session=session, learner_id=who.id)
        runs = lab_run_count(session=session, learner_id=who.id)
        # The review queue brought up to date (a finished lab run adds its questions), then counted.
        now = review.clock()
        review.sync(session=session, learner_id=who.id, now=now)
        due = review.due_count(session=session, learner_id=who.id, now=now)
required = exercises.required() if settings.certificate_requires_exercises else ()
c_quiz, c_ex, c_cert, c_labs = st.columns(4)

with c_quiz.container(border=True):
    st.markdown(f"**{t('home.quiz_status')}**")
    if best is None:
        st.write(t("home.quiz_none"))
    elif best.passed:
        st.write(t("home.quiz_passed", score=round(best.score)))
    else:
        st.write(t("home.quiz_best", score=round(best.score), pass_mark=settings.quiz_pass_percent))
    ui.link("quiz", t("nav.quiz"), ":material/quiz:")
    if due is not None:
        st.write(t("home.review_due", count=due) if due else t("home.review_none"))
        ui.link("review", t("nav.review"), ":material/event_repeat:")

with c_ex.container(border=True):
    st.markdown(f"**{t('home.exercises_status')}**")
    if who is None:
        st.write(t("home.exercises_guest"))
    else:
        catalog = exercises.catalog()
        st.write(t("home.exercises_passed", passed=sum(ex in passed_exercises for ex in catalog),
                   count=len(catalog)))
        if required:
            st.caption(t("home.exercises_required", done=sum(ex in passed_exercises for ex in required),
                         count=len(required)))
    ui.link("exercises", t("nav.exercises"), ":material/code:")

with c_cert.container(border=True):
    st.markdown(f"**{t('home.cert_status')}**")
    if verdict is None:
        st.write(t("home.cert_guest_exercises") if required else t("home.cert_guest"))
    elif verdict.reason == "quiz_missing":
        st.write(t("home.cert_needs_quiz_exercises" if required else "home.cert_needs_quiz",
                   pass_mark=settings.quiz_pass_percent))
    elif verdict.reason == "exercises_missing":
        st.write(t("home.cert_needs_exercises", count=len(verdict.missing)))
        for ex in verdict.missing:
            ui.link("exercises", exercises.text(ex, code)["title"], ":material/code:", exercise=ex)
    elif verdict.reason == "disqualified":
        st.write(t("home.cert_disqualified"))
    elif verdict.reason == "already_issued":
        st.write(t("home.cert_issued", id=verdict.certificate_id))
    else:
        st.write(t("home.cert_ready"))
    if verdict is not None and verdict.reason in ("eligible", "already_issued", "disqualified"):
        ui.link("certificate", t("nav.certificate"), ":material/workspace_premium:")

with c_labs.container(border=True):
    st.markdown(f"**{t('home.labs_status')}**")
    st.write(t("home.labs_runs", count=runs) if runs else t("home.labs_none"))
    ui.link("labs", t("nav.labs"), ":material/science:")
