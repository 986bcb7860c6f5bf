"""Coding exercises: the learner writes the distributed code, real gloo ranks grade it.

    python -m labs.exercises list
    python -m labs.exercises show ring-allreduce --lang zh
    python -m labs.exercises grade ring-allreduce my_ring.py --json

Each exercise is a trusted folder ``labs/exercises/<id with _>/``:
``exercise.py`` (hidden cases and the checks), ``starter.py`` (what the
editor starts with) and ``reference.py`` (shown after a pass, never sent to
the sandbox; written for the learner who reads it, so notes for us go in the
folder's ``__init__.py``). Its statement, hints and feedback are data, per language, in
``content/exercises/<lang>/``. The learner's file runs only in the sandbox
(``labs.sandbox``), under the harness in ``runtime/`` (see
``labs.exercises.grader`` for the whole path from file to report).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

EXERCISES = ("ring-allreduce", "broadcast", "average-gradients", "bucketed-overlap", "shard-indices",
             "sharded-optimizer", "compression-hook", "save-and-resume", "hierarchical-allreduce")
REQUIRED_FOR_CERTIFICATE = ("ring-allreduce", "broadcast", "average-gradients")
HERE = Path(__file__).resolve().parent


def folder(exercise_id: str) -> Path:
    """The exercise's trusted folder; ValueError for an id we do not have."""
    if exercise_id not in EXERCISES:
        raise ValueError(f"unknown exercise {exercise_id!r}; known: {', '.join(EXERCISES)}")
    return HERE / exercise_id.replace("-", "_")


def load(exercise_id: str) -> ModuleType:
    """The exercise's definition (``exercise.py``): ID, FUNCTION, DRIVER, ALLOWED, cases(), check()."""
    folder(exercise_id)
    return importlib.import_module(f"labs.exercises.{exercise_id.replace('-', '_')}.exercise")


def starter(exercise_id: str) -> str:
    """The code the learner starts from."""
    return (folder(exercise_id) / "starter.py").read_text(encoding="utf-8")


def reference(exercise_id: str) -> str:
    """Our solution. Trusted callers only: the page shows it after a pass, the tests grade it."""
    return (folder(exercise_id) / "reference.py").read_text(encoding="utf-8")


def available() -> list[str]:
    """The exercises whose definition loads here (all of them once every part is in place)."""
    found = []
    for exercise_id in EXERCISES:
        try:
            load(exercise_id)
        except ImportError:
            continue
        found.append(exercise_id)
    return found
