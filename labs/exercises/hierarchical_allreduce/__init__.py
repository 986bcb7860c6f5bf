"""hierarchical-allreduce: ``exercise.py`` (cases, checks, the report's simulated clock), ``starter.py``, ``reference.py``.

``reference.py`` is shown to a learner after a pass, so it holds only what a
learner reads. It is trusted: it never enters the sandbox; the tests grade it.
Not among the exercises a certificate requires: every check rests on the
router's counts and the harness's values, as the required ones do, but it
belongs to the topology section, which builds on everything before it and is
not part of the certificate's core; making it required would change what a
certificate already issued means.
"""
