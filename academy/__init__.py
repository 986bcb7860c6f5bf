"""The platform core, below every other package: tables (``models``), settings,
the database and its migrations (``db``, ``migrations/``), accounts, secrets
(``keystore``), course content (``content``, the one reader of ``content/``),
lessons, UI strings (``i18n``), exercise drafts and passes (``exercises``), and
lab runs: the queue's web side (``labqueue``), the worker's job (``labjob``,
run by ``python -m academy.worker``) and what pages read of runs (``labruns``).

Imports without Streamlit and never imports ``app``, ``quizzes``,
``certificates`` or ``benchmarks`` (tests/test_layers.py checks it).
Administrators: ``python -m academy.admin create-admin EMAIL``.
"""
