"""Hands-on labs for the Data Parallelism course: real processes, real collectives.

One folder per lab, each named in ``labs.context.LABS``; its ``lab`` module
(parameters, summary, text report) imports no torch, its rank code does:

- ``labs.ring``: a hand-written ring all-reduce (and the naive one) checked
  against ``torch.distributed.all_reduce``, with a per-step trace; the rings
  and the rank code are ``labs.ring.allreduce``.
- ``labs.bench``: an nccl-tests-style sweep of message sizes, algbw/busbw and
  an alpha-beta fit; its rank code is ``labs.bench.rank``.
- ``labs.ddp``: DistributedDataParallel on a small MLP, measured; its rank
  code, the lessons' two functions included, is ``labs.ddp.rank``.
- ``labs.sharding``: the memory each rank holds under DDP, ZeRO-1, ZeRO-2
  and ZeRO-3 (FSDP2), measured beside the lessons' formula; its rank code,
  ZeRO-2 written by hand included, is ``labs.sharding.zero``.
- ``labs.compression``: DDP under fp16/bf16, PowerSGD and top-k communication
  hooks, the bytes each rank hands over counted beside their formulas and the
  loss over several seeds; its rank code is ``labs.compression.rank``, its
  hooks and byte counter ``labs.compression.hooks``.
- ``labs.topology``: two "nodes" in one box (network namespaces joined by a
  shaped veth), the flat ring against the hierarchical all-reduce with the
  link's own byte counters, FSDP against HSDP; its rank code is
  ``labs.topology.rank``, its namespaces ``labs.topology.netns``.

The run machinery, shared by every lab, sits here at the root:

- ``labs.context``: what a lab needs on its rank (RankContext, failure
  injection, backend choice, a shared clock), also under torchrun, and the
  registry of labs (`LABS`, `load_lab`).
- ``labs.launch``: runs any of them on N local processes, watches them and
  returns a structured result or error; ``labs.verdict`` holds its rules for
  "crashed", "hung" and "timed out", as pure functions; ``labs.processes``
  starts, reaps and kills rank processes (the exercise harness uses it too).
- ``labs.params``: each parameter defined once (type, choices or range,
  default, label) as a field of a pydantic dataclass; the CLI's options,
  the web form and the validation are derived from it.
- ``labs.reports``: a finished run's stored result typed for the pages.
- ``labs.timeline``: per-rank spans, overlap and the step model (no torch).
- ``labs.model``: busbw, the alpha-beta ring model and the sharded memory
  ledger, shared with the lessons' calculators.
- ``labs.simclock``: the simulated clock, a message log replayed on a model
  of real hardware (the topology lab's and an exercise report's projections).
- ``labs.warm``: a process that imported PyTorch ahead, forked per run.
- ``labs.settings``: the limits of a run (``LAB_*``), the class the web
  app's settings nest; ``labs.content``: the one loader of ``content/``.

Beside them: ``labs.exercises`` (the coding exercises and their grader) and
``labs.sandbox`` (the boundary around code we did not write).

Run a lab with ``python -m labs ring|bench|ddp|sharding|compression|topology --world-size N``
or under ``torchrun -m labs.<name>``; see each lab's docstring. Importing this package,
or a lab's ``lab`` module, is cheap: only a lab's rank code (and ``labs.launch``)
imports torch.
"""
