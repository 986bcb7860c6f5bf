"""Lessons: section list, section body with widgets and real lab code, progress.

Lab code that solves an exercise is shown only to a learner who passed it;
before, an outline and a link to the exercise (``academy.lessons.listing``).
"""

import streamlit as st

from academy import exercises, lessons
from academy.db import session_scope
from app import sharding, ui, widgets

t = ui.t
code = st.session_state["lang"]
who = ui.learner()
all_sections = lessons.sections(code)
ids = [s.id for s in all_sections]

asked = st.query_params.get("section")
current = asked if asked in ids else st.session_state.get("section", ids[0])
st.session_state["section"] = current
if st.query_params.get("section") != current:
    st.query_params["section"] = current

done = ui.done_sections(who)

with st.sidebar:
    st.markdown(f"**{t('lessons.sections')}**")
    for i, sec in enumerate(all_sections, 1):
        mark = " ✓" if sec.id in done else ""
        if st.button(f"{i}. {sec.title}{mark}", key=f"nav_{sec.id}", width="stretch",
                     type="primary" if sec.id == current else "secondary"):
            st.session_state["section"] = sec.id
            st.query_params["section"] = sec.id
            st.rerun()

index = ids.index(current)
section = all_sections[index]
st.caption(lessons.course_title(code))
st.title(f"{index + 1}. {section.title}")
if section.summary:
    st.markdown(f"*{section.summary}*")

WIDGETS = {
    "memory_calculator": widgets.memory_calculator,
    "ring_traffic": widgets.ring_traffic,
    "ring_diagram": widgets.ring_diagram,
    "sharding_calculator": sharding.calculator,
    "scaling_explorer": lambda: widgets.scaling_explorer(ui.my_scaling_points(who)),
}
blocks = lessons.body(code, current)
passed: set[str] = set()
if who is not None and any(block.kind == "code" for block in blocks):
    with session_scope() as session:
        passed = set(exercises.passes(session=session, learner_id=who.id))
for block in blocks:
    if block.kind == "markdown":
        st.markdown(block.value)
    elif block.kind == "widget" and block.value in WIDGETS:
        with st.container(border=True):
            WIDGETS[block.value]()
    elif block.kind == "code":
        try:
            shown = lessons.listing(block.value, code, passed)
        except (OSError, LookupError, ValueError):
            st.warning(t("lessons.code_missing", ref=block.value))
        else:
            # Long lines wrap: a listing that scrolls sideways on a phone is out of a keyboard's
            # reach (Streamlit's code block takes no focus, axe scrollable-region-focusable).
            if shown.withheld_for is None:
                st.code(shown.code, language="python", wrap_lines=True)
                st.caption(t("lessons.code_from", path=block.value.split("::")[0]))
            else:  # the exercise first, then the listing
                title = exercises.text(shown.withheld_for, code)["title"]
                st.code(shown.code, language=None, wrap_lines=True)
                st.caption(t("lessons.code_withheld", exercise=title))
                ui.link("exercises", t("lessons.to_exercise", exercise=title), ":material/edit_note:",
                        exercise=shown.withheld_for)

st.divider()
c1, c2, c3 = st.columns(3)
if section.id in done:
    c1.success(t("lessons.done"))
    if c1.button(t("lessons.undo_done"), key="undo_done"):
        ui.set_done(who, section.id, False)
        st.rerun()
elif c1.button(t("lessons.mark_done"), type="primary", icon=":material/check:", key="mark_done"):
    ui.set_done(who, section.id, True)
    st.rerun()
if section.lab:
    with c2:
        ui.link("labs", t("lessons.to_lab", lab=t(f"labs_names.{section.lab}")), ":material/science:",
                lab=section.lab)
with c3:
    ui.link("quiz", t("lessons.to_quiz"), ":material/quiz:")
if who is None and section.id in done:
    st.caption(t("lessons.guest_done"))

p1, p2 = st.columns(2)
if index > 0:
    prev = all_sections[index - 1]
    if p1.button(t("lessons.previous", title=prev.title), key="prev"):
        st.session_state["section"] = prev.id
        st.query_params["section"] = prev.id
        st.rerun()
if index < len(all_sections) - 1:
    nxt = all_sections[index + 1]
    if p2.button(t("lessons.next", title=nxt.title), key="next"):
        st.session_state["section"] = nxt.id
        st.query_params["section"] = nxt.id
        st.rerun()

glossary = lessons.glossary(code)
if glossary:
    with st.expander(t("lessons.glossary")):
        # avoid/allow are the terminology check's lists, not something a learner reads.
        st.table([{k: entry[k] for k in ("term", "en", "definition") if k in entry}
                  for entry in glossary])
