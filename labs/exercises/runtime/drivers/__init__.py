"""Drivers: the exercise-specific half of the harness, run inside the sandbox.

The harness (``runtime/harness.py``) knows nothing about tensors, models or
samplers; it forks the ranks, joins them in a gloo group, arms the guard,
imports the learner's file and hands each case to the driver named in the
plan (``plan["driver"]`` -> ``drivers/<name>.py``). A driver is a module with
two functions; nothing secret lives here (no expected values, no reference
solution, no case list): it only sees the cases the grader put in this run's
plan, and its expected values leave the rank before any learner code loads.

    def prepare(case: dict, rank: int, world: int) -> tuple[object, object]:
        '''Trusted phase: runs in every rank BEFORE the guard is armed and
        before the learner's file is imported, with the real
        ``torch.distributed`` (the gloo group is up). Make this rank's inputs
        from ``case["seed"]`` and compute the expected result with the real
        built-in collective (or single-process training, or a plain sampler).
        Return ``(state, expected)``: ``state`` stays in the rank for
        ``run``; ``expected`` (JSON-able, small) is sent to the grader at once
        and the rank keeps no copy of it. ``prepare`` runs for every case of
        the group first, then the learner's code is loaded, so a learner
        cannot have patched anything that ``prepare`` uses.'''

    def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
        '''Call the learner's function (``getattr(submission,
        plan["function"])``) on ``state`` and return what the grader's
        ``check`` needs, JSON-able: the values after the call, whether the
        storage is the same (in place), dtype and shape, and anything else.
        The byte counts and the calls the learner made are added by the
        harness from ``api`` (below); a driver may read them too. Exceptions
        propagate: the harness reports ``ForbiddenCall`` as a forbidden call
        and anything else as a crash with the learner's own frames.'''

    # optional
    def locate(tensor, state) -> int | None:
        '''Which chunk of the case's buffer a sent tensor is (for the ring
        animation); None when it is not one. Called by ``api`` at each send.'''

``api`` (``runtime/api.py``) is the only ``torch.distributed`` the learner's
code reaches: the guard points ``torch.distributed.<name>`` (and
``distributed_c10d.<name>``) at its counting wrappers for the calls the plan
allows, and at a ``ForbiddenCall`` raiser for every other collective.
``plan["allowed"]`` lists the allowed calls; each exercise chooses them:

- point-to-point exercises (ring all-reduce, broadcast): ``send``, ``recv``,
  ``isend``, ``irecv``, ``get_rank``, ``get_world_size``;
- training exercises (average gradients, bucketed overlap) add
  ``all_reduce`` (``async_op=True`` too, returning a Work whose ``wait`` is
  counted), and may add ``barrier``.

Every counted call appends a record to ``api.calls``:
``{"op": "send"|"recv"|"isend"|"irecv"|"all_reduce"|..., "peer": int|None,
"bytes": int, "numel": int, "dtype": str, "chunk": int|None,
"in_backward": bool, "t_start": float, "t_end": float}``
(``t_*`` are ``time.perf_counter()`` readings, shared by all processes of
the machine; ``t_end`` is when the call, or the ``wait`` of its Work,
returned; ``in_backward`` is True when the call was made while autograd's
engine was running a backward, i.e. from a gradient hook). ``api.sent`` and
``api.received`` are the byte totals; ``api.in_backward()`` says whether a
backward is running right now. Before a call blocks the api tells the
harness parent what it waits for ("recv from rank 1, 28 bytes"), which is
what a deadlock report shows.
"""
