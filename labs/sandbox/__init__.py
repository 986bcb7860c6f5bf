"""The boundary around code we did not write: a learner's exercise, graded (issue #16).

- ``run``: starts the program and reads what it did (`run_python`, the wall
  clock, the output cap, `Outcome`);
- ``layout``: the command lines, what the program sees;
- ``limits``: `Limits` (``EXERCISE_*``), the rlimits, per-run uids and cgroups;
- ``seccomp``: the filters, the sandbox's and the harness's ranks'. Standard
  library only: it is bound by path beside the harness, with
  ``labs/processes.py`` (`layout.OWN_MODULES`).

Nothing here knows about exercises, and nothing here imports torch.
"""
