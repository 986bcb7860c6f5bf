"""average-gradients: ``exercise.py`` (cases, checks), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted (never enters the sandbox; the tests grade it)
and is labs/ddp/rank.py's ``naive_sync_gradients`` written against the exercise's
signature (the world size comes from ``dist``).
"""
