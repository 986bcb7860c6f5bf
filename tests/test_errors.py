"""One error convention (issue #14, ``academy.errors``): every error a page can
show is a ``UserError`` whose key is in every language's UI catalog, and pages
show it only through ``ui.error_text``.

The keys are found two ways: each class's own ``key``, and every literal key at
a raise site in the source (``AccountError("account.err_email")``), read with
``ast`` so a new raise with a key that no catalog has fails here, not in front
of a learner.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import string
from pathlib import Path

import pytest

from academy import i18n
from academy.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("academy", "quizzes", "certificates", "labs", "app")
# The modules that define the errors a page can show (importing them registers the classes).
MODULES = ("academy.accounts", "quizzes.store", "quizzes.engine", "certificates.store", "certificates.ids",
           "academy.labruns.queue")


def error_classes() -> list[type[UserError]]:
    for name in MODULES:
        importlib.import_module(name)
    found, todo = [], [UserError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.split(".")[0] in PACKAGES]


CLASSES = error_classes()
NAMES = {c.__name__ for c in CLASSES}


def sources() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if "migrations" not in p.parts]


def called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def takes_key(cls: type[UserError]) -> bool:
    """Whether the first positional argument of ``cls(...)`` is a catalog key
    (``AlreadyCertified(cert_id)`` and ``InvalidId(detail)`` take other things)."""
    params = list(inspect.signature(cls.__init__).parameters)
    return len(params) > 1 and params[1] == "key"


def raise_sites() -> tuple[list[tuple[str, str, set[str] | None]], list[str]]:
    """(key, where, keyword names or None for ``**values``) of every literal key
    passed to one of our error classes, and the sites whose key is not a literal."""
    by_name = {c.__name__: c for c in CLASSES}
    sites, unreadable = [], []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or called_name(node.func) not in by_name:
                continue
            cls = by_name[called_name(node.func)]
            if not node.args or not takes_key(cls):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            first = node.args[0]
            options = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            if not all(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in options):
                unreadable.append(where)
                continue
            words = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
            if cls.__init__ is not UserError.__init__:
                words = None  # the class fills some values itself (InvalidName's chars)
            sites.extend((o.value, where, words) for o in options)
    return sites, unreadable


def fields(text) -> set[str]:
    texts = text.values() if isinstance(text, dict) else [text]
    return {name for t in texts for _, name, _, _ in string.Formatter().parse(t) if name}


def test_the_walk_finds_the_errors_pages_show():
    # Guards the test itself: an empty walk would pass everything below.
    assert {"AccountError", "QuizError", "NumberParseError", "CertificateError", "InvalidName", "InvalidId",
            "LabRequestError"} <= NAMES
    sites, _ = raise_sites()
    assert len({key for key, _, _ in sites}) >= 30


def test_every_error_key_is_in_every_language():
    sites, unreadable = raise_sites()
    assert unreadable == [], "a key the test cannot read cannot be checked; write it as a literal"
    keys = {c.key: f"{c.__module__}.{c.__name__}" for c in CLASSES}
    keys.update({key: where for key, where, _ in sites})
    english = i18n.catalog(i18n.DEFAULT_LANG)
    problems = []
    for lang in i18n.languages():
        table = i18n.catalog(lang)
        for key, where in sorted(keys.items()):
            if key not in table:
                problems.append(f"{lang}: {key} ({where}) is missing")
            elif fields(table[key]) != fields(english[key]):
                problems.append(f"{lang}: {key} has fields {fields(table[key])}, English {fields(english[key])}")
    for key, where, words in sites:
        if words is not None and key in english and not fields(english[key]) <= words:
            problems.append(f"{where}: {key} needs {fields(english[key]) - words}")
    assert problems == []


@pytest.mark.parametrize("lang", i18n.languages())
def test_errors_that_fill_their_own_values_read_whole(lang):
    from academy.labruns.pages import LabRequestError
    from certificates import ids, names
    from certificates.errors import AlreadyCertified

    errors = [AlreadyCertified("DP-TEST"), names.InvalidName("certificate.err_hidden", ["\u200b"], "hidden"),
              names.InvalidName("certificate.err_unprintable", ["\ue000"], "unprintable"),
              names.InvalidName("certificate.err_name_long", max=names.NAME_MAX),
              ids.MalformedId("not text"), ids.IdTypo("check digits"), LabRequestError("labs.err_world_size", max=4)]
    for err in errors:
        shown = err.text(lang)
        assert shown and err.key not in shown and "{" not in shown, (err, shown)
        assert "U+" in shown or not isinstance(err, names.InvalidName) or err.kind == "other"
    assert "(detail='not text')" in str(ids.MalformedId("not text"))  # English, with the detail, for the CLI


def test_pages_show_errors_only_through_error_text():
    """A handler in ``app/`` that catches one of these errors names it and hands
    it to ``ui.error_text``, and does nothing else with it: no ``str(err)``,
    no f-string, no per-page choice of text by class or attribute."""
    problems = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for handler in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(handler, ast.ExceptHandler) or handler.type is None:
                continue
            caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if not any(called_name(c) in NAMES for c in caught):
                continue
            where = f"{path.relative_to(ROOT)}:{handler.lineno}"
            if handler.name is None:
                problems.append(f"{where}: catches a UserError without showing it through ui.error_text")
                continue
            shown = allowed = 0
            for stmt in handler.body:
                for node in ast.walk(stmt):
                    if (isinstance(node, ast.Call) and called_name(node.func) == "error_text"
                            and len(node.args) == 1 and isinstance(node.args[0], ast.Name)
                            and node.args[0].id == handler.name):
                        shown += 1
                    if isinstance(node, ast.Name) and node.id == handler.name:
                        allowed += 1
            if shown == 0 or allowed != shown:
                problems.append(f"{where}: uses {handler.name} other than ui.error_text({handler.name})")
    assert problems == []
