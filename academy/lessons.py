"""Lesson content and progress. Content is data: ``content/lessons/<lang>/``
holds ``toc.yaml``, ``glossary.yaml`` and one Markdown file per section (see
``COURSE_LAYOUT.md`` there). Progress is stored per learner in the database.

A ``<!-- code: PATH::FUNCTION -->`` include shows the real lab source, unless the
function solves an exercise (``SOLUTIONS``): then a learner who has not passed that
exercise sees the language's outline from ``outlines.yaml`` instead (``listing``).

The YAML files are read through pydantic models (``Toc``, ``GlossaryEntry``),
the one definition of their shape: a file that does not match raises
``ContentError`` naming the file and the field, instead of a ``KeyError`` deep
inside a page. The course languages are the folders here that have a
``toc.yaml``; nothing else lists them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, NotRequired

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
    with_config,
)
from pydantic_core import ErrorDetails, PydanticCustomError
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select
from typing_extensions import TypedDict  # pydantic needs it for TypedDicts before Python 3.12

from academy import content
from academy.content import ContentError
from academy.models import LessonProgress
from academy.settings import ROOT

# The language the course is written in: every other one falls back to it.
SOURCE_LANG = content.DEFAULT_LANG
DIRECTIVE = re.compile(r"^<!--\s*(widget|code):\s*(\S+)\s*-->\s*$")
SECTION_ID = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"  # kebab-case: also a URL parameter and a file name

NonEmpty = Annotated[str, Field(min_length=1)]


# ----------------------------------------------------------------- schema errors


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a writer reads it: ``("options", 1,
    "explain", "zh")`` -> ``option 2 explain.zh``, ``(0, "term")`` -> ``entry 1
    term`` (positions count from 1, as an editor's eye does)."""
    out, after_position = "", False
    for part in loc:
        if isinstance(part, int):
            out, after_position = f"{out.removesuffix('s') or 'entry'} {part + 1}", True
        elif part != "[key]":  # a mapping key that failed validation: loc already names it
            out += (" " if after_position else "." if out else "") + part
            after_position = False
    return out


def schema_errors(error: ValidationError) -> list[ErrorDetails]:
    """The errors of a failed validation, less the echo: pydantic also calls
    a list too short when one of its entries failed, which is not a second fault."""
    errors = error.errors()

    def echo(err: ErrorDetails) -> bool:
        loc = tuple(err["loc"])
        return err["type"] == "too_short" and any(
            len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc for other in errors
        )

    return [err for err in errors if not echo(err)]


def error_lines(where: str, errors: Sequence[ErrorDetails]) -> list[str]:
    """One ``where: field: message`` line per pydantic error, in our words
    where pydantic's would puzzle a writer. Type errors quote the value found,
    so a ``yes`` that YAML read as true shows up."""
    lines = []
    for err in errors:
        loc, kind, ctx = tuple(err["loc"]), err["type"], err.get("ctx", {})
        if kind == "extra_forbidden":
            msg = "unknown field"
        elif kind == "missing":
            msg = "required field missing"
        elif kind == "too_short":
            msg = f"has {ctx['actual_length']}, needs at least {ctx['min_length']}"
        elif kind == "too_long":
            msg = f"has {ctx['actual_length']}, at most {ctx['max_length']} allowed"
        elif kind.endswith("_type"):
            msg = f"{err['msg']}, got {err['input']!r:.60}"
        else:
            msg = err["msg"]
        field = field_path(loc)
        lines.append(f"{where}: {field}: {msg}" if field else f"{where}: {msg}")
    return lines


def _read(path: Path, adapter: TypeAdapter[Any]) -> Any:
    """Parse (``academy.content.load``) and validate one YAML file, or raise
    ContentError naming it."""
    try:
        return adapter.validate_python(content.load(path))
    except ValidationError as exc:
        raise ContentError("\n".join(error_lines(content.where(path), schema_errors(exc)))) from None


# ----------------------------------------------------------------- models


