"""Hands-on labs for the Data Parallelism course: real processes, real collectives.

- ``labs.ring``: a hand-written ring all-reduce (and the naive one) checked
  against ``torch.distributed.all_reduce``, with a per-step trace; the rings
  and the rank code are ``labs.allreduce``.
- ``labs.bench``: an nccl-tests-style sweep of message sizes, algbw/busbw and
  an alpha-beta fit; its rank code is ``labs.bench_rank``.
- ``labs.ddp``: DistributedDataParallel on a small MLP, measured; its rank
  code, the lessons' two functions included, is ``labs.ddp_rank``.
- ``labs.sharding``: the memory each rank holds under DDP, ZeRO-1, ZeRO-2
  and ZeRO-3 (FSDP2), measured beside the lessons' formula; its rank code,
  ZeRO-2 written by hand included, is ``labs.zero``.
- ``labs.context``: what a lab needs on its rank (RankContext, failure
  injection, backend choice, a shared clock), also under torchrun.
- ``labs.launch``: runs any of them on N local processes, watches them and
  returns a structured result or error; ``labs.verdict`` holds its rules for
  "crashed", "hung" and "timed out", as pure functions.
- ``labs.model``: busbw, the alpha-beta ring model and the sharded memory
  ledger, shared with the lessons' calculators.
- ``labs.params``: each parameter defined once (type, choices or range,
  default, label) as a field of a pydantic dataclass; the CLI's options,
  the web form and the validation are derived from it.
- ``labs.settings``: the limits of a run (``LAB_*``), the class the web
  app's settings nest.

Run them with ``python -m labs ring|bench|ddp|sharding --world-size N`` or under
``torchrun``; see each module's docstring. Importing this package, or a lab
module, is cheap: only a lab's rank code (and ``labs.launch``) imports torch.
"""
