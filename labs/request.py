"""A lab run as asked: which lab, how it runs, the lab's own parameters, on how many nodes.

    from labs.request import Request
    request = Request.checked("ring", {"world_size": 4, "size": 4096}, limits)   # the page, the worker
    request.argv()                   # ["ring", "--world-size", "4", ..., "--size", "4096", ...]
    Request.from_argv(argv, limits)  # python -m labs: the same request again
    run_lab(request.run, request.params)                                       # labs.launch

One request crosses four processes, a model in each: the web process checks
it where the Labs page submits it (``academy.labruns.pages.validate``, in the
page's ranges) and stores it (`stored`, the JSON of ``LabRun.params``); the
worker makes it again from the row and starts ``python -m labs`` with its
`argv`; that command makes it again from its arguments (`from_argv`) and hands
the two models to the launcher, whose ranks build the lab's ``Params`` from
their spec. Each process checks it once, when it builds it (`checked`: the
models' own validation with the limits in force, ``labs.params``, and the
lab's own rule across the two, its ``check(params, world_size)``); nothing
after that checks it again. The argv boundary stays: the worker runs exactly
the documented command, and torchrun runs the same one.

This module imports neither torch nor the app.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from labs import context
from labs.params import ParamError, Run, add_arguments, checked, flag, specs
from labs.settings import Limits

NODES = "nodes"  # the key of a stored request's node count (absent: one node)


@dataclasses.dataclass(frozen=True)
class Request:
    """A checked lab run (make one with `checked` or `from_argv`)."""

    lab: str
    run: Run
    params: Any  # the lab's Params
    nodes: int = 1  # workers the run spans, ``run.world_size`` ranks on each

    @classmethod
    def checked(cls, lab: str, values: Mapping[str, Any], limits: Limits | None = None, *, page: bool = False,
                max_nodes: int | None = None) -> Request:
        """The request for ``lab`` with ``values`` (`Run`'s fields and the lab's, flat, and
        ``nodes``), checked against ``limits`` (with ``page``, in the page's ranges), by
        the lab's own rule, and for a failing rank that the run has. ``max_nodes``: how
        many nodes it may span (None: not asked here).

        Raises ``labs.params.ParamError`` for a value out of its choices or range,
        ValueError for an unknown lab or a lab's own rule, TypeError for an unknown name.
        """
        module = context.load_lab(lab)
        shared, own = specs(Run), specs(module.Params)
        unknown = sorted(set(values) - set(shared) - set(own) - {NODES})
        if unknown:
            raise TypeError(f"the {lab} lab has no parameter {unknown[0]!r}")
        nodes = values.get(NODES, 1)
        if not isinstance(nodes, int) or (max_nodes is not None and not 1 <= nodes <= max_nodes):
            raise ParamError(NODES, "range", f"nodes must be 1 to {max_nodes}, not {nodes}",
                             value=nodes, low=1, high=max_nodes)
        shared_values = {k: v for k, v in values.items() if k in shared}
        if nodes > 1 and shared_values.get("fail_rank") is not None:
            # A failing rank on a later node is above one node's limit, the field's bound: its
            # bound is the whole run's (below), so it is checked here without the limits.
            fail_rank = checked(Run, {"fail_rank": shared_values.pop("fail_rank")}).fail_rank
            run = dataclasses.replace(checked(Run, shared_values, limits, page=page), fail_rank=fail_rank)
        else:
            run = checked(Run, shared_values, limits, page=page)
        params = checked(module.Params, {k: v for k, v in values.items() if k in own}, limits, page=page)
        module.check(params, run.world_size * nodes)  # the lab's rule, over the whole run's ranks
        last = run.world_size * nodes - 1  # the failing rank is one of the whole run's
        if run.fail_rank is not None and run.fail_rank > last:
            raise ParamError("fail_rank", "range", f"fail rank must be 0 to {last}, not {run.fail_rank}",
                             value=run.fail_rank, low=0, high=last)
        return cls(lab=lab, run=run, params=params, nodes=nodes)

    def stored(self) -> dict[str, Any]:
        """The request as ``LabRun.params`` keeps it: every field that has a value, flat
        (the names of `Run` and of the lab's ``Params`` never meet), and ``nodes`` when
        more than one; what `checked` reads back."""
        values = {**_values(self.run), **_values(self.params)}
        return {**values, NODES: self.nodes} if self.nodes != 1 else values

    def argv(self, *, without: tuple[str, ...] = ()) -> list[str]:
        """``python -m labs``'s arguments for this request: the lab, then each field that has a
        value as its flag (``without``: fields a launcher gives itself, as torchrun the world size)."""
        args = [self.lab]
        for model in (self.run, self.params):
            for name, (_info, spec) in specs(type(model)).items():
                value = getattr(model, name)
                if value is None or name in without:
                    continue
                args += [flag(name, spec), *(map(str, value) if isinstance(value, list) else [str(value)])]
        return args

    @classmethod
    def from_argv(cls, argv: list[str], limits: Limits) -> Request:
        """The request ``python -m labs`` was given: its arguments as `parser` reads them
        (the command line's own, such as ``--json``, left to it), `checked` against ``limits``.
        Under torchrun (``labs.context.launcher_world``) the ranks per node and the nodes are
        the launcher's, which its command line leaves out (`argv` ``without``)."""
        try:
            args, _own = parser(limits, exit_on_error=False).parse_known_args(argv)
        except argparse.ArgumentError as err:
            raise ValueError(str(err)) from None
        module = context.load_lab(args.lab)
        values = {name: getattr(args, name) for cls_ in (Run, module.Params) for name in specs(cls_)}
        launched = context.launcher_world()
        if launched is not None:
            values["world_size"], values[NODES] = launched
        return cls.checked(args.lab, values, limits)


def _values(model: Any) -> dict[str, Any]:
    return {name: getattr(model, name) for name in specs(type(model)) if getattr(model, name) is not None}


def parser(limits: Limits, *, own: Callable[[str, argparse.ArgumentParser], None] | None = None,
           exit_on_error: bool = True) -> argparse.ArgumentParser:
    """``python -m labs``'s options, one sub-command per lab, generated from `Run`'s fields
    and the lab's ``Params`` (with the lab's own default world size, ``DEFAULT_WORLD_SIZE``);
    ``own(lab, sub_parser)`` adds the command line's own options."""
    top = argparse.ArgumentParser(prog="python -m labs", description="Run a lab on N local processes.",
                                  allow_abbrev=False, exit_on_error=exit_on_error)
    sub = top.add_subparsers(dest="lab", required=True)
    for lab in context.LABS:
        module = context.load_lab(lab)
        lab_parser = sub.add_parser(lab, help=module.__doc__.split("\n")[0], allow_abbrev=False,
                                    exit_on_error=exit_on_error)
        own_world = getattr(module, "DEFAULT_WORLD_SIZE", None)  # labs.context.world_size_default
        add_arguments(lab_parser, Run, limits, defaults={"world_size": own_world} if own_world else None)
        add_arguments(lab_parser, module.Params, limits)
        if own is not None:
            own(lab, lab_parser)
    return top
