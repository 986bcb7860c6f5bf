"""Certificate: filled in by its own issue; until then it says so and does nothing."""

import streamlit as st

from app import ui

st.title(ui.t("nav.certificate"))
st.info(ui.t("coming.body"))
