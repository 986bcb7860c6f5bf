"""sharded-optimizer: ``exercise.py`` (cases, checks), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted: it never enters the sandbox; the tests grade it.
Not among the exercises a certificate requires: the state check rests on a
measurement made inside the learner's process (see ``exercise.py``).
"""
