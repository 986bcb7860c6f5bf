"""Lesson content and progress. Content is data, read through
``academy.content``: ``content/lessons/<lang>/`` holds ``toc.yaml``,
``glossary.yaml`` and one Markdown file per section (see ``COURSE_LAYOUT.md``
there). Progress is stored per learner in the database.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from academy import content
from academy.models import LessonProgress
from academy.settings import ROOT

DIRECTIVE = re.compile(r"^<!--\s*(widget|code):\s*(\S+)\s*-->\s*$")


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    summary: str
    lab: str | None
    quiz_topic: str


@dataclass(frozen=True)
class Block:
    """A piece of a section body: Markdown text, a widget name or a code include."""

    kind: str  # markdown | widget | code
    value: str


def _toc(lang: str) -> dict:
    return content.read_yaml("lessons", lang, "toc.yaml") or content.read_yaml("lessons", "en", "toc.yaml")


def course_title(lang: str) -> str:
    return _toc(lang)["course_title"]


def sections(lang: str) -> list[Section]:
    return [
        Section(
            id=s["id"], title=s["title"], summary=s.get("summary", ""),
            lab=s.get("lab"), quiz_topic=s.get("quiz_topic", s["id"]),
        )
        for s in _toc(lang)["sections"]
    ]


def section_ids() -> list[str]:
    return [s.id for s in sections("en")]


def glossary(lang: str) -> list[dict]:
    return content.read_yaml("lessons", lang, "glossary.yaml", default=[])


def body(lang: str, section_id: str) -> list[Block]:
    """The section split into Markdown runs and directive blocks."""
    path = content.path("lessons", lang, f"{section_id}.md")
    if not path.is_file():
        path = content.path("lessons", "en", f"{section_id}.md")
    return _blocks(path)


@cache
def _blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    text: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = DIRECTIVE.match(line.strip())
        if match:
            if "".join(text).strip():
                blocks.append(Block("markdown", "\n".join(text)))
            text = []
            blocks.append(Block(match.group(1), match.group(2)))
        else:
            text.append(line)
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
