"""Verify (public, no sign-in): by ID, by the QR link (?id=), or an uploaded PDF.

Every value from a certificate (name, revocation reason) is shown with
st.text, never Markdown, so a name cannot become a link or decode entities
(F-11). An upload is checked by ``certs.check_pdf``: size cap, one page and
a limited child process before any parsing (one at a time per client, each
file's answer remembered), then signature and database;
the page shows the signed name and ID for the reader to compare with the
document, as no printed text is read."""

import streamlit as st

import certificates as certs
from academy import i18n
from academy.db import session_scope
from app import ui
from certificates import pdfscan

t = ui.t
code = st.session_state["lang"]
ctext = certs.texts(code)
st.title(t("nav.verify"))
st.write(t("verify.intro"))


def show(result: certs.VerifyResult, *, upload: bool = False) -> None:
    status = ctext["status"]
    if result.status == "valid":
        st.success(status["valid"])
        if upload:
            st.info(status["compare"])
    elif result.status == "revoked":
        st.error(status["revoked"].format(date=ui.date_text(result.revoked_at) if result.revoked_at else "?"))
    elif result.status == "replaced":  # a reissue, not revocation for cause (issue #22): no red
        st.warning(status["replaced"].format(date=ui.date_text(result.revoked_at) if result.revoked_at else "?"))
        if not result.replaced_by:
            st.caption(status["replaced_id_hidden"])
    elif result.status in ("not_found", "typo"):
        st.warning(status[result.status])
    elif result.status == "too_large":
        st.error(status["too_large"].format(limit=f"{pdfscan.MAX_BYTES // 2**20} MiB"))
    else:
        st.error(status.get(result.status, result.status))
    if result.name is None:
        return
    ui.person_name(result.name)
    labels = ctext["labels"]
    rows = {
        labels["name"]: result.name,
        ctext["id_label"]: result.id,
        labels["course"]: result.course_title or result.course,
        labels["score"]: certs.format_score(result.score, code) + " %" if result.score is not None else "",
        labels["date"]: certs.format_date(result.pass_date, code) if result.pass_date else "",
        labels["language"]: i18n.languages().get(result.lang, result.lang),
    }
    if result.issued_at:
        rows[labels["issued"]] = ui.date_text(result.issued_at)
    if result.revoked_reason:  # its kind only: an admin's own words stay in the admin area
        rows[labels["reason"]] = ctext["reasons"][result.revoked_reason]
    if result.replaced_by:  # only where the holder chose to show it when reissuing
        rows[labels["replaced_by"]] = result.replaced_by
    st.text("\n".join(f"{k}: {v}" for k, v in rows.items()))


asked = st.query_params.get("id", "")
with st.form("verify"):
    typed = st.text_input(t("verify.id_label"), value=asked[:200], max_chars=200,
                          placeholder=t("verify.id_placeholder"))
    submitted = st.form_submit_button(t("verify.check"), type="primary", icon=":material/verified:")
if submitted:
    st.query_params["id"] = typed.strip()[:200]
    asked = typed
if asked.strip():
    with session_scope() as session:
        show(certs.lookup(session=session, text=asked[:200]))
elif submitted:  # Verify pressed with nothing (or only spaces) typed: say what to type
    st.warning(t("verify.empty"))

st.divider()
upload = st.file_uploader(t("verify.pdf_check_label"), type=["pdf"],
                          max_upload_size=max(1, pdfscan.MAX_BYTES // 2**20),
                          help=t("verify.pdf_help", mb=max(1, pdfscan.MAX_BYTES // 2**20)))
if upload is not None:
    st.markdown(f"**{t('verify.pdf_result')}**")
    with session_scope() as session:
        # One upload read at a time per client (review N-9): the same address as the sign-in limits.
        show(certs.check_pdf(session=session, pdf_bytes=upload.getvalue(), client=ui.client()), upload=True)

with st.expander(t("verify.public_keys")):
    st.caption(t("verify.public_keys_help"))
    for info in certs.public_key_info():
        st.markdown(f"`{info.kid}` · {t('verify.active') if info.active else t('verify.retired')}")
        st.code(info.pem, language=None)
    st.download_button(t("verify.download_keys"), certs.export_public_keys_json(),
                       file_name="dp-academy-public-keys.json", mime="application/json", on_click="ignore")
