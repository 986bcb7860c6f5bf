"""The ring all-reduce lab: our ring beside the naive one, checked against ``dist.all_reduce``.

- ``lab``: parameters, summary and text report (no torch: the platform reads it);
- ``allreduce``: the three rings and the work of one rank (the ranks import it);
- ``ringtrace``: a run's trace as ring steps, for the animation (no torch).
"""
