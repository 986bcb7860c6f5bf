"""Entry point: ``streamlit run app/main.py``.

Sets up the language, the signed-in learner and the navigation; each page
under ``app/views`` is a thin script over the plain modules. (The folder is
not called ``pages``: Streamlit would then run a page requested by URL on a
fresh server without this script, the old multipage mode.)

The file has two roles. ``streamlit run`` first imports it as the module
``main`` and, finding ``app = st.App(...)``, serves that under uvicorn with our
middleware (``app/web.py``); every page run then executes it as ``__main__``.
"""

import sys
from pathlib import Path

# `streamlit run app/main.py` puts app/ itself on sys.path; we import the
# project as packages (app, labs, quizzes, certificates) from its root.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
# A local page icon: ":material/..." made every browser fetch it from a third party (F-19).
ICON = Path(__file__).resolve().parent / "static" / "icon.png"

import streamlit as st  # noqa: E402

from app import web  # noqa: E402

if __name__ != "__main__":
    # Imported, not run as a page: `streamlit run app/main.py` found the st.App below and
    # serves it under uvicorn, with our middleware (headers, host check) in front.
    from academy.keystore import secrets_dir
    from certificates.routes import routes

    secrets_dir()  # 0700 now, also a folder the operator made with another mode
    web.refuse_global_cache_clear()
    web.warn_public_address()  # before anything is signed with it (certificates.address)
    # Beside the pages: the issuer's DID document, the revocation status list, each
    # credential as JSON / VC-JWT and the JSON verification API (certificates/routes.py).
    app = st.App(Path(__file__), routes=routes(), middleware=web.middleware())
else:
    from academy.db import get_engine
    from app import ui

    st.set_page_config(page_title="Data Parallelism Academy", page_icon=str(ICON), layout="wide")
    get_engine()  # creates the database and applies migrations on first start

    ui.style()
    code = ui.lang()
    ui.page_script(code)
    who = ui.learner()
    t = ui.t

    pages = [
        st.Page("views/home.py", title=t("nav.home"), icon=":material/home:", default=True),
        st.Page("views/lessons.py", title=t("nav.lessons"), icon=":material/menu_book:", url_path="lessons"),
        st.Page("views/labs.py", title=t("nav.labs"), icon=":material/science:", url_path="labs"),
        st.Page("views/exercises.py", title=t("nav.exercises"), icon=":material/code:", url_path="exercises"),
        st.Page("views/quiz.py", title=t("nav.quiz"), icon=":material/quiz:", url_path="quiz"),
        st.Page("views/review.py", title=t("nav.review"), icon=":material/event_repeat:", url_path="review"),
        st.Page(
            "views/certificate.py", title=t("nav.certificate"), icon=":material/workspace_premium:",
            url_path="certificate",
        ),
        st.Page("views/verify.py", title=t("nav.verify"), icon=":material/verified:", url_path="verify"),
        st.Page("views/account.py", title=t("nav.account"), icon=":material/person:", url_path="account"),
    ]
    if who is not None and who.is_admin:
        # Non-admins do not get the page at all: /admin falls back to Home for them.
        pages.append(
            st.Page("views/admin.py", title=t("nav.admin"), icon=":material/shield_person:", url_path="admin")
        )

    page = st.navigation(pages)
    who_slot = ui.sidebar(code, who)
    try:
        page.run()
    finally:  # a page that signs out ends with st.rerun(): its sidebar must say so already
        ui.show_who(who_slot, who)
    ui.flush_cookie()
