"""save-and-resume: ``exercise.py`` (cases, checks), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted (never enters the sandbox; the tests grade it).
It saves what the failure lab's checkpoint holds (``labs/failure/rank.py``),
plus the two things that lab did not need: the random state (this model has
dropout) and the sampler's position as numbers the sampler keeps.
"""
