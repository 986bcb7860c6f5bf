"""The certificate's text engine: which font draws each character, in which
order, with which glyphs, and what text extraction gives back.

A name may be written in many scripts, so every string goes through the same
small layout pipeline before it is drawn:

1. ``_clusters``: the text is cut into clusters that must stay together (a
   letter with its combining marks, a Devanagari conjunct, an emoji with
   its skin tone or zero-width-joiner sequence);
2. each cluster gets the first font of the style's fallback chain that has
   all of its characters (DejaVu for Latin, Greek, Cyrillic, Armenian and
   Georgian, Droid Sans Fallback for Chinese and Japanese, NanumSquare for
   Hangul, a Noto font per other script, Noto Emoji for emoji);
3. the Unicode bidirectional algorithm (python-bidi) gives each character
   its embedding level, and runs of one font and one level are put in
   visual order, so ``مريم Anna`` reads right to left with Anna on its left;
4. each run is shaped by HarfBuzz through reportlab (``shapeStr``): Arabic
   letters join, Thai and Devanagari marks sit where they belong, kerning
   and ligatures apply.

The shipped TrueType fonts are embedded as subsets with ToUnicode maps;
glyphs that stand for several characters (a ligature, a conjunct, an emoji
sequence) are mapped back to those characters, so text extraction gives the
name back as typed, in logical order. ``load_font`` puts this module's
ToUnicode writer in reportlab's place the first time a font is loaded
(``install_to_unicode``); importing the module changes nothing in reportlab.

``certificates.pdf`` draws the page with ``line_runs`` and ``shape``;
``certificates.names`` refuses a name with ``unprintable_chars``.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from bidi import algorithm as uba
from reportlab.lib.abag import ABag
from reportlab.pdfbase import pdfmetrics, ttfonts
from reportlab.pdfbase.ttfonts import ShapedStr, TTFont, shapeFragWord

FONTS = Path(__file__).resolve().parent / "fonts"

# Font files, and per style the fallback chain: (font, fake bold?). The
# script fonts are bold cuts: outside the name (which is bold) only English,
# Chinese and Dutch text is printed, which DejaVu and Droid cover.
_FILES = {
    "Serif": "DejaVuSerif.ttf",
    "Serif-Bold": "DejaVuSerif-Bold.ttf",
    "Sans": "DejaVuSans.ttf",
    "Sans-Bold": "DejaVuSans-Bold.ttf",
    "CJK": "DroidSansFallbackFull.ttf",
    "Hangul": "NanumSquareB.ttf",
    "Arabic": "NotoNaskhArabic-Bold.ttf",
    "Hebrew": "NotoSerifHebrew-Bold.ttf",
    "Devanagari": "NotoSerifDevanagari-Bold.ttf",
    "Bengali": "NotoSerifBengali-Bold.ttf",
    "Tamil": "NotoSerifTamil-Bold.ttf",
    "Thai": "NotoSerifThai-Bold.ttf",
    "Ethiopic": "NotoSerifEthiopic-Bold.ttf",
    "Emoji": "NotoEmoji-Bold.ttf",
}
# Script fonts come before DejaVu Sans, which has Arabic and Hebrew too but
# without the Noto fonts' shaping and style.
_SCRIPTS = (
    "CJK",
    "Hangul",
    "Arabic",
    "Hebrew",
    "Devanagari",
    "Bengali",
    "Tamil",
    "Thai",
    "Ethiopic",
    "Emoji",
)
_CHAINS = {
    "serif": (("Serif", False), *((k, False) for k in _SCRIPTS), ("Sans", False)),
    "serif-bold": (
        ("Serif-Bold", False),
        *((k, k == "CJK") for k in _SCRIPTS),
        ("Sans-Bold", False),
    ),
    "sans": (("Sans", False), *((k, False) for k in _SCRIPTS)),
    "sans-bold": (("Sans-Bold", False), *((k, k == "CJK") for k in _SCRIPTS)),
}
# HarfBuzz features: kerning and the standard ligatures, as browsers use by default.
# Not reportlab's default "dlig": DejaVu's discretionary ligatures join "st" into one
# old-style glyph ("broadcast" on the exercises line came out with it).
_FEATURES = {"kern": True, "liga": True}
# Shaping uses these and prints nothing for them: never a reason to refuse a
# name, never a reason to pick a font.
_JOINERS = frozenset("\u200c\u200d")
_ZWJ = "\u200d"


def _ignorable(ch: str) -> bool:
    o = ord(ch)
    return ch in _JOINERS or 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF


def _name(key: str) -> str:
    return f"DPCert-{key}"


@cache
def load_font(key: str) -> TTFont:
    """The font ``key`` of ``_FILES``, registered with reportlab (once)."""
    install_to_unicode()
    font = TTFont(_name(key), str(FONTS / _FILES[key]))
    pdfmetrics.registerFont(font)
    return font


def _has(key: str, ch: str) -> bool:
    return ord(ch) in load_font(key).face.charToGlyph


def printable(ch: str) -> bool:
    """Whether ``ch`` prints: a shipped font has its glyph, or the shaper
    consumes it (joiners, variation selectors). Control, private-use,
    surrogate and unassigned code points never print, whatever a font holds."""
    if unicodedata.category(ch) in ("Cc", "Co", "Cs", "Cn"):
        return False
    return _ignorable(ch) or any(_has(key, ch) for key in _FILES)


def unprintable_chars(text: str) -> list[str]:
    """Characters of ``text`` that no shipped font can draw, in order of appearance."""
    return list(dict.fromkeys(c for c in text if not c.isspace() and not printable(c)))


def _extends(prev: str, ch: str) -> bool:
    """Whether ``ch`` belongs to the cluster that ``prev`` ends."""
    o = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or _ignorable(ch)
        or prev == _ZWJ
        or unicodedata.combining(prev) == 9  # after a virama: a conjunct
        or 0x1F3FB <= o <= 0x1F3FF  # emoji skin tone
        or 0xE0020 <= o <= 0xE007F  # emoji tag sequence (subdivision flags)
    )


def _clusters(text: str) -> list[str]:
    """Letters with their marks, conjuncts, emoji sequences: cut nowhere inside."""
    out: list[str] = []
    for ch in text:
        if out and (
            _extends(out[-1][-1], ch)
            # a pair of regional indicators is one flag
            or (
                len(out[-1]) == 1
                and 0x1F1E6 <= ord(ch) <= 0x1F1FF
                and 0x1F1E6 <= ord(out[-1]) <= 0x1F1FF
            )
        ):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def _is_emoji(cluster: str) -> bool:
    return ord(cluster[0]) >= 0x1F000 or "\ufe0f" in cluster


def _is_hangul(cluster: str) -> bool:
    o = ord(cluster[0])
    return (
        0xAC00 <= o <= 0xD7A3
        or 0x1100 <= o <= 0x11FF
        or 0x3130 <= o <= 0x318F
        or 0xA960 <= o <= 0xA97F
    )


def _pick(cluster: str, style: str) -> tuple[str, bool]:
    """The first font of the chain with every character of the cluster. An
    emoji prefers the emoji font (DejaVu has a few emoji, in another style)
    and Hangul the Hangul font (Droid Sans Fallback has three syllables)."""
    chain = _CHAINS[style]
    if _is_emoji(cluster):
        chain = (("Emoji", False), *chain)
    elif _is_hangul(cluster):
        chain = (("Hangul", False), *chain)
    needed = [c for c in cluster if not _ignorable(c)] or [cluster[0]]
    for key, bold in chain:
        if all(_has(key, c) for c in needed):
            return key, bold
    return next(((k, b) for k, b in chain if _has(k, needed[0])), chain[0])


def _levels(text: str) -> list[int]:
    """The bidi embedding level of each character (UAX #9 through rule I2;
    the paragraph direction is that of the first strong character).
    Characters the algorithm sets aside (joiners) take their neighbour's."""
    storage = uba.get_empty_storage()
    storage["base_level"] = uba.get_base_level(text)
    storage["base_dir"] = ("L", "R")[storage["base_level"]]
    uba.get_embedding_levels(text, storage)
    for i, ch in enumerate(storage["chars"]):
        ch["index"] = i
    uba.explicit_embed_and_overrides(storage)
    uba.resolve_weak_types(storage, False)
    uba.resolve_neutral_types(storage, False)
    uba.resolve_implicit_levels(storage, False)
    levels = [-1] * len(text)
    for ch in storage["chars"]:
        levels[ch["index"]] = ch["level"]
    for i, level in enumerate(levels):
        if level < 0:
            levels[i] = levels[i - 1] if i else storage["base_level"]
    return levels


