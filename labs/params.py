"""Every lab parameter, written down once: a field of a pydantic dataclass.

A lab's ``Params`` (and `Run`, the parameters every lab shares: world size,
backend, timeouts, failure injection) is made with this module's
`dataclass` (pydantic's), and each field is declared with `option`: a
pydantic ``Field`` whose description is the command line's help and which
carries a `Spec` (choices or range, label, how the Labs page offers it).
Everything else is read from the model:

- pydantic converts values to the fields' types (``"2"`` -> ``2``) and
  refuses names the model does not have;
- ``python -m labs`` builds its argparse options with `add_arguments`;
- the Labs page builds its form widgets from the fields that have a `Page`;
- a model checks itself on construction for what it can know alone
  (choices, fixed ranges), and `check` checks it again against the
  `labs.settings.Limits` in force: `validate` (build, then check) is one
  call per model in ``academy.labruns.pages.validate`` (in the page's narrower ranges)
  and in ``python -m labs``; ``labs.launch.run_lab`` checks the models it
  builds.

This module imports neither torch nor the app.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from collections.abc import Callable
from typing import Any

import pydantic.dataclasses
from pydantic import ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from labs.settings import Limits

# A bound given as a function of the limits in force (None: not known here)
# and of the parameters object being checked (None: no object yet, e.g. a form).
Bound = float | Callable[["Limits | None", Any], float | None] | None


def limit(name: str) -> Callable[[Limits | None, Any], int | None]:
    """A bound that is the limit ``name`` (unknown until the limits are)."""
    return lambda limits, _obj: getattr(limits, name) if limits is not None else None


@dataclasses.dataclass(frozen=True)
class Page:
    """How the Labs page offers a parameter. It may narrow the range and pick
    another default (a run started from a browser should stay short); what it
    offers is also all that ``academy.labruns`` accepts from the page."""

    widget: str = ""  # "slider", "number", "select", "multiselect" (a list), "sizes" or "prediction"
    # (optional float); "" = from the type
    low: float | None = None
    high: float | None = None
    default: Any = None
    advanced: bool = False  # in the "inject a failure" expander
    help: str = ""  # i18n key of the widget's help text


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a field says beyond its type and default, as `option` records it."""

    key: str  # i18n key of its label on the page
    choices: tuple = ()
    low: Bound = None
    high: Bound = None
    flags: tuple[str, ...] = ()  # CLI spellings; default: --name-with-dashes
    labels: str = ""  # i18n prefix that names each choice on the page ("labs.algo_")
    unit: str = ""  # "bytes": the page offers powers of four
    default_from: Callable[[Limits], Any] | None = None  # for a default that is a limit
    page: Page | None = None  # None: the page does not offer it


def option(default: Any = None, *, key: str = "", help: str, **spec: Any) -> Any:  # noqa: A002
    """A pydantic field: ``help`` is its description (the CLI's help text, in
    English), the rest its `Spec`; a list default is copied per instance."""
    extra = {"spec": Spec(key=key, **spec)}
    if isinstance(default, list):
        return Field(default_factory=lambda: list(default), description=help, json_schema_extra=extra)
    return Field(default, description=help, json_schema_extra=extra)


class ParamError(ValueError):
    """A parameter value that is not allowed. ``name`` and ``rule`` ("choice",
    "range" or a lab's own rule such as "avg_int") and ``values`` let the web
    app say it in the learner's language; ``str()`` says it in English."""

    def __init__(self, name: str, rule: str, message: str, **values: Any):
        super().__init__(message)
        self.name, self.rule, self.values = name, rule, values


def dataclass(cls: type) -> type:
    """``cls`` as a pydantic dataclass of lab parameters.

    Unknown names are refused, and a refusal raises the error itself (the
    `ParamError` of a field, a lab's own ValueError, a TypeError for an
    unknown name), not pydantic's wrapper around it, so that every caller
    reads one English sentence and the web app the field and rule.
    """
    model = pydantic.dataclasses.dataclass(cls, config=ConfigDict(extra="forbid"))
    init = model.__init__

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as err:
            raise _plain(model, err) from None

    model.__init__ = __init__
    return model


def _plain(model: type, err: ValidationError) -> Exception:
    first = err.errors()[0]
    if "error" in first.get("ctx", {}):  # raised by __post_init__: ours, as it was
        return first["ctx"]["error"]
    name = ".".join(map(str, first["loc"]))
    if first["type"] == "unexpected_keyword_argument":
        return TypeError(f"{model.__name__}.__init__() got an unexpected keyword argument {name!r}")
    return ValueError(f"{name}: {first['msg']}")


def specs(cls) -> dict[str, tuple[FieldInfo, Spec]]:
    """The fields of ``cls`` that carry a Spec, in order. Read afresh on every call."""
    return {name: (info, info.json_schema_extra["spec"]) for name, info in cls.__pydantic_fields__.items()
            if isinstance(info.json_schema_extra, dict) and "spec" in info.json_schema_extra}


def default(info: FieldInfo, spec: Spec, limits: Limits | None = None, *, page: bool = False) -> Any:
    if page and spec.page is not None and spec.page.default is not None:
        return spec.page.default
    if spec.default_from is not None and limits is not None:
        return spec.default_from(limits)
    return info.get_default(call_default_factory=True)


def bounds(spec: Spec, limits: Limits | None, obj: Any = None, *,
           page: bool = False) -> tuple[float | None, float | None]:
    """(low, high) of a number, either None when unbounded or not known yet.
    With ``page``, the page's narrower range, never wider than the spec's."""
    low, high = (b(limits, obj) if callable(b) else b for b in (spec.low, spec.high))
    if page and spec.page is not None:
        if spec.page.low is not None:
            low = spec.page.low if low is None else max(low, spec.page.low)
        if spec.page.high is not None:
            high = spec.page.high if high is None else min(high, spec.page.high)
    return low, high


