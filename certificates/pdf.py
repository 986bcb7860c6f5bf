"""The certificate as a PDF: reportlab, A4 landscape, fonts embedded.

The page (frame, seal, QR code, the lines of text) is drawn here; every
string goes through the text engine of ``certificates.text`` (font fallback,
clusters, bidi order, HarfBuzz shaping, ToUnicode maps) and is drawn with the
canvas text API, never through Paragraph markup, so ``<b>&"'`` print
literally. ``fit_name`` sizes the name, on one line or two.

The signed payload and its signature ride along in the PDF's /Keywords as
``dp-certificate:<base64url payload>.<base64url signature>`` (see
``embed_token`` and ``extract_token``) for offline checking.
"""

from __future__ import annotations

import io
import json
import re
from math import cos, pi, sin

import segno
from reportlab.lib.colors import HexColor
from reportlab.lib.pagesizes import A4, landscape
from reportlab.pdfgen.canvas import Canvas

from certificates.i18n import format_date, format_score, texts
from certificates.ids import verify_url
from certificates.signing import b64url, b64url_decode
from certificates.text import Run, break_units, line_runs, load_font, shape, text_width

TOKEN_PREFIX = "dp-certificate:"
_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)")

NAVY = HexColor("#1d3557")
GOLD = HexColor("#b08d57")
PALE_GOLD = HexColor("#f7f1e6")
INK = HexColor("#1b1b1b")
GREY = HexColor("#5c6470")
PAPER = HexColor("#fffcf5")


def _set_font(c: Canvas, t, run: Run, size: float) -> None:
    t.setFont(run.font, size)
    if run.fake_bold:  # fill and stroke: Droid Sans Fallback has no bold face
        c.setLineWidth(size * 0.035)
        t.setTextRenderMode(2)
    else:
        t.setTextRenderMode(0)


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
    # The runs are drawn at their places from left to right but written in
    # logical order, so that extractors that follow the content stream give
    # the name as typed even where it mixes right-to-left and left-to-right
    # runs. (No ActualText: poppler reorders it as if it were visual.)
    runs, logical = line_runs(text, style)
    at, pen = [], x
    for run in runs:
        at.append(pen)
        pen += shape(run).width * size + char_space * len(shape(run).inline)
    # The render mode outlives the text object in PDF, and reportlab only
    # writes changes it knows about: save and restore the graphics state.
    c.saveState()
    stream = sorted(range(len(runs)), key=logical.__getitem__)
    # Start where the first run written starts: a jump to the right before
    # any text reads as a leading space to pypdf.
    t = c.beginText(at[stream[0]] if runs else x, y)
    t.setFillColor(color)
    t.setStrokeColor(color)
    t.setCharSpace(char_space)
    marks = []
    for k in stream:
        run, shaped = runs[k], shape(runs[k])
        marks += [
            (at[k] + dx * size / 1000, y + dy * size / 1000, g, run) for dx, dy, g in shaped.marks
        ]
        _set_font(c, t, run, size)
        t.setTextOrigin(at[k], y)
        t.textOut(shaped.inline)
    # The marks last, from right to left: each move is then a step back,
    # which extractors do not take for a space between words.
    for mx, my, glyph, run in sorted(marks, key=lambda m: -m[0]):
        _set_font(c, t, run, size)
        t.setTextOrigin(mx, my)
        t.textOut(glyph)
    c.drawText(t)
    c.restoreState()
    return size


def fit_name(
    name: str,
    *,
    max_width: float,
    max_height: float,
    largest: float = 40,
    one_line_min: float = 22,
) -> tuple[float, list[str]]:
    """The size and lines of the name: one line, shrunk down to
    ``one_line_min`` if need be; else two lines, broken where the longer of
    the two is shortest, at the size (at most ``one_line_min``) that fits
    both in the box. Never more
    than two lines, never wider than ``max_width``: a 200-character name
    prints small rather than clipped."""
    one = text_width(name, "serif-bold", 1)
    if one * one_line_min <= max_width:
        return min(largest, max_width / one), [name]
    units = break_units(name)
    if len(units) < 2:  # a single cluster wider than the line: shrink it
        return max_width / one, [name]
    # Choose the break on the units' own widths (one shaping each), then
    # size the two lines as they will really be drawn.
    widths = [text_width(u, "serif-bold", 1) for u in units]
    total = sum(widths)
    best, left = 1, widths[0]
    best_widest = max(left, total - left)
    for i in range(2, len(units)):
        left += widths[i - 1]
        if max(left, total - left) < best_widest:
            best, best_widest = i, max(left, total - left)
    lines = ["".join(units[:best]).rstrip(), "".join(units[best:]).strip()]
    widest = max(text_width(line, "serif-bold", 1) for line in lines)
    # Never larger than a one-line name could be: a longer name, smaller type.
    return min(one_line_min, max_height / (2 * 1.2), max_width / widest), lines


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


def exercises_line(exercises: list[str], lang: str) -> str:
    """"including hands-on exercises: ring all-reduce, broadcast, ..." in the certificate's language."""
    t = texts(lang)
    names = t["exercise_names"]
    return t["exercises_line"].format(exercises=t["exercise_separator"].join(names.get(e, e) for e in exercises))


def render(*, payload: str, signature: str, public_url: str) -> bytes:
    """The certificate for a signed payload (canonical JSON text)."""
    p = json.loads(payload)
    t = texts(p["lang"])
    url = verify_url(public_url, p["id"])
    buf = io.BytesIO()
    width, height = landscape(A4)
    # The initial font would otherwise be Helvetica, which is never embedded.
    c = Canvas(
        buf, pagesize=(width, height), pageCompression=1, initialFontName=load_font("Sans").fontName
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

    # The name: as large as fits on one line, or on two if long (fit_name).
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
    if p.get("exercises"):  # version 2: the certificate required the coding exercises
        _draw(c, exercises_line(p["exercises"], p["lang"]), cx, 194, **{**prose, "size": 11})

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
