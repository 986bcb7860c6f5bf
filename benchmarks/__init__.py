"""``make bench``: what the platform and its labs cost, each beside its yardstick.

    make bench                      # full run, for reports (3-6 minutes on 2 cores)
    make bench ARGS=--quick         # under a minute: fewer sizes, iterations and pages
    make bench ARGS=--smoke         # each part once at its smallest size, no load parts (the tests)
    python -m benchmarks --quick --json /tmp/bench.json

Prints one Markdown table and writes the same figures as JSON
(``benchmarks/results/latest.json`` unless ``--json PATH``). Every figure is
measured in the same run as the thing it is compared with, so ratios hold on
a noisy machine:

- ``collectives``: busbw of our ring, the naive ring and ``dist.all_reduce``
  on 2 and 4 gloo ranks from 1 MiB to 64 MiB, their alpha-beta fits, and raw
  TCP loopback between two processes as the wire underneath;
- ``labs``: launch overhead of a 4-rank lab, request to first progress
  event, DDP scaling efficiency on 1, 2, 4 ranks, DDP's overlap vs a naive
  gradient sync;
- ``platform``: quiz grading per attempt (engine, then with the SQLite
  store), certificate issuance per PDF and its size, verification lookups
  per second over 100,000 certificates, server-side page renders (AppTest)
  in every language, concurrent learners (``benchmarks.load``);
- ``gpu``: NCCL or a single-GPU DDP step when CUDA is there, else
  "skipped: no CUDA".

A figure that could not be measured is a string, "not available: why" or
"skipped: why", in place of its number. Everything runs against a throw-away
database and secrets folder (``common.sandbox``), never ``data/``. Timings
are never asserted by the tests: ``tests/test_benchmarks.py`` only checks
that ``--smoke`` runs and its JSON has every field (the concurrent-learner
and classroom parts it skips run in the tests against the real server).
"""
