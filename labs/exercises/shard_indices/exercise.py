"""shard-indices: a DistributedSampler of one's own, checked on what all ranks return together.

Trusted (never bound into the sandbox). Each rank calls the learner's
``shard_indices`` on its own, without communication (the collectives are
forbidden here: a rank that asked rank 0 for the permutation would dodge
the point). The driver returns four lists per rank (epoch 0, epoch 0
again, epoch 1, epoch 0 with another seed); ``check`` combines the ranks:
equal lengths of ceil(n / N), indices in range, disjoint apart from the
padding (with those lengths the same as complete), deterministic, shuffled
and reshuffled. The statement fixes padding by repetition (as torch's DistributedSampler does) and
leaves the layout (strided or blocks) to the learner.
"""

from __future__ import annotations

import itertools

from labs.exercises import checks

ID = "shard-indices"
FUNCTION = "shard_indices"
DRIVER = "shard_indices"
FORBID_COLLECTIVES = True
ALLOWED = ("get_rank", "get_world_size")
CASE_SIZE = "dataset"  # a case's shape is the data set's length, not a tensor (the report's case label)

# Below this many samples a correct shuffle can, by chance, come out in
# order or equal to another epoch's (1 in n!), so those rules are checked
# only from here on.
SHUFFLE_CHECK_MIN = 20
CALLS = (("first", 0, "seed"), ("epoch1", 1, "seed"), ("other_seed", 0, "other_seed"))


def cases(seed: int) -> list[dict]:
    """Per world size: smaller than N, not divisible by N, divisible by N, and a larger prime."""
    sizes = {2: (1, 7, 12, 37), 3: (2, 10, 12, 37), 4: (1, 3, 10, 12, 37)}
    # shape and dtype: the data set's index range (what the report shows as the case's size)
    return [{"id": f"w{world}-n{n}", "world_size": world, "n": n, "shape": [n], "dtype": "int64",
             "seed": seed + n, "other_seed": seed + n + 1000}
            for world, lengths in sizes.items() for n in lengths]


def check(case: dict, ranks: list[dict]) -> list[dict]:
    n, world = case["n"], case["world_size"]
    outputs = [entry["result"] for entry in ranks]
    for rank, out in enumerate(outputs):
        for key in ("first", "again", "epoch1", "other_seed"):
            if isinstance(out[key], str):
                return [checks.failed("type", "shard_not_list", rank=rank, kind=out[key])]
    per_rank = -(-n // world)
    padding = per_rank * world - n
    for key, epoch, seed_key in CALLS:
        where = {"epoch": epoch, "seed": case[seed_key], "n": n, "world_size": world}
        finding = _shards_finding([out[key] for out in outputs], where, per_rank, padding)
        if finding:
            return [finding]
    for rank, out in enumerate(outputs):
        if out["first"] != out["again"]:
            return [checks.failed("deterministic", "shard_not_deterministic", rank=rank)]
    if n >= SHUFFLE_CHECK_MIN:
        # In natural order a rank's list only ever goes down where the padding
        # wraps to the start: at most once per rank. A shuffle of 20 or more
        # goes down about half the time.
        descents = sum(a > b for out in outputs for a, b in itertools.pairwise(out["first"]))
        if descents <= world:
            return [checks.failed("shuffled", "shard_not_shuffled")]
        if [out["first"] for out in outputs] == [out["epoch1"] for out in outputs]:
            return [checks.failed("shuffled", "shard_same_each_epoch")]
        if [out["first"] for out in outputs] == [out["other_seed"] for out in outputs]:
            return [checks.failed("shuffled", "shard_ignores_seed", seed=case["seed"],
                                  other_seed=case["other_seed"])]
    return [{"check": "shards", "passed": True, "key": "shard_ok",
             "values": {"n": n, "per_rank": per_rank, "padding": padding}}]


def _shards_finding(shards: list[list[int]], where: dict, per_rank: int, padding: int) -> dict | None:
    """The first broken rule among length, range, completeness and disjointness; None when all hold."""
    n = where["n"]
    for rank, shard in enumerate(shards):
        if len(shard) != per_rank:
            return checks.failed("count", "shard_count", **where, rank=rank, got=len(shard), expected=per_rank)
        bad = [i for i in shard if not 0 <= i < n]
        if bad:
            return checks.failed("range", "shard_out_of_range", **where, rank=rank, index=bad[0], last=n - 1)
    together = [i for shard in shards for i in shard]
    # With the lengths right and every index in range, the ranks hold n +
    # padding entries, so at least `padding` of them repeat; exactly that many
    # means every index is there. Each repeat beyond it leaves an index out.
    repeats = len(together) - len(set(together))
    if repeats > padding:
        missing = min(set(range(n)) - set(together))
        return checks.failed("disjoint", "shard_overlap", **where, extra=repeats - padding, padding=padding,
                             example=missing)
    return None

