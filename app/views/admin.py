"""Admin: the public address certificates carry, learners, administrators, content checks, how
each quiz question performs, and certificates. Admins only."""

import streamlit as st
from sqlmodel import func, select

import certificates as certs
from academy import exercises, i18n, lessons, regrade
from academy.accounts import AccountError, make_admin
from academy.db import session_scope
from academy.models import CertificateEvent, Learner
from academy.settings import get_settings
from app import ui
from certificates import address, addresscheck
from quizzes import itemstats
from quizzes.bank import load_bank
from quizzes.engine import plan_question, public_question

t = ui.t
code = st.session_state["lang"]
who = ui.learner()
if who is None or not who.is_admin:
    # main.py does not even list this page for non-admins; this guards direct use.
    st.error(t("admin.refused"))
    st.stop()

st.title(t("nav.admin"))

# Where every link a certificate signs points (issue #36): said first, as nothing signed can change.
st.header(t("admin.address"))
url = address.public_url()
kind = address.notice()
if kind is not None:
    st.warning(t(f"admin.address_{kind}", url=url))
if not get_settings().public_url_check:
    st.info(t("admin.address_check_off"))
else:
    answer = addresscheck.ask(url)
    if answer.ok:
        st.success(t("admin.address_ok", url=url))
    else:
        st.error(t(f"admin.address_refused.{answer.reason}", url=url))
        st.text(answer.detail)  # what the address answered, as text

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
                made = make_admin(session=session, email=email, granted_by=who.id)
            st.success(t("admin.made_admin"))
            st.text(made.email)  # what was typed is shown as text
        except AccountError as err:
            st.error(ui.error_text(err))

st.header(t("admin.content"))
problems = {language: i18n.missing_keys(language) for language in i18n.languages()}
if not any(problems.values()):
    st.success(t("admin.content_ok"))
for language, keys in problems.items():  # not `code`: the page's language, read below
    if keys:
        st.warning(t("admin.content_missing", lang=language, count=len(keys), keys=", ".join(keys[:10])))

st.header(t("admin.items"))
st.caption(t("admin.items_help", low=itemstats.LOW_DISCRIMINATION, min=itemstats.MIN_ATTEMPTS))
with session_scope() as session:
    stats = itemstats.question_stats(session=session, course_id=get_settings().course_id)
    by_template = itemstats.template_stats(session=session)
if not stats:
    st.caption(t("admin.items_none"))
else:
    # The least discriminating first: the questions to read again head the table.
    bank = load_bank()
    titles = {s.id: s.title for s in lessons.sections(code)}

    def question_text(qid: str) -> str:
        question = bank.questions.get(qid)
        return public_question(plan_question(question, seed=0), bank, code).text if question else qid

    st.dataframe(
        [{t("admin.col_question"): question_text(s.question_id),
          t("admin.col_section"): titles.get(bank.questions[s.question_id].topic, "")
          if s.question_id in bank.questions else "",
          t("admin.col_asked"): s.asked, t("admin.col_answered"): s.answered,
          t("admin.col_right"): None if s.right_share is None else round(100 * s.right_share),
          t("admin.col_discrimination"): None if s.discrimination is None else round(s.discrimination, 2)}
         for s in stats],
        hide_index=True,
        column_config={t("admin.col_right"): st.column_config.NumberColumn(format="%d %%")},
    )
st.subheader(t("admin.templates"))
st.caption(t("admin.templates_help"))
if not by_template:
    st.caption(t("admin.templates_none"))
else:
    st.dataframe([{t("admin.col_template"): s.template, t("admin.col_lab"): t(f"labs_names.{s.lab}"),
                   t("admin.col_answered"): s.answered, t("admin.col_right"): round(100 * s.right / s.answered)}
                  for s in by_template], hide_index=True,
                 column_config={t("admin.col_right"): st.column_config.NumberColumn(format="%d %%")})

st.header(t("admin_certs.title"))
# Neither revocation is the default (F-3 residue): Enter submits nothing and both buttons
# look alike, and each says what becomes of the learner, so a plain Revoke for fraud is a choice.
with st.form("revoke", enter_to_submit=False):
    st.markdown(f"**{t('admin_certs.revoke')}**")
    st.caption(t("admin_certs.revoke_help"))
    cert_id = st.text_input(t("admin_certs.cert_id"), max_chars=200)
    reason = st.text_input(t("admin_certs.reason"), max_chars=500)
    left, right = st.columns(2)
    plain_revoke = left.form_submit_button(t("admin_certs.revoke_button"), type="secondary")
    for_cause = right.form_submit_button(t("admin_certs.revoke_disqualify_button"), type="secondary")
    if plain_revoke or for_cause:
        if not reason.strip():
            st.error(t("admin_certs.need_reason"))
        else:
            try:
                clean_id = certs.parse_id(cert_id)
                with session_scope() as session:
                    certs.revoke(session=session, cert_id=clean_id, actor_id=who.id, reason=reason.strip(),
                                 disqualify=for_cause)
                st.success(t("admin_certs.disqualified" if for_cause else "admin_certs.revoked", id=clean_id))
                if not for_cause:
                    st.warning(t("admin_certs.may_claim_again"))
            except (certs.InvalidId, certs.CertificateNotFound) as err:
                st.error(ui.error_text(err))
            except certs.AlreadyRevoked as err:
                st.warning(ui.error_text(err))

st.subheader(t("admin_certs.blocked"))
st.caption(t("admin_certs.blocked_help"))
with session_scope() as session:
    blocked = certs.disqualified_certificates(session=session)
if not blocked:
    st.caption(t("admin_certs.none_blocked"))
for cert in blocked:
    with st.container(border=True):
        # Names and reasons are typed by people: plain text, never Markdown.
        st.text(t("admin_certs.blocked_row", id=cert.id, name=cert.name, reason=cert.revoked_reason or "",
                  date=ui.date_text(cert.revoked_at) if cert.revoked_at else ""))
        if st.button(t("admin_certs.lift_button"), key=f"lift_{cert.id}"):
            try:
                with session_scope() as session:
                    certs.lift_disqualification(session=session, cert_id=cert.id, actor_id=who.id)
                st.success(t("admin_certs.lifted", id=cert.id))
            except certs.NotDisqualified as err:
                st.warning(ui.error_text(err))

st.subheader(t("admin_regrade.title"))
st.caption(t("admin_regrade.help"))
with session_scope() as session:
    flagged = regrade.flagged_certificates(session=session)
if not flagged:
    st.caption(t("admin_regrade.none"))
for f in flagged:
    with st.container(border=True):
        # Names are typed by people and reasons carry values from learners' runs: plain text.
        st.text(t("admin_regrade.row", id=f.certificate_id, name=f.name, email=f.email))
        for w in f.passes:
            st.text(t("admin_regrade.pass", exercise=exercises.text(w.exercise, code)["title"],
                      date=ui.date_text(w.withdrawn_at), reason=regrade.reason_text(w.reason, code, w.exercise)))

st.subheader(t("admin_certs.events"))
with session_scope() as session:
    events = session.exec(select(CertificateEvent).order_by(CertificateEvent.id.desc()).limit(20)).all()
for ev in events:
    st.text(t("admin_certs.event_row", at=ui.date_text(ev.at, minutes=True), action=ev.action,
              id=ev.certificate_id, reason=ev.reason or ""))