def check(obj: Any, limits: Limits | None = None, *, page: bool = False) -> None:
    """Raise `ParamError` for the first field of ``obj`` outside its choices or range.

    Without ``limits`` only what does not depend on them is checked.
    """
    for name, (_info, spec) in specs(type(obj)).items():
        value = getattr(obj, name)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise ParamError(name, "empty", f"{name} must not be empty")
        for v in values:
            if spec.choices and v not in spec.choices:
                raise ParamError(name, "choice", f"{name} must be one of {', '.join(map(str, spec.choices))}, "
                                 f"not {v!r}", value=v, choices=spec.choices)
            if spec.choices:
                continue
            low, high = bounds(spec, limits, obj, page=page)
            if (low is not None and v < low) or (high is not None and v > high):
                words = name.replace("_", " ")
                span = (f"{_num(low)} to {_num(high)}" if low is not None and high is not None
                        else f">= {_num(low)}" if low is not None else f"<= {_num(high)}")
                raise ParamError(name, "range", f"{words} must be {span}, not {v}",
                                 value=v, low=low, high=high)


def validate(cls, values: dict[str, Any], limits: Limits | None = None, *, page: bool = False) -> Any:
    """``cls`` made from ``values`` and checked against ``limits`` (with ``page``,
    in the page's ranges). Raises `ParamError`, or ValueError/TypeError for a
    value of the wrong type, an unknown name or a lab's own rule across fields."""
    obj = cls(**values)
    check(obj, limits, page=page)
    return obj


def _num(x: float) -> str:
    """8, not 8.0; 0.5 as 0.5 (for the English messages and --help)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def flag(name: str, spec: Spec) -> str:
    """The command line's spelling of a parameter: ``world_size`` -> ``--world-size``."""
    return spec.flags[0] if spec.flags else "--" + name.replace("_", "-")


def offered(cls) -> dict[str, tuple[FieldInfo, Spec]]:
    """The fields of ``cls`` that the Labs page offers (those with a `Page`)."""
    return {name: fs for name, fs in specs(cls).items() if fs[1].page is not None}


def element_type(info: FieldInfo) -> tuple[type, bool]:
    """(type of one value, whether the field is a list) from the field's annotation."""
    hint = info.annotation
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list:
        return args[0], True
    if args:  # int | None
        return args[0], False
    return hint, False


def add_arguments(parser: argparse.ArgumentParser, cls, limits: Limits | None = None,
                  defaults: dict[str, Any] | None = None) -> None:
    """One option per field of ``cls``: flag, type, choices, default and help from
    the field; ``defaults`` replaces a field's default (a lab's own world size)."""
    for name, (info, spec) in specs(cls).items():
        kind, many = element_type(info)
        value = (defaults or {}).get(name, default(info, spec, limits))
        low, high = bounds(spec, limits)
        extra = []
        if low is not None or high is not None:
            extra.append(f"{'' if low is None else _num(low)}..{'' if high is None else _num(high)}")
        if value is not None and value != []:
            extra.append(f"default {' '.join(map(str, value)) if many else value}")
        text = info.description + (f" ({', '.join(extra)})" if extra else "")
        options: dict[str, Any] = {"dest": name, "type": kind, "default": value, "help": text}
        if spec.choices:
            options["choices"] = spec.choices
        if many:
            options["nargs"] = "+"
            options["metavar"] = name.split("_")[-1].rstrip("s").upper()
        parser.add_argument(*(spec.flags or (flag(name, spec),)), **options)


# --------------------------------------------------------------------------
# What every lab run has, whichever the lab

BACKENDS = ("auto", "gloo", "nccl")
FAIL_MODES = ("crash", "hang")


def _last_rank(limits: Limits | None, run: Any) -> int | None:
    if run is not None:
        return run.world_size - 1
    return limits.max_world_size - 1 if limits is not None else None


@dataclass
class Run:
    """How a lab runs: on how many ranks, which backend, how long, and what fails."""

    world_size: int = option(2, key="labs.world_size", help="number of ranks", low=1,
                            high=limit("max_world_size"), page=Page(widget="slider"))
    backend: str = option("auto", key="labs.backend", help="process-group backend", choices=BACKENDS,
                         page=Page(help="labs.backend_help"))
    timeout: float | None = option(help="seconds for the whole run", low=0.5,
                                  default_from=lambda lim: lim.timeout_s)
    hang_timeout: float | None = option(help="seconds without progress before the run counts as hung",
                                       low=0.5, default_from=lambda lim: lim.hang_timeout_s)
    start: str = option("auto", help="how ranks are started (auto: fork when safe)",
                       choices=("auto", "fork", "spawn"))
    fail_mode: str = option("crash", key="labs.fail_mode", help="how the failing rank fails",
                           choices=FAIL_MODES, labels="labs.fail_", page=Page(advanced=True))
    fail_rank: int | None = option(key="labs.fail_rank", help="inject a failure on this rank", low=0,
                                  high=_last_rank, page=Page(widget="number", default=1, advanced=True))
    fail_at_step: int = option(0, key="labs.fail_step", help="...when it reaches this step", low=0,
                              page=Page(widget="number", high=100, default=1, advanced=True))

    def __post_init__(self) -> None:
        check(self)

    def resolved(self, limits: Limits) -> Run:
        """This run with its timeouts filled in from ``limits`` where not given."""
        values = {name: getattr(self, name) for name in specs(Run)}
        for name, (info, spec) in specs(Run).items():
            if values[name] is None and spec.default_from is not None:
                values[name] = default(info, spec, limits)
        return Run(**values)
