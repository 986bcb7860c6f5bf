"""Verify: filled in by its own issue; until then it says so and does nothing."""

import streamlit as st

from app import ui

st.title(ui.t("nav.verify"))
st.info(ui.t("coming.body"))
