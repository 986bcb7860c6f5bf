"""Drivers: the exercise-specific half of the harness, run inside the sandbox.

The harness (``runtime/harness.py``) knows nothing about tensors, models or
samplers; it forks the ranks, routes their calls (``runtime/router.py``),
imports the learner's file in each rank and hands each case to the driver
named in the plan (``plan["driver"]`` -> ``drivers/<name>.py``). Nothing
secret lives here (no expected values, no reference solution, no case
list). A driver's functions run in two places, and which one matters:

In the harness process, which runs no learner code:

    def inputs(case: dict, world: int) -> list[dict[str, torch.Tensor]]:
        '''Every rank's inputs for ``case`` (from its seed): one dict of
        named tensors per rank. Rank r receives ``inputs(...)[r]`` and
        nothing else: never the seed or another rank's share.'''

    def expected(case: dict, world: int, inputs) -> list:
        '''What each rank should end with (JSON-able, small): computed
        here, with plain torch in one process (a sum, rank src's tensor,
        one process training on the global batch). It goes to the grader
        in the case event and never to a rank.'''

    def bounds(case: dict, world: int) -> dict:
        '''What the case can need of the router (``router.Bounds``):
        ``{"message_bytes": int, "tags": int, "empty_messages": bool}``, the
        most bytes one message or collective tensor may carry, the tags
        allowed (0 .. tags - 1) and whether a point-to-point message of
        zero bytes may be sent. A frame beyond them ends the case as a
        protocol failure.'''

    # optional
    def public(case: dict) -> dict:
        '''The fields of the case a rank may see (default: all but "seed").'''

In a rank, after its seccomp filters are on:

    # optional, before the learner's file is imported (the guard not yet armed)
    def setup(rank: int, world: int) -> None: ...

    def run(case: dict, rank: int, world: int, submission, api, state: dict) -> dict:
        '''Call the learner's function (``getattr(submission,
        plan["function"])``) on this rank's tensors (``state``: the dict
        ``inputs`` made for this rank, which ``run`` may add to) and return
        what the grader's ``check`` needs, JSON-able: the values after the
        call, whether the storage is the same (in place), dtype and shape.
        This is the learner's process: the checks treat what it returns as
        the learner's answer, never as evidence of how it was reached; the
        counts and the calls come from the router. Exceptions propagate: the
        harness reports ``ForbiddenCall`` as a forbidden call and anything
        else as a crash with the learner's own frames.'''

    # optional
    def locate(tensor, state) -> int | None:
        '''Which chunk of the case's buffer a sent tensor is (the animation's
        label, a hint the grade does not use); None when it is not one.'''

``api`` (``runtime/api.py``) is the only ``torch.distributed`` the learner's
code reaches: the guard points ``torch.distributed.<name>`` (and
``distributed_c10d.<name>``) at its methods for the calls the plan allows,
and at a ``ForbiddenCall`` raiser for every other collective. Each method
is a frame to the router. ``plan["allowed"]`` lists the allowed calls; each
exercise chooses them:

- point-to-point exercises (ring all-reduce, broadcast): ``send``, ``recv``,
  ``isend``, ``irecv``, ``get_rank``, ``get_world_size``;
- training exercises (average gradients, bucketed overlap) add
  ``all_reduce`` (``async_op=True`` too, returning a Work whose ``wait``
  blocks until the router answers), and ``barrier``; the router reduces.
- the sharded optimizer adds ``broadcast`` and ``all_gather`` (the
  router sends the source's tensor, or every rank's in rank order; ranks
  that name different sources or sizes end the case).

The router's record of each call, which the grader receives per rank as
``traffic.calls``: ``{"op": "send"|"isend"|"recv"|"irecv"|"all_reduce"|
"broadcast"|"all_gather"|"barrier"|"step", "peer": int|None (a receive's:
the source it named; a broadcast's: its source), "bytes": int, "tag",
"chunk": int|None,
"in_backward": bool, "t_start": float, "t_end": float|None, "t_wait":
float}`` (``time.perf_counter()`` readings in the harness, a clock all
processes of the machine share: ``t_start`` when the router got the call,
``t_end`` when it completed, ``t_wait`` when the rank started waiting for
it). ``chunk`` and ``in_backward`` are the rank's hints, ``t_wait`` is when
its wait arrived (a blocking call's own frame, or the wait frame of an
async one); ``traffic.sent`` and ``traffic.received`` are the
byte totals, counted by the router.
"""