@dataclass(frozen=True)
class Run:
    """Text in one font at one bidi level; ``text`` is in logical order."""

    text: str
    font: str  # registered font name
    fake_bold: bool
    level: int = 0

    @property
    def rtl(self) -> bool:
        return self.level % 2 == 1


@lru_cache(maxsize=4096)
def line_runs(text: str, style: str) -> tuple[tuple[Run, ...], tuple[int, ...]]:
    """The runs of one line, in visual order (left to right), and for each
    its place in logical order."""
    clusters = _clusters(text)
    levels = _levels(text)
    runs: list[Run] = []
    pos = 0
    for cl in clusters:
        level = levels[pos]
        pos += len(cl)
        if cl.isspace() and runs and runs[-1].font != _name("Emoji"):
            # a space joins the run before it (an emoji font's space is too wide)
            pick = (runs[-1].font, runs[-1].fake_bold)
        else:
            key, bold = _pick(cl, style)
            pick = (load_font(key).fontName, bold)
        if runs and (runs[-1].font, runs[-1].fake_bold, runs[-1].level) == (*pick, level):
            runs[-1] = Run(runs[-1].text + cl, *pick, level)
        else:
            runs.append(Run(cl, *pick, level))
    # Spaces that end a right-to-left run before a run of another level
    # become a run of their own: pypdf, reversing the run, would otherwise
    # put them in front of it.
    for i in range(len(runs) - 2, -1, -1):
        run = runs[i]
        trimmed = run.text.rstrip()
        if run.rtl and trimmed and trimmed != run.text and runs[i + 1].level != run.level:
            space = run.text[len(trimmed) :]
            runs[i : i + 1] = [
                Run(trimmed, run.font, run.fake_bold, run.level),
                Run(space, run.font, run.fake_bold, run.level),
            ]
    # UAX #9 L2: from the highest level down to the lowest odd one, reverse
    # every stretch of runs at that level or above.
    order = list(range(len(runs)))
    if runs:
        top = max(r.level for r in runs)
        lowest_odd = min((r.level for r in runs if r.level % 2), default=top + 1)
        for level in range(top, lowest_odd - 1, -1):
            i = 0
            while i < len(order):
                if runs[order[i]].level >= level:
                    j = i
                    while j < len(order) and runs[order[j]].level >= level:
                        j += 1
                    order[i:j] = order[i:j][::-1]
                    i = j
                else:
                    i += 1
    return tuple(runs[k] for k in order), tuple(order)


