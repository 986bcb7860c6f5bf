"""Every lab parameter, written down once: a field of a pydantic dataclass.

A lab's ``Params`` (and `Run`, the parameters every lab shares: world size,
backend, timeouts, failure injection) is made with this module's
`dataclass` (pydantic's), and each field is declared with `option`: a
pydantic ``Field`` whose description is the command line's help, whose fixed
bounds are its ``ge``/``le``, and which carries a `Spec` (choices, an upper
bound that is one of the `labs.settings.Limits`, label, how the Labs page
offers it). Everything else is read from the model:

- pydantic converts values to the fields' types (``"2"`` -> ``2``), refuses
  names the model does not have, and checks the fixed bounds;
- the same validation checks what depends on where it runs, from its
  context (`checked`: ``{"limits": Limits, "page": bool}``): the choices, a
  bound that is a limit (``LAB_MAX_WORLD_SIZE``), and with ``page`` the
  Labs page's narrower ranges. Without a context (``Params(...)`` in Python)
  only what the model knows alone is checked;
- ``python -m labs`` builds its argparse options with `add_arguments`;
- the Labs page builds its form widgets from the fields that have a `Page`,
  their range from `bounds`.

A request is checked once per process: ``labs.request.Request.checked``
builds the two models (and asks the lab's own rule across them) where the
page validates a request, where the worker turns a stored run into its
command, and where ``python -m labs`` reads that command; the launcher and
the ranks take the models they are given.

This module imports neither torch nor the app.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from collections.abc import Callable
from typing import Any

import annotated_types
import pydantic.dataclasses
from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo

from labs.settings import Limits


@dataclasses.dataclass(frozen=True)
class Limit:
    """An upper bound that is one of the `labs.settings.Limits` (plus ``offset``): known only
    where the limits in force are."""

    name: str
    offset: int = 0

    def of(self, limits: Limits) -> int:
        return getattr(limits, self.name) + self.offset


def limit(name: str, offset: int = 0) -> Limit:
    """The limit ``name`` (``max_world_size``...) as a field's upper bound, ``offset`` added."""
    return Limit(name, offset)


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
    """What a field says beyond its type, default and fixed bounds, as `option` records it."""

    key: str  # i18n key of its label on the page
    choices: tuple = ()
    limit: Limit | None = None  # an upper bound that is a limit
    flags: tuple[str, ...] = ()  # CLI spellings; default: --name-with-dashes
    labels: str = ""  # i18n prefix that names each choice on the page ("labs.algo_")
    unit: str = ""  # "bytes": the page offers powers of four
    default_from: Callable[[Limits], Any] | None = None  # for a default that is a limit
    page: Page | None = None  # None: the page does not offer it


def option(default: Any = None, *, key: str = "", help: str, low: float | None = None,  # noqa: A002
           high: float | Limit | None = None, **spec: Any) -> Any:
    """A pydantic field: ``help`` is its description (the CLI's help text, in English),
    ``low`` and a number ``high`` its fixed bounds (``ge``, ``le``: pydantic checks
    them), a `Limit` ``high`` a bound the context's limits give, the rest its `Spec`;
    a list default is copied per instance. (The bounds of a list's elements go on the
    element's type: ``list[Annotated[int, Field(ge=1)]]``.)"""
    fixed = high if not isinstance(high, Limit) else None
    extra = {"spec": Spec(key=key, limit=high if isinstance(high, Limit) else None, **spec)}
    kinds = {"default_factory": lambda: list(default)} if isinstance(default, list) else {"default": default}
    return Field(**kinds, ge=low, le=fixed, description=help, json_schema_extra=extra)


class ParamError(ValueError):
    """A parameter value that is not allowed. ``name`` and ``rule`` ("choice",
    "range", "empty" or a lab's own rule such as "avg_int") and ``values`` let the
    web app say it in the learner's language; ``str()`` says it in English."""

    def __init__(self, name: str, rule: str, message: str, **values: Any):
        super().__init__(message)
        self.name, self.rule, self.values = name, rule, values


def _within(cls, value: Any, info: ValidationInfo) -> Any:
    """The checks that pydantic's own constraints cannot make: the choices, and the
    bounds from the validation context (a limit; with ``page``, the page's range)."""
    found = specs(cls).get(info.field_name)
    if found is None or value is None:
        return value
    name, spec = info.field_name, found[1]
    if isinstance(value, list) and not value:
        raise ParamError(name, "empty", f"{name} must not be empty")
    context = info.context or {}
    limits, page = context.get("limits"), context.get("page", False)
    for v in value if isinstance(value, list) else [value]:
        if spec.choices:
            if v not in spec.choices:
                raise ParamError(name, "choice", f"{name} must be one of {', '.join(map(str, spec.choices))}, "
                                 f"not {v!r}", value=v, choices=spec.choices)
            continue
        low, high = _context_bounds(spec, limits, page=page)
        if (low is not None and v < low) or (high is not None and v > high):
            raise _range_error(cls, name, v, limits, page=page)
    return value


