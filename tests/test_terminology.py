"""Terminology: running text in each language uses its glossary's terms.

The glossary of each language (``content/lessons/<lang>/glossary.yaml``)
is the term list: an entry may carry ``avoid: [..]`` (strings that must not
appear in running text of that language, e.g. nl "throughput" for
"doorvoer") and ``allow: [..]`` (longer phrases that contain an avoided
string and are fine, e.g. zh "近似秩" beside an avoided "秩"). This check
reads those lists and scans everything a learner reads in that language:
the lessons (without code blocks, inline code, math and directive
comments, where code identifiers and symbols legitimately stay English),
the quiz bank's strings for that language, and the UI catalogs. Latin text
is matched case-insensitively. Chinese also has a typography rule:
parentheses around text with Chinese or Japanese characters are full-width
"（…）", and full-width parentheses do not nest.

Each finding names the file, the key (YAML path or Markdown line) and the
term, so a failure says exactly what to change.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from academy import content
from academy.settings import get_settings

ROOT = Path(__file__).resolve().parent.parent
LESSONS = content.path(content.LESSONS)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "terminology"
LANGS = sorted(p.name for p in LESSONS.iterdir() if (p / "glossary.yaml").is_file())

# Chinese characters and Japanese kana (CJK radicals through the unified ideographs, plus compatibility ideographs).
CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff]")
# Names that are never terms, such as the issuer's "Data Parallelism Academy" (nl avoids "data parallelism").
PROPER_NAMES = (get_settings().issuer,)
# What a reader does not see as running text: each is blanked out before matching.
_NOT_PROSE = [
    re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S),  # fenced code blocks
    re.compile(r"<!--.*?-->", re.S),  # directives such as <!-- widget: NAME -->
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"(`+)[^`]+?\1"),  # inline code
    re.compile(r"\$[^$\n]+\$"),  # inline math
]


@dataclass(frozen=True)
class Rule:
    """One glossary entry's avoid list, with the phrases that excuse an avoided string."""

    term: str
    avoid: tuple[str, ...]
    allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    file: str
    key: str
    term: str  # the avoided string, or a description of the typography slip
    use: str  # what to write instead

    def __str__(self) -> str:
        return f"{self.file} [{self.key}]: {self.term!r} (use {self.use!r})"


def rules_from(glossary: Path) -> list[Rule]:
    entries = content.load(glossary) or []
    return [Rule(str(e["term"]), tuple(map(str, e.get("avoid") or ())), tuple(map(str, e.get("allow") or ())))
            for e in entries if e.get("avoid")]


def prose(text: str) -> str:
    """``text`` without code, math, directives and proper names; line numbers are kept."""
    for pattern in _NOT_PROSE:
        text = pattern.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)
    for name in PROPER_NAMES:
        text = _blank(text, name)
    return text


def _blank(text: str, phrase: str) -> str:
    return re.sub(re.escape(phrase), lambda m: " " * len(m.group(0)), text, flags=re.I)


def avoided(text: str, rules: list[Rule]) -> Iterator[tuple[str, str]]:
    """(avoided string, glossary term) for each avoided string in ``text``."""
    for rule in rules:
        seen = text
        for phrase in rule.allow:
            seen = _blank(seen, phrase)
        for bad in rule.avoid:
            if re.search(re.escape(bad), seen, flags=re.I):
                yield bad, rule.term


def zh_parenthesis_slips(text: str) -> Iterator[str]:
    for match in re.finditer(r"\(([^()\n]*)\)", text):
        if CJK.search(match.group(1)):
            yield f"half-width {match.group(0)}"
    depth = 0
    for ch in text:
        if ch == "（":
            depth += 1
            if depth == 2:
                yield "nested full-width （…（…）…）"
        elif ch == "）":
            depth = max(0, depth - 1)


def check(file: str, key: str, text: str, lang: str, rules: list[Rule]) -> list[Finding]:
    text = prose(text)
    found = [Finding(file, key, bad, term) for bad, term in avoided(text, rules)]
    if lang == "zh":
        found += [Finding(file, key, slip, "（…）, not nested") for slip in zh_parenthesis_slips(text)]
    return found


