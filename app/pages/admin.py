"""Admin: learners, administrators and content checks. Admins only."""

import streamlit as st
from sqlmodel import func, select

from app import i18n, ui
from app.accounts import AccountError, make_admin
from app.db import session_scope
from app.models import Learner

t = ui.t
who = ui.learner()
if who is None or not who.is_admin:
    # main.py does not even list this page for non-admins; this guards direct use.
    st.error(t("admin.refused"))
    st.stop()

st.title(t("nav.admin"))

st.header(t("admin.learners"))
with session_scope() as session:
    total = session.exec(select(func.count()).select_from(Learner)).one()
    admins = session.exec(select(func.count()).where(Learner.is_admin)).one()
st.write(t("admin.learners_count", count=total, admins=admins))
with st.form("make_admin"):
    email = st.text_input(t("admin.make_admin_email"), max_chars=254)
    if st.form_submit_button(t("admin.make_admin")):
        try:
            with session_scope() as session:
                make_admin(session=session, email=email)
            st.success(t("admin.made_admin", email=email.strip().lower()))
        except AccountError as err:
            st.error(t(err.code))

st.header(t("admin.content"))
problems = {code: i18n.missing_keys(code) for code in i18n.languages()}
if not any(problems.values()):
    st.success(t("admin.content_ok"))
for code, keys in problems.items():
    if keys:
        st.warning(t("admin.content_missing", lang=code, count=len(keys), keys=", ".join(keys[:10])))