def visual_runs(text: str, style: str) -> list[Run]:
    """The runs of one line of ``text``, in visual order, left to right."""
    return list(line_runs(text, style)[0])


# Text extraction reads each glyph's characters from the font's ToUnicode
# map, and reportlab maps a glyph to the first character its cmap lists (a
# CJK ideograph can come back as a Kangxi radical, a joined Arabic letter as
# a presentation form) or, for a ligature or conjunct, to a private-use code.
# So every shaped glyph is given a code of its own, above U+EFFFF, that maps
# to the characters it stands for; reportlab's ToUnicode writer is replaced
# by one that knows these codes (and writes characters beyond U+FFFF as
# UTF-16, which reportlab's does not).
_ACTUAL: dict[int, str] = {}
_SHAPING = threading.Lock()
_CODES: dict[tuple[str, int, str], int] = {}
_FIRST_CODE, _LAST_CODE = 0xF0000, 0x10FFFF


def _code_for(font: TTFont, gid: int, chars: str) -> int | None:
    """The code that draws glyph ``gid`` of ``font`` and extracts as ``chars``.
    Its width is the glyph's own advance in thousandths of an em (reportlab
    records a shaped glyph's width in font units, which extractors then
    misplace)."""
    key = (font.fontName, gid, chars)
    code = _CODES.get(key)
    if code is None:
        code = _FIRST_CODE + len(_CODES)
        if code > _LAST_CODE:
            return None  # out of codes: the glyph keeps reportlab's mapping
        _CODES[key] = code
        _ACTUAL[code] = chars
        font.face.charToGlyph[code] = gid
        font.face.charWidths[code] = font.pdfScale(font.hbFont().get_glyph_h_advance(gid))
    return code