class TocSection(BaseModel):
    """One entry of ``toc.yaml``: ids, lab and quiz topic are the same in every language."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=SECTION_ID)]
    title: NonEmpty
    summary: NonEmpty
    lab: str | None = None  # a lab of academy.labruns.pages.lab_names(); none when left out or null
    quiz_topic: str  # the quiz bank topic; written out although it equals id

    @model_validator(mode="before")
    @classmethod
    def _quiz_topic_defaults_to_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "quiz_topic" not in data and "id" in data:
            return {**data, "quiz_topic": data["id"]}
        return data


class Toc(BaseModel):
    """A language's ``toc.yaml``: the course title and its sections in course order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    course_title: NonEmpty
    sections: Annotated[tuple[TocSection, ...], Field(min_length=1)]

    @model_validator(mode="after")
    def _ids_unique(self) -> Toc:
        ids = [s.id for s in self.sections]
        doubled = sorted({i for i in ids if ids.count(i) > 1})
        if doubled:
            raise PydanticCustomError("duplicate_id", f"section id(s) {', '.join(doubled)} appear twice")
        return self


@with_config(ConfigDict(extra="forbid"))
class GlossaryEntry(TypedDict):
    """One ``glossary.yaml`` entry. A TypedDict, not a BaseModel: the lessons
    page reads entries as mappings. ``avoid``/``allow`` are the terminology
    check's lists (COURSE_LAYOUT.md), never shown to learners."""

    term: NonEmpty
    en: NonEmpty  # the English term beside the local one
    definition: NonEmpty
    avoid: NotRequired[list[NonEmpty]]
    allow: NotRequired[list[NonEmpty]]


_TOC = TypeAdapter(Toc)
_GLOSSARY = TypeAdapter(list[GlossaryEntry])
_OUTLINES = TypeAdapter(dict[str, NonEmpty])

# Lab functions a lesson includes that solve an exercise, or would with a renamed
# argument: the exercise each solves. A learner sees one only after passing that
# exercise (guests never have); before, the outline for it (``outlines.yaml``).
SOLUTIONS: dict[str, str] = {
    "labs/ring/allreduce.py::ring_allreduce": "ring-allreduce",
    "labs/ring/allreduce.py::ring_allreduce_pipelined": "ring-allreduce",
    "labs/ddp/rank.py::naive_sync_gradients": "average-gradients",
    "labs/sharding/zero.py::Zero2": "sharded-optimizer",
}


# ----------------------------------------------------------------- content


def languages() -> tuple[str, ...]:
    """The course languages: every folder of ``content/lessons`` with a ``toc.yaml``,
    the source language first (``academy.content`` discovers them)."""
    return content.languages()


def toc(lang: str) -> Toc:
    """`lang`'s table of contents, the source language's where it has none."""
    code = lang if lang in languages() else SOURCE_LANG
    return _toc(content.path(content.LESSONS, code, "toc.yaml"))


@cache
def _toc(path: Path) -> Toc:  # keyed by path: a test may point CONTENT_DIR elsewhere
    return _read(path, _TOC)


def course_title(lang: str) -> str:
    return toc(lang).course_title


def sections(lang: str) -> list[TocSection]:
    return list(toc(lang).sections)


def section_ids() -> list[str]:
    """Section ids in course order (the same in every language)."""
    return [s.id for s in toc(SOURCE_LANG).sections]


def glossary(lang: str) -> list[GlossaryEntry]:
    """`lang`'s glossary; none for a language without one."""
    return _glossary(content.path(content.LESSONS, lang, "glossary.yaml")) if lang in languages() else []


@cache
def _glossary(path: Path) -> list[GlossaryEntry]:
    return _read(path, _GLOSSARY) if path.is_file() else []


@dataclass(frozen=True)
class Block:
    """A piece of a section body: Markdown text, a widget name or a code include."""

    kind: str  # markdown | widget | code
    value: str


