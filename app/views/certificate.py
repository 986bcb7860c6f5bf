"""Certificate: claim it after passing, download the PDF, share the link, reissue.

One active certificate per learner: "Create" shows only while there is
none; a new name or language goes through Reissue. The store enforces the
same (a forged or raced "Create" gets the existing one or AlreadyCertified),
and refuses a learner an admin disqualified: both ask ``certs.eligibility``."""

import streamlit as st

import certificates as certs
from academy import exercises, i18n
from academy.db import session_scope
from academy.settings import get_settings
from app import ui

t = ui.t
code = st.session_state["lang"]
st.title(t("nav.certificate"))
who = ui.require_learner("certificate.need_account")
if who is None:
    st.stop()

with session_scope() as session:
    # The one rule the store also applies: this page offers "Create" only when the store would issue.
    verdict = certs.eligibility(session=session, learner_id=who.id)
    mine = certs.certificates_of(session=session, learner_id=who.id)
    passed_exercises = exercises.passes(session=session, learner_id=who.id)
needs_exercises = get_settings().certificate_requires_exercises


def exercise_checklist() -> None:
    """The exercises the certificate asks for, each passed or with a link to it."""
    for ex in exercises.required():
        title = exercises.text(ex, code)["title"]
        if ex in passed_exercises:
            st.write(t("certificate.exercise_done", title=title))
        else:
            ui.link("exercises", t("certificate.exercise_todo", title=title), ":material/code:", exercise=ex)


# No passed attempt: nothing can be claimed here, whatever the URL says.
if verdict.reason == "quiz_missing":
    pass_mark = get_settings().quiz_pass_percent
    with st.container(border=True):
        if needs_exercises:
            st.info(t("certificate.locked_with_exercises", pass_mark=pass_mark))
            exercise_checklist()
        else:
            st.info(t("certificate.locked", pass_mark=pass_mark))
        ui.link("quiz", t("certificate.to_quiz"), ":material/quiz:")
    st.stop()

if verdict.reason == "disqualified":
    st.error(t("certificate.disqualified"))

lang_names = i18n.languages()  # each in its own name, as the sidebar lists them

# The quiz alone is not enough while the setting asks for exercises: say which, with links.
if verdict.reason == "exercises_missing":
    with st.container(border=True):
        st.info(t("certificate.needs_exercises"))
        exercise_checklist()


@st.cache_data(max_entries=256, show_spinner=False)
def _pdf(cert_id: str) -> bytes:
    """A certificate never changes once issued (a new name is a new ID), so its PDF is cached."""
    with session_scope() as session:
        cert = certs.get_certificate(session=session, cert_id=cert_id)
        # The credential first, so the cached PDF always carries it (older rows have none yet).
        return certs.render_pdf(certs.ensure_credential(session=session, cert=cert))


@st.cache_data(max_entries=256, show_spinner=False)
def _badge(cert_id: str) -> str:
    """The certificate's signed OpenBadgeCredential (made once, then never changed)."""
    with session_scope() as session:
        cert = certs.get_certificate(session=session, cert_id=cert_id)
        return certs.ensure_credential(session=session, cert=cert).credential_json


if verdict.eligible:
    with st.container(border=True):
        st.write(t("certificate.eligible", score=round(verdict.attempt.score)))
        with st.form("issue"):
            name = st.text_input(t("certificate.name"), value=who.display_name, max_chars=200,
                                 help=t("certificate.name_help"))
            cert_langs = list(certs.languages())
            cert_lang = st.selectbox(t("certificate.language"), cert_langs,
                                     index=cert_langs.index(code) if code in cert_langs else 0,
                                     format_func=lambda c: lang_names.get(c, c))
            if st.form_submit_button(t("certificate.create"), type="primary", icon=":material/workspace_premium:"):
                if not name.strip():
                    st.error(t("certificate.empty_name"))
                else:
                    try:
                        with session_scope() as session:
                            certs.issue_for_learner(session=session, learner_id=who.id, name=name, lang=cert_lang)
                        st.session_state["_cert_created"] = True
                        st.rerun()
                    except certs.CertificateError as err:
                        st.error(ui.error_text(err))

if st.session_state.pop("_cert_created", False):
    st.success(t("certificate.created"))

st.subheader(t("certificate.yours"))
if not mine:
    st.caption(t("certificate.none_yet"))
for cert in mine:
    revoked = cert.revoked_at is not None
    with st.container(border=True):
        status = t({"valid": "certificate.status_valid", "replaced": "certificate.status_replaced"}
                   .get(certs.row_status(cert), "certificate.status_revoked"))
        st.markdown(f"**{cert.id}** · {status}")
        ui.person_name(cert.name)
        st.caption(t("certificate.issued_on", date=ui.date_text(cert.issued_at),
                     lang=lang_names.get(cert.language, cert.language)))
        if revoked:
            continue
        c1, c2, c3 = st.columns(3)
        c1.download_button(t("certificate.download"), data=_pdf(cert.id),
                           file_name=certs.pdf_filename(cert), mime="application/pdf",
                           icon=":material/download:", key=f"dl_{cert.id}", on_click="ignore")
        # The same achievement as a signed Open Badges 3.0 credential, for wallets and verifiers.
        c2.download_button(t("certificate.download_badge"), data=_badge(cert.id),
                           file_name=f"{cert.id}.json", mime="application/vc",
                           icon=":material/badge:", key=f"badge_{cert.id}", on_click="ignore",
                           help=t("certificate.badge_help"))
        c3.link_button(t("certificate.linkedin"), certs.linkedin_url(cert, get_settings()),
                       icon=":material/share:")
        st.caption(t("certificate.link"))
        st.code(certs.verify_link(cert), language=None)
        with st.expander(t("certificate.reissue")):
            st.caption(t("certificate.reissue_help"))
            with st.form(f"reissue_{cert.id}"):
                new_name = st.text_input(t("certificate.name"), value=cert.name, max_chars=200)
                new_lang = st.selectbox(t("certificate.language"), list(certs.languages()),
                                        index=list(certs.languages()).index(cert.language)
                                        if cert.language in certs.languages() else 0,
                                        format_func=lambda c: lang_names.get(c, c), key=f"relang_{cert.id}")
                # The holder's choice (issue #22), off unless they tick it; the caption says what it means.
                show_new_id = st.checkbox(t("certificate.reissue_show_new"), value=False,
                                          key=f"reshow_{cert.id}")
                st.caption(t("certificate.reissue_show_new_help"))
                if st.form_submit_button(t("certificate.reissue_button")):
                    try:
                        with session_scope() as session:
                            certs.reissue(session=session, cert_id=cert.id, learner_id=who.id,
                                          new_name=new_name, lang=new_lang, show_new_id=show_new_id)
                        st.session_state["_cert_reissued"] = True
                        st.rerun()
                    except certs.CertificateError as err:
                        st.error(ui.error_text(err))

if st.session_state.pop("_cert_reissued", False):
    st.success(t("certificate.reissued"))
