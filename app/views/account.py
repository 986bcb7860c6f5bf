"""Account: sign in, create an account, edit the profile, sign out."""

import streamlit as st

from academy.accounts import AccountError, clean_display_name, sign_in, sign_up
from academy.db import session_scope
from academy.models import Learner
from academy.settings import get_settings
from app import ui

t = ui.t
st.title(t("nav.account"))
who = ui.learner()

if who is None:
    tab_in, tab_up = st.tabs([t("account.sign_in_tab"), t("account.sign_up_tab")])
    with tab_in, st.form("sign_in"):
        email = st.text_input(t("account.email"), key="in_email", max_chars=254)
        password = st.text_input(t("account.password"), type="password", key="in_password")
        if st.form_submit_button(t("account.sign_in"), type="primary"):
            try:
                with session_scope() as session:
                    found = sign_in(session=session, email=email, password=password)
                ui.sign_in_as(found)
                st.rerun()
            except AccountError as err:
                st.error(t(err.code))
    with tab_up, st.form("sign_up"):
        name = st.text_input(t("account.display_name"), key="up_name", max_chars=200)
        email = st.text_input(t("account.email"), key="up_email", max_chars=254)
        password = st.text_input(
            t("account.password"), type="password", key="up_password", help=t("account.password_help")
        )
        if st.form_submit_button(t("account.sign_up"), type="primary"):
            try:
                with session_scope() as session:
                    created = sign_up(
                        session=session, email=email, password=password,
                        display_name=name, language=st.session_state["lang"],
                    )
                ui.sign_in_as(created)
                st.session_state["_account_created"] = True
                st.rerun()
            except AccountError as err:
                st.error(t(err.code))
else:
    if st.session_state.pop("_account_created", False):
        st.success(t("account.created"))
    st.subheader(t("account.welcome", name=ui.plain(who.display_name or who.email)))
    st.caption(t("account.stay_signed_in", days=get_settings().session_days))
    with st.form("profile"):
        st.markdown(f"**{t('account.profile')}**")
        st.text(who.email)
        name = st.text_input(t("account.display_name"), value=who.display_name, max_chars=200)
        if st.form_submit_button(t("account.save_profile")):
            with session_scope() as session:
                row = session.get(Learner, who.id)
                row.display_name = clean_display_name(name)
                row.language = st.session_state["lang"]
                session.add(row)
            st.success(t("account.profile_saved"))
    if st.button(t("account.sign_out"), icon=":material/logout:"):
        ui.sign_out()
        st.session_state["_signed_out"] = True
        st.rerun()

if st.session_state.pop("_signed_out", False):
    st.info(t("account.signed_out"))
