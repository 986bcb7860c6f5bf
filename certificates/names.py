"""Which names a certificate may print, and how a page names the characters it refuses.

``clean_name`` gives the name as it will be printed and signed (NFC, trimmed,
single spaces) or raises ``InvalidName``: empty or too long; characters that
are invisible where they stand (controls, format characters such as
zero-width spaces and bidi controls, default-ignorable ones), so two names
that look alike would be signed differently (F-16); a pile of combining marks
on one letter; characters no shipped font can print (``certificates.text``).
``char_names`` and ``refusal_message`` name the refused characters for a page:
invisible ones by their Unicode names, unprintable ones by code point and kind.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from academy.accounts import joins_here as _joins_here
from certificates.errors import InvalidInput
from certificates.i18n import texts
from certificates.text import unprintable_chars

NAME_MAX = 200  # characters, after normalisation
# Characters a printed name must not hold: controls, unassigned and private
# code points, and format characters (Cf): zero-width spaces and joiners,
# word joiners and bidi controls, which are invisible or reorder the text,
# so two names that look alike would be signed differently (F-16).
HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn")
MARKS_MAX = 4  # combining marks in a row: Vietnamese and Indic names need 2 or 3

# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt), which
# the standard library cannot look up, plus the blank Braille pattern: characters
# that show as nothing, so a name with them looks like one without. Most are Cf
# (caught by category anyway); these are the ones that are not.
_IGNORABLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0x1D173, 0x1D17A), (0xE0100, 0xE01EF),
)


class InvalidName(InvalidInput):
    """Empty, too long, hidden characters (``kind`` "hidden": controls,
    invisible, default-ignorable and bidi format characters), a pile of marks on
    one letter (``kind`` "stacked") or characters no font can print (``kind``
    "unprintable"), listed in ``chars``; the page names them."""

    typed = ("chars",)

    def __init__(self, key: str, chars: list[str] | None = None, kind: str = "other", **values: Any):
        self.chars = chars or []
        self.kind = kind
        if kind in ("hidden", "stacked"):
            # Invisible characters and marks cannot be shown alone, so they are named:
            # "U+200B ZERO WIDTH SPACE".
            values["chars"] = ", ".join(char_names(self.chars[:10]))
        elif kind == "unprintable":
            values["chars"] = ", ".join(f"U+{ord(c):04X}" for c in self.chars[:10])
        super().__init__(key, **values)

    def text(self, lang: str, **shown: Any) -> str:
        """Unprintable characters are named with their kind in ``lang``
        ("U+E000 (private-use character)"): most show as nothing or a box."""
        if self.kind == "unprintable":
            return refusal_message(self.chars[:10], lang)
        return super().text(lang, **shown)


def clean_name(name: str) -> str:
    """The name as it will be printed and signed: NFC, trimmed, single spaces."""
    if not isinstance(name, str):
        raise InvalidName("certificate.empty_name")
    name = " ".join(unicodedata.normalize("NFC", name).split())
    if not name:
        raise InvalidName("certificate.empty_name")
    if len(name) > NAME_MAX:
        raise InvalidName("certificate.err_name_long", max=NAME_MAX)
    hidden = list(dict.fromkeys(c for i, c in enumerate(name) if _hidden_here(name, i)))
    if hidden:
        raise InvalidName("certificate.err_hidden", hidden, "hidden")
    stacked = _stacked_marks(name)
    if stacked:
        raise InvalidName("certificate.err_stacked", stacked, "stacked", count=MARKS_MAX)
    missing = unprintable_chars(name)
    if missing:
        raise InvalidName("certificate.err_unprintable", missing, "unprintable")
    return name


def _ignorable(c: str) -> bool:
    return any(lo <= ord(c) <= hi for lo, hi in _IGNORABLE)


def _hidden_here(name: str, i: int) -> bool:
    """Whether ``name[i]`` is invisible where it stands: controls, format and
    unassigned characters and default-ignorable ones, except joiners between
    letters of scripts that use them and a variation selector after an emoji."""
    c = name[i]
    if unicodedata.category(c) in HIDDEN_CATEGORIES:
        return not _joins_here(name, i)
    if not _ignorable(c):
        return False
    # U+FE0E/FE0F choose text or emoji style after a pictograph, a digit or # and * (keycaps).
    return not (c in "\ufe0e\ufe0f" and i > 0
                and (unicodedata.category(name[i - 1]) in ("So", "Sk") or name[i - 1] in "0123456789#*"))


def _stacked_marks(name: str) -> list[str]:
    """The marks of a run of more than MARKS_MAX combining marks (a "zalgo" name that
    draws over the lines around it), or none."""
    run: list[str] = []
    for c in name:
        if unicodedata.category(c) in ("Mn", "Me"):
            run.append(c)
            if len(run) > MARKS_MAX:
                return list(dict.fromkeys(run))
        else:
            run = []
    return []


def char_names(chars: list[str]) -> list[str]:
    """``U+200B ZERO WIDTH SPACE`` for each character: how a page names
    characters that cannot be seen."""
    return [f"U+{ord(c):04X} {unicodedata.name(c, '')}".strip() for c in chars]


def _kind(ch: str) -> str:
    cat = unicodedata.category(ch)
    return {"Cc": "control", "Co": "private_use", "Cs": "unassigned", "Cn": "unassigned"}.get(
        cat, "no_glyph"
    )


def describe_unprintable(chars: list[str], lang: str) -> str:
    """The refused characters named in the learner's language, e.g.
    ``U+E000 (private-use character)``: code points, because most of them
    show as nothing or as a box."""
    kinds = texts(lang)["unprintable"]
    return kinds["separator"].join(
        kinds["item"].format(code=f"U+{ord(c):04X}", kind=kinds[_kind(c)]) for c in chars
    )


def refusal_message(chars: list[str], lang: str) -> str:
    """Why a name cannot be printed, in the learner's language, naming each
    refused character (``InvalidName.chars``)."""
    return texts(lang)["unprintable"]["message"].format(chars=describe_unprintable(chars, lang))