def body(lang: str, section_id: str) -> list[Block]:
    """The section split into Markdown runs and directive blocks."""
    path = content.path(content.LESSONS, lang, f"{section_id}.md")
    if not path.is_file():
        path = content.path(content.LESSONS, SOURCE_LANG, f"{section_id}.md")
    return _blocks(path)


# A formula on a line of its own between $$ and $$: Streamlit's Markdown (remark-math) reads
# it as inline math, at text size with small fractions; with each $$ on a line of its own it
# is display math (journey review m4). Lessons write it either way; `_blocks` makes it display.
ONE_LINE_FORMULA = re.compile(r"^\s*\$\$(?P<tex>[^$]+)\$\$\s*$")


def _display_math(line: str) -> list[str]:
    """``$$T = ...$$`` alone on its line as display math: ``$$``, the formula, ``$$``."""
    match = ONE_LINE_FORMULA.match(line)
    return ["$$", match.group("tex").strip(), "$$"] if match else [line]


@cache
def _blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    text: list[str] = []
    fenced = False  # inside a ``` block, where $$ is code, not a formula
    for line in content.text(path).splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = DIRECTIVE.match(line.strip())
        if match:
            if "".join(text).strip():
                blocks.append(Block("markdown", "\n".join(text)))
            text = []
            blocks.append(Block(match.group(1), match.group(2)))
        else:
            text.extend([line] if fenced else _display_math(line))
    if "".join(text).strip():
        blocks.append(Block("markdown", "\n".join(text)))
    return blocks


def function_source(ref: str) -> str:
    """The source of ``path::function`` from the real lab files, so lessons never drift."""
    rel, _, name = ref.partition("::")
    path = (ROOT / rel).resolve()
    if ROOT not in path.parents or path.suffix != ".py":
        raise ValueError(f"not a project source file: {rel}")
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return ast.get_source_segment(source, node, padded=True) or ""
    raise LookupError(f"{name} not found in {rel}")


@dataclass(frozen=True)
class Listing:
    """What a lesson shows for a code include: the source, or the outline that stands in for it."""

    code: str
    withheld_for: str | None = None  # the exercise to pass first, when ``code`` is the outline


def listing(ref: str, lang: str, passed: Collection[str]) -> Listing:
    """The code a lesson shows for ``<!-- code: ref -->`` to a learner who passed the
    exercises ``passed`` (none for a guest): the function's real source, or, when it
    solves an exercise not among them (``SOLUTIONS``), the outline in ``lang``. The
    source of a withheld function is not even read."""
    exercise = SOLUTIONS.get(ref)
    if exercise is None or exercise in passed:
        return Listing(function_source(ref))
    return Listing(outline(ref, lang), withheld_for=exercise)


def outline(ref: str, lang: str) -> str:
    """The outline that stands in for ``ref`` in ``lang`` (English where that language has
    none); LookupError when no language has one."""
    for code in (lang, SOURCE_LANG):
        if code in languages():
            found = _outlines(content.path(content.LESSONS, code, "outlines.yaml")).get(ref)
            if found is not None:
                return found
    raise LookupError(f"no outline for {ref}")


@cache
def _outlines(path: Path) -> dict[str, str]:
    return _read(path, _OUTLINES) if path.is_file() else {}


def mark_done(*, session: Session, learner_id: int, section_id: str) -> None:
    """Record a finished section (idempotent, also from two tabs)."""
    exists = session.exec(
        select(LessonProgress).where(
            LessonProgress.learner_id == learner_id, LessonProgress.section_id == section_id
        )
    ).first()
    if exists:
        return
    session.add(LessonProgress(learner_id=learner_id, section_id=section_id))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()


def mark_undone(*, session: Session, learner_id: int, section_id: str) -> None:
    row = session.exec(
        select(LessonProgress).where(
            LessonProgress.learner_id == learner_id, LessonProgress.section_id == section_id
        )
    ).first()
    if row:
        session.delete(row)
        session.commit()


def completed(*, session: Session, learner_id: int) -> set[str]:
    rows = session.exec(select(LessonProgress.section_id).where(LessonProgress.learner_id == learner_id))
    return set(rows)
