"""One schema per lab's parameters: the form, the CLI and the validation all follow it.

Changing a parameter's choices (one Spec, in its field) or a limit (one
environment variable, which ``labs.settings.Limits`` reads for Settings and
``python -m labs`` both) must change the
Labs page's form, the command line's ``--help`` and parsing, and what
``academy.labruns`` and ``run_lab`` accept, together. (That the Labs page writes
its numbers with the learner's decimal marks is tested on the recorded runs of
tests/test_labs_combos.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from academy import i18n
from academy.labruns import pages as labruns
from academy.settings import get_settings
from labs import params
from labs.__main__ import _parser
from labs.context import load_lab
from labs.request import Request
from labs.ring import lab as ring
from labs.settings import Limits
from tests.apptest import open_page

ROOT = Path(__file__).resolve().parent.parent


def t(key: str, **values) -> str:
    return i18n.t(key, "en", **values)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labs", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def test_the_documented_flags_are_generated_from_the_fields():
    args = _parser(Limits()).parse_args(
        ["ring", "--world-size", "4", "--backend", "gloo", "--timeout", "30", "--json", "--events", "e.jsonl",
         "--out", "o.json", "--fail-rank", "2", "--fail-at-step", "3", "--fail-mode", "hang", "--size", "4096",
         "--dtype", "int64", "--algo", "naive"])
    assert (args.world_size, args.backend, args.timeout, args.json, args.events, args.out) == \
        (4, "gloo", 30.0, True, "e.jsonl", "o.json")
    assert (args.fail_rank, args.fail_at_step, args.fail_mode, args.size, args.dtype, args.algo) == \
        (2, 3, "hang", 4096, "int64", "naive")
    bench = _parser(Limits()).parse_args(["bench", "--min-size", "64", "--max-bytes", "128", "--impls", "ring"])
    assert (bench.min_bytes, bench.max_bytes, bench.impls) == (64, 128, ["ring"])
    ddp = _parser(Limits()).parse_args(["ddp", "--world-sizes", "1", "2", "--sections", "equivalence"])
    assert ddp.scaling_world_sizes == [1, 2] and ddp.sections == ["equivalence"] and ddp.steps == 12
    # Every Params field has an option, with the field's default.
    for lab in labruns.lab_names():
        parsed = vars(_parser(Limits()).parse_args([lab]))
        for name, (field, spec) in params.specs(load_lab(lab).Params).items():
            assert parsed[name] == params.default(field, spec), (lab, name)


def test_timeouts_have_one_default_the_limits():
    limits = Limits(timeout_s=77, hang_timeout_s=11)
    args = _parser(limits).parse_args(["ring"])
    assert (args.timeout, args.hang_timeout) == (77, 11)
    run = Request.from_argv(["ring"], limits).run
    assert (run.timeout, run.hang_timeout) == (77, 11)
    assert isinstance(get_settings().labs, Limits)
    assert get_settings().labs.timeout_s == Limits().timeout_s
    assert get_settings().labs.hang_timeout_s == Limits().hang_timeout_s


@pytest.fixture
def fewer_dtypes(monkeypatch):
    """Take float64 out of the ring lab's dtype choices: one Spec, changed once."""
    extra = ring.Params.__pydantic_fields__["dtype"].json_schema_extra
    monkeypatch.setitem(extra, "spec", replace(extra["spec"], choices=("float32", "bfloat16", "int64")))


@pytest.mark.usefixtures("app_db", "fewer_dtypes")
def test_one_change_to_the_choices_changes_form_cli_and_validation(capsys):
    at = open_page("labs")
    assert not at.exception, at.exception
    assert [b.options for b in at.selectbox if b.label == t("labs.dtype")][0] == ["float32", "bfloat16", "int64"]
    parser = _parser(Limits())
    with pytest.raises(SystemExit):
        parser.parse_args(["ring", "--help"])
    assert "--dtype {float32,bfloat16,int64}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["ring", "--dtype", "float64"])
    assert parser.parse_args(["ring", "--dtype", "bfloat16"]).dtype == "bfloat16"
    with pytest.raises(labruns.LabRequestError):
        labruns.validate("ring", {"world_size": 2, "dtype": "float64"})
    assert labruns.validate("ring", {"world_size": 2, "dtype": "int64"}).params.dtype == "int64"
    with pytest.raises(params.ParamError, match="dtype"):  # what the worker and the CLI make of a stored one
        Request.checked("ring", {"world_size": 2, "dtype": "float64"}, Limits())


