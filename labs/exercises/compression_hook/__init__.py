"""compression-hook: ``exercise.py`` (cases, checks), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted: it never enters the sandbox; the tests grade it.
It sends values and indices in two all-gathers (8k bytes per bucket), the
plainest form; packing both into one message saves a call, not bytes.
"""
