"""Lab runs as jobs: from a page's request to a worker's result, one module per side.

- ``pages``: what the pages ask of runs: a request checked against the lab's
  schema, submit and cancel, history, machine fits;
- ``queue``: the queue's web side (huey, fair use, cancel, the reaper, what a
  stored report keeps);
- ``job``: the worker's job (claim, heartbeat, one node model, the torchrun
  line, how a run ended);
- ``pool``: the worker's warm processes (lab processes and graders started ahead).

The worker process itself is ``python -m academy.worker`` (``academy/worker.py``).
"""
