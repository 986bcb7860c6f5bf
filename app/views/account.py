"""Account: sign in, create an account, edit the profile, change the password, sign out
(here or everywhere), redeem a one-time administrator token."""

import streamlit as st

from academy.accounts import (
    AccountError,
    change_password,
    clean_display_name,
    redeem_admin_token,
    sign_in,
    sign_up,
)
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
            busy = st.empty()  # "busy, retrying" while the check waits its turn
            try:
                with session_scope() as session:
                    found = sign_in(session=session, email=email, password=password, client=ui.client(),
                                    on_wait=lambda: busy.info(t("account.busy_retrying")))
                ui.sign_in_as(found)
                st.rerun()
            except AccountError as err:
                busy.empty()
                st.error(ui.error_text(err))
    with tab_up, st.form("sign_up"):
        name = st.text_input(t("account.display_name"), key="up_name", max_chars=200)
        email = st.text_input(t("account.email"), key="up_email", max_chars=254)
        password = st.text_input(
            t("account.password"), type="password", key="up_password", help=t("account.password_help")
        )
        if st.form_submit_button(t("account.sign_up"), type="primary"):
            busy = st.empty()
            try:
                with session_scope() as session:
                    created = sign_up(
                        session=session, email=email, password=password,
                        display_name=name, language=st.session_state["lang"], client=ui.client(),
                        on_wait=lambda: busy.info(t("account.busy_retrying")),
                    )
                ui.sign_in_as(created)
                st.session_state["_account_created"] = True
                st.rerun()
            except AccountError as err:
                busy.empty()
                st.error(ui.error_text(err))
else:
    if st.session_state.pop("_account_created", False):
        st.success(t("account.created"))
    st.text(t("account.welcome", name=who.display_name or who.email))  # the learner's text: never Markdown
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
    if st.session_state.pop("_password_changed", False):
        st.success(t("account.password_changed"))
    with st.expander(t("account.security")):
        with st.form("password", clear_on_submit=True):
            st.markdown(f"**{t('account.change_password')}**")
            current = st.text_input(t("account.current_password"), type="password", key="pw_current")
            new = st.text_input(t("account.new_password"), type="password", key="pw_new",
                                help=t("account.password_help"))
            if st.form_submit_button(t("account.change_password")):
                try:
                    with session_scope() as session:
                        change_password(session=session, learner_id=who.id, current=current, new=new,
                                        keep_token=st.session_state.get("session_token"), client=ui.client())
                    st.session_state["_password_changed"] = True
                    st.rerun()
                except AccountError as err:
                    st.error(ui.error_text(err))
        if st.button(t("account.sign_out_everywhere"), help=t("account.sign_out_everywhere_help"),
                     icon=":material/devices:"):
            ui.sign_out(everywhere=True)
            st.session_state["_signed_out"] = "account.signed_out_everywhere"
            st.rerun()
        if not who.is_admin:
            with st.form("admin_token", clear_on_submit=True):
                token = st.text_input(t("account.admin_token"), type="password", key="admin_token",
                                      max_chars=100, help=t("account.admin_token_help"))
                if st.form_submit_button(t("account.redeem_admin_token")):
                    try:
                        with session_scope() as session:
                            redeem_admin_token(session=session, learner_id=who.id, token=token)
                        st.session_state["_admin_redeemed"] = True
                        st.rerun()
                    except AccountError as err:
                        st.error(ui.error_text(err))
    if st.session_state.pop("_admin_redeemed", False):
        st.success(t("account.admin_token_redeemed"))
    if st.button(t("account.sign_out"), icon=":material/logout:"):
        ui.sign_out()
        st.session_state["_signed_out"] = "account.signed_out"
        st.rerun()

if signed_out := st.session_state.pop("_signed_out", None):
    st.info(t(signed_out))
