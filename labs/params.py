"""Every lab parameter, written down once: type, choices or range, default, label.

A lab's ``Params`` dataclass (and `Run`, the parameters every lab shares:
world size, backend, timeouts, failure injection) declares each field with
`option`, which stores a `Spec` in the field's metadata. Everything else is
read from there:

- ``python -m labs`` builds its argparse options with `add_arguments`;
- the Labs page builds its form widgets from the fields that have a `Page`;
- `check` validates: a dataclass calls it on itself for what it can know
  alone (choices, fixed ranges), and ``labs.launch.run_lab`` and
  ``academy.labruns.validate`` call it again with the `Limits` in force, the
  page's narrower ranges included for the web.

Limits (largest world size, message size, the timeouts) are `Limits`,
read from the environment variables ``LAB_MAX_WORLD_SIZE``,
``LAB_MAX_BYTES``, ``LAB_TIMEOUT_S`` and ``LAB_HANG_TIMEOUT_S``. The web
app's ``Settings`` reads the same variables and takes its defaults from
`Limits`, and the worker (``academy.labjob``) hands Settings' values to the CLI it starts in
those variables. Why environment variables and not only arguments passed
in: the CLI also runs on its own and under torchrun, where nothing passes
anything in, and the labs must not import the app; an environment variable
is how Settings is configured anyway, so one ``LAB_MAX_WORLD_SIZE=4``
changes the page, the queue's validation and ``python -m labs`` together.

This module imports neither torch nor the app.
"""

from __future__ import annotations

import argparse
import os
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

# A bound given as a function of the limits in force (None: not known here)
# and of the parameters object being checked (None: no object yet, e.g. a form).
Bound = float | Callable[["Limits | None", Any], float | None] | None


@dataclass(frozen=True)
class Limits:
    """What one run may ask for; the defaults are the web app's too (see module doc)."""

    max_world_size: int = 8
    max_bytes: int = 256 << 20  # one message (per rank)
    timeout_s: int = 120  # the whole run, wall clock
    # A rank that reports no progress and uses no CPU this long counts as hung; a
    # 64 MiB step on a busy 2-core machine can take 10 s, so twice that.
    hang_timeout_s: int = 20

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of a limit: ``max_world_size`` -> ``LAB_MAX_WORLD_SIZE``."""
        return f"LAB_{name.upper()}"

    @classmethod
    def from_env(cls, environ: typing.Mapping[str, str] | None = None) -> Limits:
        environ = os.environ if environ is None else environ
        given = {f.name: int(environ[cls.variable(f.name)]) for f in fields(cls)
                 if environ.get(cls.variable(f.name), "").strip()}
        return cls(**given)

    def environ(self) -> dict[str, str]:
        """These limits as the environment variables `from_env` reads."""
        return {self.variable(f.name): str(getattr(self, f.name)) for f in fields(self)}


def limit(name: str) -> Callable[[Limits | None, Any], int | None]:
    """A bound that is the limit ``name`` (unknown until the limits are)."""
    return lambda limits, _obj: getattr(limits, name) if limits is not None else None


@dataclass(frozen=True)
class Page:
    """How the Labs page offers a parameter. It may narrow the range and pick
    another default (a run started from a browser should stay short); what it
    offers is also all that ``academy.labruns`` accepts from the page."""

    widget: str = ""  # "slider", "number", "select" or "sizes"; "" = from the type
    low: float | None = None
    high: float | None = None
    default: Any = None
    advanced: bool = False  # in the "inject a failure" expander
    help: str = ""  # i18n key of the widget's help text


@dataclass(frozen=True)
class Spec:
    """One parameter, as `option` records it in its dataclass field."""

    key: str  # i18n key of its label on the page
    help: str  # the CLI's help text (the CLI speaks English)
    choices: tuple = ()
    low: Bound = None
    high: Bound = None
    flags: tuple[str, ...] = ()  # CLI spellings; default: --name-with-dashes
    labels: str = ""  # i18n prefix that names each choice on the page ("labs.algo_")
    unit: str = ""  # "bytes": the page offers powers of four
    default_from: Callable[[Limits], Any] | None = None  # for a default that is a limit
    page: Page | None = None  # None: the page does not offer it


def option(default: Any = None, *, key: str = "", help: str, **spec: Any) -> Any:  # noqa: A002
    """A dataclass field with its `Spec`; a list default is copied per instance."""
    meta = {"spec": Spec(key=key, help=help, **spec)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


class ParamError(ValueError):
    """A parameter value that is not allowed. ``name`` and ``rule`` ("choice",
    "range" or a lab's own rule such as "avg_int") and ``values`` let the web
    app say it in the learner's language; ``str()`` says it in English."""

    def __init__(self, name: str, rule: str, message: str, **values: Any):
        super().__init__(message)
        self.name, self.rule, self.values = name, rule, values


def specs(cls) -> dict[str, tuple[Field, Spec]]:
    """The fields of ``cls`` that carry a Spec, in order. Read afresh on every call."""
    return {f.name: (f, f.metadata["spec"]) for f in fields(cls) if "spec" in f.metadata}


def default(f: Field, spec: Spec, limits: Limits | None = None, *, page: bool = False) -> Any:
    if page and spec.page is not None and spec.page.default is not None:
        return spec.page.default
    if spec.default_from is not None and limits is not None:
        return spec.default_from(limits)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None if f.default is MISSING else f.default


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
    for name, (_f, spec) in specs(type(obj)).items():
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


def _num(x: float) -> str:
    """8, not 8.0; 0.5 as 0.5 (for the English messages and --help)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def flag(name: str, spec: Spec) -> str:
    """The command line's spelling of a parameter: ``world_size`` -> ``--world-size``."""
    return spec.flags[0] if spec.flags else "--" + name.replace("_", "-")


def offered(cls) -> dict[str, tuple[Field, Spec]]:
    """The fields of ``cls`` that the Labs page offers (those with a `Page`)."""
    return {name: fs for name, fs in specs(cls).items() if fs[1].page is not None}


def element_type(cls, name: str) -> tuple[type, bool]:
    """(type of one value, whether the field is a list) from the annotation."""
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list:
        return args[0], True
    if args:  # int | None
        return args[0], False
    return hint, False


def add_arguments(parser: argparse.ArgumentParser, cls, limits: Limits | None = None,
                  defaults: dict[str, Any] | None = None) -> None:
    """One option per field of ``cls``: flag, type, choices, default and help from its Spec;
    ``defaults`` replaces a field's default (a lab's own world size)."""
    for name, (f, spec) in specs(cls).items():
        kind, many = element_type(cls, name)
        value = (defaults or {}).get(name, default(f, spec, limits))
        low, high = bounds(spec, limits)
        extra = []
        if low is not None or high is not None:
            extra.append(f"{'' if low is None else _num(low)}..{'' if high is None else _num(high)}")
        if value is not None and value != []:
            extra.append(f"default {' '.join(map(str, value)) if many else value}")
        text = spec.help + (f" ({', '.join(extra)})" if extra else "")
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
        for name, (f, spec) in specs(Run).items():
            if values[name] is None and spec.default_from is not None:
                values[name] = default(f, spec, limits)
        return Run(**values)
