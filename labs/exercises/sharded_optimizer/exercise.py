"""sharded-optimizer: ZeRO-1 on N ranks must step exactly like one process, holding a shard of the state.

Trusted (never bound into the sandbox). The driver
(``runtime/drivers/sharded_optimizer.py``) gives every rank the same
gradients (the mean DDP would leave) and steps the model with the
learner's ``ShardedOptimizer``; in the harness, which runs no learner code,
one process steps the same model with the unsharded optimizer and says how
many bytes of state it holds per parameter. ``check`` compares:

- **params**: every rank's final parameters against the single process's
  (the harness's), within float32 rounding;
- **state**: the bytes the rank's process holds beyond the model, its
  gradients and the batch, against the largest shard a fair split of the
  state allows (:func:`fair_limit`). This number is measured inside the
  learner's process (the driver walks its live tensors after the learner's
  code returned): an honest answer for an honest submission, and one a
  hostile one could lower (state kept outside torch tensors, or the
  number forged). That is why the exercise is not one a certificate
  requires;
- **wire**: what the router counted, per rank (sent and received), shown
  beside one copy of the parameters; a report, never a failure.
"""

from __future__ import annotations

from labs.exercises import checks
from labs.exercises.average_gradients.exercise import params_finding

ID = "sharded-optimizer"
FUNCTION = "ShardedOptimizer"
DRIVER = "sharded_optimizer"
FORBID_COLLECTIVES = False
ALLOWED = ("send", "recv", "isend", "irecv", "broadcast", "all_gather", "all_reduce", "barrier",
           "get_rank", "get_world_size")
CASE_SIZE = "batch"  # a case's shape is the global batch's inputs, samples x features (its label)
# Imported by the harness before it forks the ranks: torch.optim's first step imports
# torch._dynamo (seconds), which would otherwise happen in every rank inside a case's time.
PRELOAD = ("torch._dynamo",)

TOLERANCE = 1e-5  # float32; the ranks compute the same operations as the single process
# (model, optimizer): a plain MLP, one weight larger than all others together, and two
# parameters only (more ranks than parameters on 3 and 4 ranks).
SETUPS = (("mlp", "adam"), ("big", "sgd"), ("few", "adam"))
HIDDEN = {"mlp": 16, "big": 48, "few": 8}


def cases(seed: int) -> list[dict]:
    batch, features = 4, 6
    # shape and dtype: the global batch's inputs (what the report shows as the case's size)
    return [{"id": f"w{world}-{model}-{opt}", "world_size": world, "seed": seed + 10 * world + i,
             "model": model, "optimizer": opt, "lr": 0.05 if opt == "adam" else 0.2,
             "shape": [batch * world, features], "dtype": "float32", "features": features,
             "hidden": HIDDEN[model], "classes": 3, "batch": batch, "steps": 3}
            for world in (2, 3, 4) for i, (model, opt) in enumerate(SETUPS)]


def fair_limit(sizes: list[int], world: int) -> int:
    """The most state bytes one rank may hold when whole parameters are split over ``world``
    ranks: each parameter to the rank that holds least so far never exceeds
    ``total / world + (1 - 1 / world) * largest`` (Graham's bound for list scheduling), and a
    split of flattened elements stays under it too. Below the whole state as soon as
    there are two parameters, so a rank that keeps everything fails."""
    if not sizes:
        return 0
    return -(-(sum(sizes) + (world - 1) * max(sizes)) // world)


def check(case: dict, ranks: list[dict]) -> list[dict]:
    return [params_finding(case, ranks, TOLERANCE, ok="zero_matches_single", differ="zero_weights_differ"),
            _state_finding(case, ranks), _wire_finding(ranks)]


def _state_finding(case: dict, ranks: list[dict]) -> dict:
    sizes = list(ranks[0]["expected"]["state"].values())
    limit, total = fair_limit(sizes, case["world_size"]), sum(sizes)
    held = [entry["result"]["held"] for entry in ranks]
    if any(not isinstance(h, int) or isinstance(h, bool) for h in held):
        raise TypeError("held must be a number of bytes")
    rank = max(range(len(held)), key=held.__getitem__)
    values = {"rank": rank, "held": held[rank], "limit": limit, "total": total}
    if held[rank] > limit:
        return checks.failed("state", "zero_state_too_large", **values)
    return {"check": "state", "passed": True, "key": "zero_state_ok", "values": values}


def _wire_finding(ranks: list[dict]) -> dict:
    """The router's count, for the report: what each rank sent and received."""
    params = sum(len(v) for v in ranks[0]["expected"]["params"].values()) * 4  # float32
    rank = max(range(len(ranks)), key=lambda r: ranks[r]["sent"])
    return {"check": "wire", "passed": True, "key": "zero_wire",
            "values": {"sent": sum(r["sent"] for r in ranks), "received": sum(r["received"] for r in ranks),
                       "most": ranks[rank]["sent"], "rank": rank, "params": params}}