def dataclass(cls: type) -> type:
    """``cls`` as a pydantic dataclass of lab parameters.

    Unknown names are refused, each field is checked as the module docstring
    says, and a refusal raises the error itself (the `ParamError` of a field, a
    lab's own ValueError, a TypeError for an unknown name), not pydantic's
    wrapper around it, so that every caller reads one English sentence and the
    web app the field and rule.
    """
    cls._within = field_validator("*", mode="after")(classmethod(_within))
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


def checked(cls, values: dict[str, Any], limits: Limits | None = None, *, page: bool = False) -> Any:
    """``cls`` made from ``values`` and checked with the limits in force (with ``page``,
    in the page's ranges). Raises `ParamError`, or ValueError/TypeError for a value
    of the wrong type, an unknown name or a lab's own rule across fields."""
    try:
        return _adapter(cls).validate_python(values, context={"limits": limits, "page": page})
    except ValidationError as err:
        raise _plain(cls, err, limits, page=page) from None


@functools.cache
def _adapter(cls) -> TypeAdapter:
    return TypeAdapter(cls)


def _plain(model: type, err: ValidationError, limits: Limits | None = None, *, page: bool = False) -> Exception:
    first = err.errors()[0]
    if "error" in first.get("ctx", {}):  # raised by a validator or __post_init__: ours, as it was
        return first["ctx"]["error"]
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "unexpected_keyword_argument":
        return TypeError(f"{model.__name__}.__init__() got an unexpected keyword argument {name!r}")
    if first["type"] in ("greater_than_equal", "less_than_equal") and name in specs(model):
        return _range_error(model, name, first["input"], limits, page=page)
    return ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}")


def _range_error(cls, name: str, value: Any, limits: Limits | None, *, page: bool) -> ParamError:
    low, high = bounds(cls, name, limits, page=page)
    words = name.replace("_", " ")
    span = (f"{_num(low)} to {_num(high)}" if low is not None and high is not None
            else f">= {_num(low)}" if low is not None else f"<= {_num(high)}")
    return ParamError(name, "range", f"{words} must be {span}, not {value}", value=value, low=low, high=high)


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


def _fixed_bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    """The field's ``ge``/``le``, or, for a list, its elements'."""
    metadata = list(info.metadata)
    if typing.get_origin(info.annotation) is list:
        (element,) = typing.get_args(info.annotation)
        metadata = [m for arg in typing.get_args(element)[1:] for m in getattr(arg, "metadata", [arg])]
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    return low, high


def _context_bounds(spec: Spec, limits: Limits | None, *, page: bool) -> tuple[float | None, float | None]:
    """What the context adds to a field's fixed bounds: its limit, and with ``page`` the page's range."""
    low, high = None, spec.limit.of(limits) if spec.limit is not None and limits is not None else None
    if page and spec.page is not None:
        low = spec.page.low
        if spec.page.high is not None:
            high = spec.page.high if high is None else min(high, spec.page.high)
    return low, high


def bounds(cls, name: str, limits: Limits | None = None, *, page: bool = False) -> tuple[float | None, float | None]:
    """(low, high) of field ``name`` of ``cls``, either None when unbounded or not known yet
    (a limit, without ``limits``). With ``page``, the page's narrower range, never wider."""
    info, spec = specs(cls)[name]
    fixed_low, fixed_high = _fixed_bounds(info)
    extra_low, extra_high = _context_bounds(spec, limits, page=page)
    low = fixed_low if extra_low is None else extra_low if fixed_low is None else max(fixed_low, extra_low)
    high = fixed_high if extra_high is None else extra_high if fixed_high is None else min(fixed_high, extra_high)
    return low, high


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
        element = args[0]
        return (typing.get_args(element)[0] if typing.get_origin(element) is typing.Annotated else element), True
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
        low, high = bounds(cls, name, limits)
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


@dataclass
class Run:
    """How a lab runs: on how many ranks, which backend, how long, and what fails.

    ``timeout`` and ``hang_timeout`` left None are the limits' (``LAB_TIMEOUT_S``,
    ``LAB_HANG_TIMEOUT_S``) where the run starts; the command line fills them in.
    ``fail_rank`` is a rank of the whole run, which may span several nodes: a
    ``labs.request.Request`` checks it against them all."""

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
                                   high=limit("max_world_size", -1),
                                   page=Page(widget="number", default=1, advanced=True))
    fail_at_step: int = option(0, key="labs.fail_step", help="...when it reaches this step", low=0,
                               page=Page(widget="number", high=100, default=1, advanced=True))