@pytest.fixture
def three_ranks(request, monkeypatch):
    request.getfixturevalue("app_db")  # a migrated database first
    monkeypatch.setenv("LAB_MAX_WORLD_SIZE", "3")
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("LAB_MAX_WORLD_SIZE")
    get_settings.cache_clear()


@pytest.mark.usefixtures("three_ranks")
def test_one_change_to_a_limit_changes_form_cli_and_validation():
    at = open_page("labs")
    assert not at.exception, at.exception
    ranks = [s for s in at.slider if s.label == t("labs.world_size")][0]
    assert (ranks.min, ranks.max) == (1, 3)
    assert [n for n in at.number_input if n.label == t("labs.fail_rank")][0].max == 2
    # The CLI reads the same variable (the web app also hands it Settings' value).
    assert get_settings().labs.environ()["LAB_MAX_WORLD_SIZE"] == "3"
    helptext = cli("ring", "--help").stdout
    assert re.search(r"--world-size WORLD_SIZE\s+number of ranks \(1\.\.3,", helptext), helptext
    refused = cli("ring", "--world-size", "4")
    assert refused.returncode == 2 and "1 to 3" in refused.stderr
    with pytest.raises(labruns.LabRequestError) as err:
        labruns.validate("ring", {"world_size": 4})
    assert (err.value.key, err.value.values) == ("labs.err_world_size", {"max": 3})
    assert labruns.validate("ring", {"world_size": 3}).run.world_size == 3
    with pytest.raises(params.ParamError, match="1 to 3"):  # a stored run, made again by a worker of 3
        Request.checked("ring", {"world_size": 4}, get_settings().labs)


def test_the_page_refuses_what_its_form_does_not_offer():
    with pytest.raises(labruns.LabRequestError) as err:
        labruns.validate("ddp", {"world_size": 2, "steps": 500})  # the form's slider stops at 20
    assert err.value.key == "labs.err_value"
    with pytest.raises(labruns.LabRequestError) as err:
        labruns.validate("ring", {"world_size": 2, "size": 1 << 30})
    assert err.value.key == "labs.err_size" and err.value.values == {"low": 1024, "high": 64 << 20}
    kept = labruns.validate("ring", {"world_size": "2", "warmup": 99})  # warmup is not on the form
    assert kept.run.world_size == 2 and kept.params.warmup == ring.Params().warmup


def test_one_rank_reads_one_rank():
    assert i18n.t("labs.ddp.loss_ranks", "en", count=1) == "1 rank (DDP)"
    assert i18n.t("labs.ddp.loss_ranks", "nl", count=4) == "4 ranks (DDP)"
    assert i18n.t("labs.ddp.equivalence", "en", count=1, b=8, nb=8).startswith("Equivalence: 1 rank with")


def test_one_settings_class_reads_the_limits_for_the_app_and_the_cli(tmp_path, monkeypatch):
    """A ``.env`` beside the app sets the labs' limits for Settings and ``python -m labs`` alike."""
    from academy.settings import Settings

    (tmp_path / ".env").write_text("LAB_MAX_WORLD_SIZE=3\nLAB_TIMEOUT_S=77\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().labs == Limits.from_env() == Limits(max_world_size=3, timeout_s=77)
    monkeypatch.setenv("LAB_TIMEOUT_S", "66")  # the environment wins over .env, as for every setting
    assert Settings().labs.timeout_s == Limits.from_env().timeout_s == 66


def test_the_labs_side_of_the_platform_imports_no_torch():
    code = ("import sys, labs, labs.params, labs.settings, labs.context, labs.__main__; "
            "print([m for m in sys.modules if m.startswith('torch')])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