def _yaml_strings(node, path: str = "", lang: str | None = None) -> Iterator[tuple[str, str]]:
    """(dotted path, text) of a YAML tree's strings; with ``lang``, only those under a key ``lang``."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            if lang is not None and key == lang and isinstance(value, str):
                yield sub, value
            else:
                yield from _yaml_strings(value, sub, lang)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            label = value.get("id", i) if isinstance(value, dict) else i
            yield from _yaml_strings(value, f"{path}[{label}]", lang)
    elif isinstance(node, str) and lang is None:
        yield path, node


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def markdown_texts(path: Path) -> Iterator[tuple[str, str, str]]:
    for number, line in enumerate(prose(path.read_text(encoding="utf-8")).splitlines(), 1):
        if line.strip():
            yield _rel(path), f"line {number}", line


def yaml_texts(path: Path, lang: str | None = None) -> Iterator[tuple[str, str, str]]:
    for key, text in _yaml_strings(content.load(path), lang=lang):
        yield _rel(path), key, text


def catalog_texts(lang: str) -> Iterator[tuple[str, str, str]]:
    """The UI strings of ``lang``: app, certificate, credential and quiz-engine catalogs."""
    for kind in (content.UI, content.CERTIFICATES, content.CREDENTIALS, content.QUIZ):
        path = content.path(kind, f"{lang}.yaml")
        if path.is_file():
            for file, key, text in yaml_texts(path):
                if key != "meta.name" and not key.startswith("languages."):  # names of languages, in their own script
                    yield file, key, text


def lesson_texts(lang: str) -> Iterator[tuple[str, str, str]]:
    for path in sorted((LESSONS / lang).glob("*.md")):
        yield from markdown_texts(path)
    for file, key, text in yaml_texts(LESSONS / lang / "toc.yaml"):
        if key.rsplit(".", 1)[-1] in ("course_title", "title", "summary"):  # not ids such as ring-allreduce
            yield file, key, text


def bank_texts(lang: str) -> Iterator[tuple[str, str, str]]:
    """The quiz bank's strings for ``lang``, and those of the templates over lab runs."""
    for kind in (content.QUIZ_BANK, content.QUIZ_TEMPLATES):
        for path in sorted(content.path(kind).glob("*.yaml")):
            yield from yaml_texts(path, lang=lang)


def findings(texts: Iterator[tuple[str, str, str]], lang: str, rules: list[Rule]) -> list[Finding]:
    return [f for file, key, text in texts for f in check(file, key, text, lang, rules)]


def report(found: list[Finding]) -> str:
    return f"{len(found)} terminology finding(s):\n" + "\n".join(map(str, found))


def fixture_rules(lang: str) -> list[Rule]:
    return rules_from(FIXTURES / f"glossary-{lang}.yaml")


# --- The checker itself, on fixtures that must fail ---------------------------------------------------------


def test_checker_finds_avoided_terms_only_in_running_text():
    rules = fixture_rules("nl") + fixture_rules("zh")
    found = findings(markdown_texts(FIXTURES / "sample.md"), "zh", rules)
    assert sorted((f.key, f.term) for f in found) == [
        ("line 1", "throughput"),  # prose; not the inline code, math, directive, code block or display math below
        ("line 15", "collective"),  # matched whatever its case
        ("line 15", "秩"),  # "近似秩" on the same line is allowed, the bare 秩 is not
        ("line 16", "half-width (包含中文)"),  # but "(ring, n = 4)" on line 17 may stay half-width
        ("line 16", "nested full-width （…（…）…）"),
    ], report(found)
    assert all(f.file.endswith("sample.md") for f in found)


def test_checker_reads_yaml_keys_and_allowed_phrases():
    found = findings(yaml_texts(FIXTURES / "sample.yaml"), "zh", fixture_rules("zh"))
    assert sorted((f.key, f.term, f.use) for f in found) == [
        ("intro", "all-reduce", "全归约"),  # "全归约（all-reduce）" is allowed, the bare second one is not
        ("intro", "批次", "批量"),
        ("nested.bad", "秩", "rank"),
    ], report(found)


def test_proper_names_are_not_terms():
    text = "De Data Parallelism Academy legt data parallelism uit."
    assert [f.term for f in check("f", "k", text, "nl", fixture_rules("nl"))] == ["data parallelism"]
    assert check("f", "k", "De Data Parallelism Academy", "nl", fixture_rules("nl")) == []


def test_quiz_bank_strings_are_read_per_language():
    bank = {"questions": [{"id": "q1", "text": {"en": "throughput", "nl": "de throughput", "zh": "批次"}}]}
    assert list(_yaml_strings(bank, lang="nl")) == [("questions[q1].text.nl", "de throughput")]
    assert list(_yaml_strings(bank, lang="zh")) == [("questions[q1].text.zh", "批次")]


def test_fixture_glossaries_cover_the_reviewed_terms():
    """The review's terms are in the fixture, so the catalog test below holds them."""
    terms = {lang: {r.term for r in fixture_rules(lang)} for lang in ("en", "zh", "nl")}
    assert {"批量", "归约散射", "全归约", "rank"} <= terms["zh"]
    assert {"dataparallellisme", "doorvoer", "verbinding", "collectieve operatie", "alpha-beta-model",
            "equivalentie", "gradiëntaccumulatie"} <= terms["nl"]


# --- The UI catalogs against the reviewed terms (fixture lists) and the real glossaries -------------------


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_ui_catalogs_use_the_reviewed_terms(lang):
    found = findings(catalog_texts(lang), lang, fixture_rules(lang) + rules_from(LESSONS / lang / "glossary.yaml"))
    assert found == [], report(found)


# --- Lessons and quiz bank against the real glossaries ------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_lessons_use_the_glossary_terms(lang):
    found = findings(lesson_texts(lang), lang, rules_from(LESSONS / lang / "glossary.yaml"))
    assert found == [], report(found)


@pytest.mark.parametrize("lang", LANGS)
def test_quiz_bank_uses_the_glossary_terms(lang):
    found = findings(bank_texts(lang), lang, rules_from(LESSONS / lang / "glossary.yaml"))
    assert found == [], report(found)
