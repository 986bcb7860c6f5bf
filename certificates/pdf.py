"""The certificate as a PDF: reportlab, A4 landscape, fonts embedded.

Every string is drawn through ``_runs``: it is cut into runs by the first
font of a fallback chain that has each character (DejaVu for Latin,
Vietnamese, Greek and Cyrillic, Droid Sans Fallback for CJK), so a mixed
name such as ``Anna 张`` prints right. The shipped TrueType fonts are
embedded as subsets with ToUnicode maps, so text extraction gives back the
name as typed. Names are drawn with the canvas text API, never through
Paragraph markup, so ``<b>&"'`` print literally.

The signed payload and its signature ride along in the PDF's /Keywords as
``dp-certificate:<base64url payload>.<base64url signature>`` (see
``embed_token`` and ``extract_token``) for offline checking.
"""

from __future__ import annotations

import io
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from math import cos, pi, sin
from pathlib import Path

import segno
from reportlab.lib.colors import HexColor
from reportlab.lib.pagesizes import A4, landscape
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas

from certificates.i18n import format_date, format_score, texts
from certificates.signing import b64url, b64url_decode

FONTS = Path(__file__).resolve().parent / "fonts"
TOKEN_PREFIX = "dp-certificate:"
_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)")

NAVY = HexColor("#1d3557")
GOLD = HexColor("#b08d57")
PALE_GOLD = HexColor("#f7f1e6")
INK = HexColor("#1b1b1b")
GREY = HexColor("#5c6470")
PAPER = HexColor("#fffcf5")

# Font files, and per style the fallback chain: (font, fake bold?).
_FILES = {
    "Serif": "DejaVuSerif.ttf",
    "Serif-Bold": "DejaVuSerif-Bold.ttf",
    "Sans": "DejaVuSans.ttf",
    "Sans-Bold": "DejaVuSans-Bold.ttf",
    "CJK": "DroidSansFallbackFull.ttf",
}
_CHAINS = {
    "serif": (("Serif", False), ("Sans", False), ("CJK", False)),
    "serif-bold": (("Serif-Bold", False), ("Sans-Bold", False), ("CJK", True)),
    "sans": (("Sans", False), ("CJK", False)),
    "sans-bold": (("Sans-Bold", False), ("CJK", True)),
}


@cache
def _font(key: str) -> TTFont:
    name = f"DPCert-{key}"
    font = TTFont(name, str(FONTS / _FILES[key]))
    pdfmetrics.registerFont(font)
    return font


def _has(key: str, ch: str) -> bool:
    return ord(ch) in _font(key).face.charToGlyph


def printable(ch: str) -> bool:
    """Whether ``ch`` prints correctly: some shipped font has its glyph, and it
    is not right-to-left (Arabic and Hebrew need bidi reordering and Arabic
    needs shaping, which plain reportlab does not do: better refused than
    printed backwards)."""
    if unicodedata.bidirectional(ch) in ("R", "AL"):
        return False
    return any(_has(key, ch) for key in _FILES)


def unprintable_chars(text: str) -> list[str]:
    """Characters of ``text`` that no shipped font can draw, in order of appearance."""
    return list(dict.fromkeys(c for c in text if not c.isspace() and not printable(c)))


@dataclass(frozen=True)
class Run:
    text: str
    font: str  # registered font name
    fake_bold: bool


def _runs(text: str, style: str) -> list[Run]:
    """Cut ``text`` into runs of the first font in the style's chain that has them."""
    chain = _CHAINS[style]
    runs: list[Run] = []
    for ch in text:
        if ch.isspace() and runs:
            pick = (runs[-1].font, runs[-1].fake_bold)  # spaces join the current run
        else:
            key, bold = next(((k, b) for k, b in chain if _has(k, ch)), chain[0])
            pick = (_font(key).fontName, bold)
        if runs and (runs[-1].font, runs[-1].fake_bold) == pick:
            runs[-1] = Run(runs[-1].text + ch, *pick)
        else:
            runs.append(Run(ch, *pick))
    return runs


def text_width(text: str, style: str, size: float) -> float:
    return sum(pdfmetrics.stringWidth(r.text, r.font, size) for r in _runs(text, style))


