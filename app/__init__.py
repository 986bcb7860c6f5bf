"""The Streamlit app, the top layer: ``main.py`` (run by ``streamlit run``), the
pages in ``views/`` and their helpers (``ui``, ``widgets``, ``labviews``,
``charts``, ``calculators``), and ``labjobs``, which runs labs for the web
process. Pages lay out widgets and call ``academy``, ``quizzes``,
``certificates`` and ``labs``; nothing imports this package but the tests.
"""