def _to_unicode_cmap(fontname: str, subset: list[int]) -> str:
    """reportlab's ``makeToUnicodeCMap``, knowing the codes above."""

    def utf16(code: int) -> str:
        chars = _ACTUAL.get(code, chr(code) if code <= 0x10FFFF else "\ufffd")
        return chars.encode("utf-16-be").hex().upper()

    return "\n".join(
        [
            "/CIDInit /ProcSet findresource begin",
            "12 dict begin",
            "begincmap",
            f"/CIDSystemInfo << /Registry ({fontname}) /Ordering ({fontname}) /Supplement 0 >> def",
            f"/CMapName /{fontname} def",
            "/CMapType 2 def",
            "1 begincodespacerange",
            f"<00> <{len(subset) - 1:02X}>",
            "endcodespacerange",
            f"{len(subset)} beginbfchar",
            *(f"<{i:02X}> <{utf16(code)}>" for i, code in enumerate(subset)),
            "endbfchar",
            "endcmap",
            "CMapName currentdict /CMap defineresource pop",
            "end",
            "end",
        ]
    )


def install_to_unicode() -> None:
    """Put ``_to_unicode_cmap`` in place of reportlab's ``makeToUnicodeCMap``, which
    reportlab calls by its module name when it embeds a font subset. Once is enough;
    ``load_font`` calls it before any of our fonts can be embedded."""
    ttfonts.makeToUnicodeCMap = _to_unicode_cmap


def _glyph_texts(data: list, text: str) -> list[str]:
    """The characters each glyph stands for, in logical order, for glyphs in
    logical order. A cluster's characters are shared out over its spacing
    glyphs in turn (a Devanagari pre-base vowel and the conjunct after it
    each get some); marks (no advance, or raised) get none and their
    characters go to the glyph before them, so that extractors, which cut
    words at gaps and lines at raised glyphs, see one unbroken word."""
    starts = sorted({d.cluster for d in data})
    ends = dict(zip(starts, [*starts[1:], len(text)], strict=True))
    out = [""] * len(data)
    last = None  # the last spacing glyph
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j].cluster == data[i].cluster:
            j += 1
        chars = text[data[i].cluster : ends[data[i].cluster]]
        carriers = [k for k in range(i, j) if data[k].x_advance and not data[k].y_offset]
        if not carriers:
            if last is None:
                carriers = [i]
            else:
                out[last] += chars
                i = j
                continue
        share, extra = divmod(len(chars), len(carriers))
        pos = 0
        for n, k in enumerate(carriers):
            take = share + (n < extra)
            out[k] = chars[pos : pos + take]
            pos += take
        last = carriers[-1]
        i = j
    return out