def _draw(
    c: Canvas,
    text: str,
    x: float,
    y: float,
    *,
    style: str,
    size: float,
    color=INK,
    align: str = "center",
    max_width: float | None = None,
    char_space: float = 0.0,
) -> float:
    """Draw one line; shrink it to ``max_width`` if given. Returns the size used."""
    width = text_width(text, style, size) + char_space * len(text)
    if max_width and width > max_width:
        size *= max_width / width
        char_space *= max_width / width
        width = max_width
    if align == "center":
        x -= width / 2
    elif align == "right":
        x -= width
    # The render mode outlives the text object in PDF, and reportlab only
    # writes changes it knows about: save and restore the graphics state.
    c.saveState()
    t = c.beginText(x, y)
    t.setFillColor(color)
    t.setStrokeColor(color)
    t.setCharSpace(char_space)
    for run in _runs(text, style):
        t.setFont(run.font, size)
        if run.fake_bold:  # fill and stroke: Droid Sans Fallback has no bold face
            c.setLineWidth(size * 0.035)
            t.setTextRenderMode(2)
        else:
            t.setTextRenderMode(0)
        t.textOut(run.text)
    c.drawText(t)
    c.restoreState()
    return size


def _units(text: str) -> list[str]:
    """Break opportunities: words (with their trailing space) and single CJK characters."""
    units: list[str] = []
    for piece in re.findall(r"\S+\s*|\s+", text):
        word = ""
        for ch in piece:
            if unicodedata.east_asian_width(ch) in "WF":
                if word:
                    units.append(word)
                    word = ""
                units.append(ch)
            else:
                word += ch
        if word:
            units.append(word)
    return units


def wrap(text: str, style: str, size: float, max_width: float) -> list[str]:
    """Greedy line breaking; words longer than a line are cut between characters."""
    lines: list[str] = []
    line = ""
    for unit in _units(text):
        if text_width(line + unit.rstrip(), style, size) <= max_width:
            line += unit
            continue
        if line.strip():
            lines.append(line.rstrip())
            line = ""
        for ch in unit:  # a unit wider than a whole line
            if line and text_width(line + ch, style, size) > max_width:
                lines.append(line.rstrip())
                line = ""
            line += ch
    if line.strip():
        lines.append(line.rstrip())
    return lines or [""]


def fit_name(
    name: str, *, max_width: float, max_height: float, largest: float = 40, smallest: float = 11
) -> tuple[float, list[str]]:
    """The largest size (and its lines) at which the name fits the box."""
    size = largest
    while True:
        lines = wrap(name, "serif-bold", size, max_width)
        if len(lines) * size * 1.2 <= max_height or size <= smallest:
            return size, lines
        size -= 1


def _qr(c: Canvas, data: str, x: float, y: float, size: float) -> None:
    """A vector QR code (segno) with its lower left corner at x, y."""
    matrix = segno.make(data, error="m", micro=False).matrix
    module = size / len(matrix)
    path = c.beginPath()
    for r, row in enumerate(matrix):
        top = y + size - (r + 1) * module
        col = 0
        while col < len(row):
            if row[col]:
                start = col
                while col < len(row) and row[col]:
                    col += 1
                path.rect(x + start * module, top, (col - start) * module, module)
            else:
                col += 1
    c.setFillColor(INK)
    c.drawPath(path, stroke=0, fill=1)


def _seal(c: Canvas, x: float, y: float, r: float) -> None:
    """A gold medallion with a tick: decoration that needs no words."""
    c.setFillColor(PALE_GOLD)
    c.setStrokeColor(GOLD)
    c.setLineWidth(1.6)
    c.circle(x, y, r, stroke=1, fill=1)
    c.setLineWidth(0.6)
    c.circle(x, y, r - 5, stroke=1, fill=0)
    # 24 small beads between the rings
    c.setFillColor(GOLD)
    for i in range(24):
        p = c.beginPath()
        a = 2 * pi * i / 24
        p.circle(x + (r - 2.5) * cos(a), y + (r - 2.5) * sin(a), 0.7)
        c.drawPath(p, stroke=0, fill=1)
    c.setStrokeColor(NAVY)
    c.setLineWidth(3)
    c.setLineCap(1)
    c.setLineJoin(1)
    tick = c.beginPath()
    tick.moveTo(x - r * 0.38, y + r * 0.02)
    tick.lineTo(x - r * 0.1, y - r * 0.28)
    tick.lineTo(x + r * 0.42, y + r * 0.3)
    c.drawPath(tick, stroke=1, fill=0)


def verify_url(public_url: str, cert_id: str) -> str:
    return f"{public_url.rstrip('/')}/verify?id={cert_id}"


def embed_token(payload: str, signature: str) -> str:
    return f"{TOKEN_PREFIX}{b64url(payload.encode('utf-8'))}.{signature}"


def extract_token(text: str) -> tuple[bytes, str] | None:
    """(payload bytes, base64url signature) from a /Keywords value, if present."""
    m = _TOKEN.search(text or "")
    if not m:
        return None
    try:
        return b64url_decode(m.group(1)), m.group(2)
    except ValueError:
        return None


