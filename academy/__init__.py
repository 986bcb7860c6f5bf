"""The platform core, below every other package: tables (``models``), settings,
the database and its migrations (``db``, ``migrations/``), accounts, secrets
(``keystore``), course content (``content``, the one reader of ``content/``),
lessons, UI strings (``i18n``), exercise drafts and passes (``exercises``), and
lab runs as jobs, one package (``labruns``: the pages' side, the queue, the
worker's job and its warm processes), and the worker (``python -m academy.worker``).

Imports without Streamlit and never imports ``app``, ``quizzes``,
``certificates`` or ``benchmarks`` (tests/test_layers.py checks it).
Administrators: ``python -m academy.admin create-admin EMAIL``.
"""
