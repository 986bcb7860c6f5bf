"""The Streamlit app, the top layer: ``main.py`` (run by ``streamlit run``), the
pages in ``views/`` and their helpers (``ui``, ``widgets``, ``labviews``,
``charts`` and its siblings ``charts_*``, ``calculators``). Pages lay out
widgets and call ``academy``, ``quizzes``, ``certificates`` and ``labs``
(a lab run: ``academy.labruns``); nothing imports this package but the tests.
"""
