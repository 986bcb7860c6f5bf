"""The widgets of a quiz question, shared by the Quiz and the Review page: the input for
each question type, and the feedback once the learner has answered."""

from __future__ import annotations

import streamlit as st

from app import ui
from quizzes.engine import message

t = ui.t


def show_feedback(fb, titles: dict[str, str], code: str) -> None:
    """Right or wrong, why, the right answer, and the section to read (``titles``: section id to title)."""
    if fb.duplicate:
        st.info(t("quiz.duplicate"))
    if fb.correct:
        st.success(t("quiz.right"))
    elif fb.credit > 0:
        st.warning(t("quiz.partly", percent=round(fb.credit * 100)))
    else:
        st.error(t("quiz.wrong"))
    joiner = " → " if fb.type == "ordering" else ", "  # an order reads as one, as the right answer below
    st.markdown(t("quiz.your_answer", answer=joiner.join(fb.given) or t("quiz.unanswered")))
    if not fb.correct:
        st.markdown(t("quiz.correct_answer", answer=" → ".join(fb.correct_answer)
                      if fb.type == "ordering" else ", ".join(fb.correct_answer)))
    if fb.mistake:  # the bank's words for the slip the learner's number is (ours: Markdown)
        st.warning(fb.mistake, icon=":material/troubleshoot:")
    # Every option explains itself: a right answer still needs the caveat a
    # distractor's explanation may carry. Explanations end in a linked
    # "See <section>." rendered from the section ids in the bank.
    chosen = [o for o in fb.explanations if o.chosen]
    right = [o for o in fb.explanations if o.correct and not o.chosen]
    others = [o for o in fb.explanations if not o.correct and not o.chosen]
    for heading, options in ((t("quiz.why_chosen"), chosen), (t("quiz.why_correct"), right),
                             (message("feedback.why_others", code), others)):
        if options:
            st.markdown(f"**{heading}**")
            for option in options:
                mark = ":material/check_circle:" if option.correct else ":material/cancel:"
                st.markdown(f"{mark} *{option.text}* — {option.explain}")
    if fb.explanation:
        # The label's colon is the language's own (full-width in zh): it is in the catalog.
        sep = "" if t("quiz.explanation").endswith("：") else " "
        st.markdown(f"**{t('quiz.explanation')}**{sep}{fb.explanation}")
    ui.link("lessons", t("quiz.read_section", title=titles.get(fb.topic, fb.topic)),
            ":material/menu_book:", section=fb.topic)


def answer_widget(question, key: str) -> tuple[object, bool]:
    """The input for one question: (response or None, whether it is complete).

    A partial ordering is a response (the learner started) that is not
    complete yet; nothing at all is ``(None, False)``."""
    if question.type == "single":
        labels = dict(question.options)
        choice = st.radio(t("quiz.choose_one"), list(labels), index=None, format_func=labels.get, key=key)
        return choice, choice is not None
    if question.type == "multiple":
        st.caption(t("quiz.choose_many"))
        picked = [k for k, text in question.options if st.checkbox(text, key=f"{key}_{k}")]
        return picked or None, bool(picked)
    if question.type == "numeric":
        label = t("quiz.number_label", unit=question.unit) if question.unit else t("quiz.number_label_plain")
        text = st.text_input(label, key=key, max_chars=64, help=t("quiz.number_help"))
        return (text, True) if text.strip() else (None, False)
    return ordering_widget(question, key)


def ordering_widget(question, key: str) -> tuple[list[str] | None, bool]:
    """One select box per position, 1 to n, each offering every item: a widget made for
    putting things in order, used by keyboard (Tab, arrows, Enter) as by mouse, and read
    top to bottom by a screen reader. The response is the item keys by position; it is
    complete when every position holds an item and no item is placed twice."""
    labels = dict(question.items)
    st.caption(t("quiz.order_hint"))
    picks = [st.selectbox(t("quiz.order_position", n=n), list(labels), index=None, format_func=labels.get,
                          placeholder=t("quiz.order_placeholder"), key=f"{key}_{n}")
             for n in range(1, len(labels) + 1)]
    chosen = [k for k in picks if k is not None]
    twice = [k for k in dict.fromkeys(chosen) if chosen.count(k) > 1]
    for k in twice:
        st.warning(t("quiz.order_twice", item=labels[k]))
    return chosen or None, len(chosen) == len(labels) and not twice