@dataclass(frozen=True)
class Shaped:
    """A run ready to draw: ``inline`` is drawn in one go; ``marks`` are
    zero-width glyphs that stand for no characters of their own (a Tamil
    pulli, a Bengali u-sign), drawn afterwards at their own spots as
    (x, y, glyph), in thousandths of the size from the run's origin. Drawn
    inline they would move the pen back and forth, which extractors take
    for a gap between words."""

    inline: str
    width: float  # at size 1
    marks: tuple[tuple[float, float, str], ...] = ()


def _with_actual_text(shaped: ShapedStr, text: str, font: TTFont, rtl: bool) -> Shaped:
    """``shaped`` with each glyph recoded to stand for its characters (see
    ``_glyph_texts``), and its marks set apart. A right-to-left run's glyphs
    are in visual order, and extractors reverse them back character by
    character, so there each glyph's characters are stored reversed."""
    data = list(shaped.__shapeData__)
    order = list(range(len(data)))[::-1] if rtl else list(range(len(data)))
    glyph_text = dict(zip(order, _glyph_texts([data[k] for k in order], text), strict=True))
    inline, inline_data, marks = [], [], []
    pen = 0.0
    for k, (ch, d) in enumerate(zip(shaped, data, strict=True)):
        chars = glyph_text[k][::-1] if rtl else glyph_text[k]
        gid = font.face.charToGlyph[ord(ch)]
        if len(chars) == 1 and font.face.charToGlyph.get(ord(chars)) == gid:
            glyph = chars
        else:
            code = _code_for(font, gid, chars)
            glyph = ch if code is None else chr(code)
        d = d._replace(width=font.face.charWidths[ord(glyph)])  # what the PDF's /Widths will say
        if not chars and not d.x_advance:
            marks.append((pen + d.x_offset, d.y_offset, glyph))
        else:
            inline.append(glyph)
            inline_data.append(d)
        pen += d.x_advance
    return Shaped(ShapedStr("".join(inline), shapeData=inline_data), pen / 1000, tuple(marks))


@lru_cache(maxsize=4096)
def shape(run: Run) -> Shaped:
    """The run shaped by HarfBuzz. HarfBuzz puts a right-to-left script in
    visual order itself; a right-to-left run without one (digits,
    punctuation between Arabic words) is reversed by cluster here."""
    text = run.text
    if run.rtl and not any(unicodedata.bidirectional(c) in ("R", "AL") for c in text):
        text = "".join(reversed(_clusters(text)))
    # Shaping adds glyph codes to the shared font objects (reportlab's and
    # ours); the app renders certificates on several threads at once.
    with _SHAPING:
        shaped = shapeFragWord([pdfmetrics.stringWidth(text, run.font, 1000),
                                (ABag(fontName=run.font, fontSize=1000), text)], features=_FEATURES)[1][1]
        if not getattr(shaped, "__shapeData__", None):  # HarfBuzz changed nothing
            return Shaped(shaped, pdfmetrics.stringWidth(text, run.font, 1))
        return _with_actual_text(shaped, text, pdfmetrics.getFont(run.font), run.rtl)


@lru_cache(maxsize=4096)
def _width1(text: str, style: str) -> float:
    return sum(shape(r).width for r in line_runs(text, style)[0])


def text_width(text: str, style: str, size: float) -> float:
    return _width1(text, style) * size


def break_units(text: str) -> list[str]:
    """Break opportunities: words (with their trailing space) and single CJK
    characters; a text with none (a long Thai word) breaks between clusters."""
    units: list[str] = []
    for piece in re.findall(r"\S+\s*|\s+", text):
        word = ""
        for cl in _clusters(piece):
            if unicodedata.east_asian_width(cl[0]) in "WF" and not _is_emoji(cl):
                if word:
                    units.append(word)
                    word = ""
                units.append(cl)
            else:
                word += cl
        if word:
            units.append(word)
    return units if len(units) > 1 else _clusters(text)