def render(*, payload: str, signature: str, public_url: str) -> bytes:
    """The certificate for a signed payload (canonical JSON text)."""
    p = json.loads(payload)
    t = texts(p["lang"])
    url = verify_url(public_url, p["id"])
    buf = io.BytesIO()
    width, height = landscape(A4)
    # The initial font would otherwise be Helvetica, which is never embedded.
    c = Canvas(
        buf, pagesize=(width, height), pageCompression=1, initialFontName=_font("Sans").fontName
    )
    c.setTitle(t["pdf_title"].format(id=p["id"]))
    c.setAuthor(p["issuer"])
    c.setSubject(f"{p['name']} - {t['course_title']}")
    c.setCreator(p["issuer"])
    c.setKeywords(embed_token(payload, signature))
    cx = width / 2

    # Frame: a navy rule and a thin gold one inside it.
    c.setFillColor(PAPER)
    c.rect(0, 0, width, height, stroke=0, fill=1)
    c.setStrokeColor(NAVY)
    c.setLineWidth(2.4)
    c.rect(20, 20, width - 40, height - 40)
    c.setStrokeColor(GOLD)
    c.setLineWidth(0.8)
    c.rect(28, 28, width - 56, height - 56)
    for fx, fy in ((28, 28), (width - 28, 28), (28, height - 28), (width - 28, height - 28)):
        c.setFillColor(GOLD)
        d = c.beginPath()
        d.moveTo(fx - 5, fy)
        d.lineTo(fx, fy + 5)
        d.lineTo(fx + 5, fy)
        d.lineTo(fx, fy - 5)
        d.close()
        c.drawPath(d, stroke=0, fill=1)

    content = width - 200
    label = {"style": "sans-bold", "size": 8, "color": GREY, "char_space": 1}
    prose = {"style": "serif", "size": 14, "color": GREY, "max_width": content}
    title = {"style": "serif-bold", "color": NAVY, "max_width": content}

    top = p["issuer"].upper()
    _draw(
        c, top, cx, 516, style="sans-bold", size=11, color=GOLD, char_space=2.2, max_width=content
    )
    _draw(c, t["heading"], cx, 462, size=34, **title)
    c.setStrokeColor(GOLD)
    c.setLineWidth(1)
    c.line(cx - 60, 444, cx + 60, 444)
    _draw(c, t["certifies"], cx, 408, **prose)

    # The name: as large as fits, wrapped over up to a few lines if long.
    box_w, box_h, mid = width - 220, 76, 358
    size, lines = fit_name(p["name"], max_width=box_w, max_height=box_h)
    lead = size * 1.2
    first = mid + (len(lines) - 1) * lead / 2 - size * 0.33
    for i, line in enumerate(lines):
        _draw(c, line, cx, first - i * lead, style="serif-bold", size=size, max_width=box_w)
    c.setStrokeColor(GOLD)
    c.setLineWidth(0.6)
    c.line(cx - 220, 312, cx + 220, 312)

    _draw(c, t["completed"], cx, 284, **prose)
    _draw(c, t["course_title"], cx, 250, size=24, **title)
    score = t["score"].format(score=format_score(p["score"], p["lang"]))
    _draw(c, score, cx, 220, **{**prose, "color": INK})

    # Bottom row: date and ID | seal and issuer | QR code.
    left = 80
    _draw(c, t["date_label"].upper(), left, 150, align="left", **label)
    when = format_date(p["pass_date"], p["lang"])
    _draw(c, when, left, 132, style="serif", size=13, align="left", max_width=220)
    _draw(c, t["id_label"].upper(), left, 106, align="left", **label)
    _draw(c, p["id"], left, 88, style="sans", size=12, align="left", max_width=220)

    _seal(c, cx, 130, 32)
    _draw(c, t["issuer_label"].upper(), cx, 80, max_width=260, **label)
    _draw(c, p["issuer"], cx, 64, style="serif", size=11, max_width=260)

    qr_size, qr_x, qr_y = 86, width - 80 - 86, 84
    _qr(c, url, qr_x, qr_y, qr_size)
    c.linkURL(url, (qr_x, qr_y, qr_x + qr_size, qr_y + qr_size), relative=0)
    hint_x = qr_x + qr_size / 2
    _draw(c, t["scan_hint"], hint_x, 72, style="sans", size=8, color=GREY, max_width=140)
    footer = t["verify_at"].format(url=url)
    _draw(c, footer, cx, 40, style="sans", size=7.5, color=GREY, max_width=content)

    c.showPage()
    c.save()
    return buf.getvalue()
