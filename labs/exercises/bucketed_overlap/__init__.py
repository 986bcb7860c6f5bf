"""bucketed-overlap: ``exercise.py`` (cases, checks), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted: it never enters the sandbox; the tests grade it.
"""
