"""Home: what the course is, the course map and the learner's progress."""

import streamlit as st

from academy import lessons
from app import ui

t = ui.t
code = st.session_state["lang"]
who = ui.learner()

st.title(t("app.title"))
st.markdown(f"### {lessons.course_title(code)}")
st.write(t("home.intro"))

all_sections = lessons.sections(code)
done = ui.done_sections(who)
count = sum(1 for s in all_sections if s.id in done)
st.subheader(t("home.course_map"))
st.progress(count / len(all_sections), text=t("home.progress", done=count, total=len(all_sections)))
if who is None:
    st.caption(t("home.guest_progress"))

next_up = next((s for s in all_sections if s.id not in done), None)
if next_up is not None:
    label = t("home.start") if count == 0 else t("home.continue", title=next_up.title)
    ui.link("lessons", label, ":material/play_arrow:", section=next_up.id)

cols = st.columns(3)
for i, sec in enumerate(all_sections):
    with cols[i % 3].container(border=True):
        mark = f" ✓ *{t('home.done_mark')}*" if sec.id in done else ""
        st.markdown(f"**{i + 1}. {sec.title}**{mark}")
        st.caption(sec.summary)
        ui.link("lessons", sec.title, ":material/menu_book:", section=sec.id)

ui.home_status(who)
