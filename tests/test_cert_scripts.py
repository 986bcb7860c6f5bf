"""Names in every script (issue #13): each issues, renders with no missing
glyph, verifies offline and extracts as typed; right-to-left runs are in
order; long names fit; only characters nothing can print are refused.

Each certificate is also rendered to test-artifacts/cert-<script>.png
(pdftoppm) for a person to look at: Arabic joined and right to left, Thai
and Devanagari marks in place, emoji visible."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import unicodedata

import pytest
from pypdf import PdfReader
from reportlab.pdfbase import pdfmetrics

from academy.settings import get_settings
from certificates import i18n, names, pdf, store, verify
from certificates import text as layout
from tests.test_cert_cli import ROOT, cli

# One name per script the certificate promises; the key names the PNG.
SCRIPTS = {
    "vietnamese": "Nguyễn Thị Minh Khai",
    "icelandic": "Sigurður Þórðarson",
    "polish": "Zażółć Gęślą-Jaźń",
    "cyrillic": "Пётр Ильич Чайковский",
    "greek": "Αλέξανδρος Παπαδόπουλος",
    "armenian": "Արամ Խաչատրյան",
    "georgian": "ნინო ჩხეიძე",
    "han-simplified": "张伟",
    "han-traditional": "張偉",
    "kana": "山田 たろう カタカナ",
    "hangul": "김민준",
    "arabic": "مريم العلي",
    "hebrew": "דוד כהן",
    "arabic-latin": "مريم Anna",  # right-to-left paragraph, a Latin run inside
    "latin-hebrew": "Anna דוד",  # left-to-right paragraph, a Hebrew run inside
    "devanagari": "राहुल क्षत्रिय",
    "bengali": "রবীন্দ্রনাথ ঠাকুর",
    "tamil": "தமிழ்செல்வன்",
    "thai": "สมชาย ใจดี",
    "ethiopic": "አበበ ቢቂላ",
    "combining": "Rene\u0301e x\u0301",  # e + U+0301 (composes) and x + U+0301 (does not)
    "emoji": "Ana 👩🏽‍💻 🎉",
}
# pdftotext lays a line out left to right; a right-to-left paragraph that
# holds a Latin run comes out with its runs in visual order there.
# (Content-stream extractors such as pypdf, which verify uses, get it as typed.)
VISUAL_IN_PDFTOTEXT = {"arabic-latin"}
BIDI_MARKS = dict.fromkeys(map(ord, "\u202a\u202b\u202c\u202d\u202e"))


@pytest.fixture(autouse=True)
def public_url(secrets, monkeypatch):  # own issuer keys (conftest.py) and a fixed public address
    monkeypatch.setenv("PUBLIC_URL", "https://academy.example/")
    get_settings.cache_clear()
    yield secrets
    get_settings.cache_clear()


def issue(session, name: str, lang: str = "en"):
    return store.issue_certificate(
        session=session,
        learner_id=None,
        attempt_id=None,
        name=name,
        lang=lang,
        score=91,
        pass_date="2025-11-30",
    )


def glyph_ids(text: str, style: str = "serif-bold") -> list[int]:
    """The glyphs the PDF draws for ``text`` (0 is .notdef, an empty box)."""
    ids = []
    for run in layout.visual_runs(text, style):
        shaped = layout.shape(run)
        face = pdfmetrics.getFont(run.font).face
        drawn = str(shaped.inline) + "".join(g for _, _, g in shaped.marks)
        ids += [face.charToGlyph.get(ord(ch), 0) for ch in drawn]
    return ids


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_issues_prints_verifies_and_extracts(script, session, tmp_path, artifacts):
    name = SCRIPTS[script]
    typed = unicodedata.normalize("NFC", name)
    assert layout.unprintable_chars(name) == []
    assert 0 not in glyph_ids(typed), "a glyph is missing (.notdef box)"

    cert = issue(session, name)
    data = store.render_pdf(cert)
    assert len(data) < 150 * 1024
    result = verify.verify_pdf(data)
    assert result.valid, result.detail
    assert result.name == typed

    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)
    assert typed in text.splitlines()  # pypdf: one line, in logical order

    path = tmp_path / f"cert-{script}.pdf"
    path.write_bytes(data)
    if shutil.which("pdftotext"):
        out = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True)
        lines = out.stdout.translate(BIDI_MARKS).splitlines()
        if script in VISUAL_IN_PDFTOTEXT:
            assert " ".join(reversed(typed.split(" "))) in lines
        else:
            assert typed in lines
    if shutil.which("pdftoppm"):
        png = artifacts / f"cert-{script}"
        subprocess.run(
            ["pdftoppm", "-r", "60", "-png", "-singlefile", str(path), str(png)], check=True
        )
        assert png.with_suffix(".png").stat().st_size > 0


@pytest.mark.slow  # eight runs of the command line, each a fresh interpreter
def test_the_issue_names_go_through_the_command_line(tmp_path):
    """``python -m certificates issue`` refused these (issue #13); now each
    issues and verifies offline with the same CLI."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'academy.db'}",
        "SECRETS_DIR": str(tmp_path / "secrets"),
        "PUBLIC_URL": "https://academy.example",
        "PYTHONPATH": str(ROOT),
    }
    for i, name in enumerate(["김민준", "مريم العلي", "דוד כהן", "Ana 🎉"]):
        out = tmp_path / f"c{i}.pdf"
        issued = cli(env, "issue", "--name", name, "--score", "90", "--out", out)
        assert issued.returncode == 0, issued.stderr
        checked = cli(env, "verify", out)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"name:       {name}" in checked.stdout


def test_right_to_left_runs_are_in_visual_order():
    # A right-to-left paragraph: the Latin run sits on the left.
    runs = layout.visual_runs("مريم Anna", "serif-bold")
    assert [r.text for r in runs] == ["Anna", " ", "مريم"]
    assert [r.rtl for r in runs] == [False, True, True]
    # A left-to-right paragraph: the Hebrew words sit on the right, drawn
    # from their last letter (leftmost) to their first (rightmost).
    runs = layout.visual_runs("Anna דוד כהן", "serif-bold")
    assert [r.text for r in runs] == ["Anna ", "דוד כהן"]
    assert str(layout.shape(runs[1]).inline) == "ןהכ דוד"
    # Digits inside Arabic stay left to right, on the left of the word before.
    assert [r.text for r in layout.visual_runs("مريم 2024", "serif-bold")] == ["2024", " ", "مريم"]


def test_arabic_is_joined_and_thai_marks_sit_on_their_consonant():
    # Joined: each letter of مريم is drawn with a contextual form, never
    # with the glyph its code point maps to on its own.
    face = layout.load_font("Arabic").face
    own = {face.charToGlyph[ord(c)] for c in "مريم"}
    assert not own & set(glyph_ids("مريم"))
    # Thai: the vowel sign above (U+0E35) is a zero-width mark drawn over
    # the consonant before it, not a glyph of its own in the row.
    run = layout.visual_runs("ใจดี", "serif-bold")[0]
    shaped = layout.shape(run)
    assert len(str(shaped.inline)) == 3 and len(shaped.marks) == 1
    pen = [0.0]
    for d in shaped.inline.__shapeData__:
        pen.append(pen[-1] + d.x_advance)
    mark_x = shaped.marks[0][0]
    assert pen[2] <= mark_x < pen[3]  # over ด, the third glyph


@pytest.mark.parametrize(
    "name",
    [
        "W" * 200,
        ("Maximiliane Alexandra Wilhelmina von Hohenzollern-Sigmaringen " * 4)[:200],
        ("สมชายใจดี" * 30)[:200],  # no spaces: breaks between clusters
        ("محمد عبد الرحمن " * 20)[:200].strip(),
        "张" * 200,
        ("राहुल क्षत्रिय " * 20)[:200].strip(),
    ],
)
def test_long_names_shrink_then_wrap_onto_two_lines(name):
    box_w, box_h = 622, 76
    size, lines = pdf.fit_name(name, max_width=box_w, max_height=box_h)
    assert 1 <= len(lines) <= 2
    assert all(layout.text_width(line, "serif-bold", size) <= box_w + 1e-6 for line in lines)
    assert len(lines) * size * 1.2 <= box_h + 1e-6
    assert size <= 22  # shrunk to the one-line minimum before wrapping
    assert "".join("".join(lines).split()) == "".join(name.split())
    # never cut inside a cluster (a Thai mark stays on its consonant's line)
    assert not any(unicodedata.combining(line[0]) for line in lines)


def test_a_name_that_fits_stays_on_one_line_at_full_size():
    assert pdf.fit_name("Zoë Ødegård", max_width=622, max_height=76) == (40, ["Zoë Ødegård"])
    long = "Maximiliane Alexandra von Hohenzollern"
    size, lines = pdf.fit_name(long, max_width=622, max_height=76)
    assert len(lines) == 1 and 22 <= size < 40


def test_only_characters_nothing_can_print_are_refused():
    assert layout.unprintable_chars("".join(SCRIPTS.values())) == []
    refused = ["\ue000", "\u0378", "\x07", "\U000f0000"]  # private use, unassigned, control
    assert layout.unprintable_chars("Ann " + "".join(refused)) == refused
    en = names.describe_unprintable(["\ue000", "\u0378", "\x07"], "en")
    assert en == (
        "U+E000 (private-use character), U+0378 (unassigned code point), U+0007 (control character)"
    )
    assert names.describe_unprintable(["\ue000"], "zh") == "U+E000（私用区字符）"
    assert names.describe_unprintable(["\u0378"], "nl") == "U+0378 (niet-toegewezen codepunt)"
    assert names.refusal_message(["\ue000"], "nl") == (
        "Deze tekens kan het certificaat niet drukken: "
        "U+E000 (teken uit het privégebruiksgebied). Haal ze weg."
    )
    for lang in i18n.languages():
        assert "U+0007" in names.refusal_message(["\x07"], lang)


def test_script_fonts_are_embedded_as_subsets(session):
    data = store.render_pdf(issue(session, "مريم 김민준 राहुल 🎉 สมชาย"))
    reader = PdfReader(io.BytesIO(data))
    fonts = reader.pages[0]["/Resources"]["/Font"]
    names = set()
    for ref in fonts.values():
        font = ref.get_object()
        names.add(str(font["/BaseFont"]))
        assert "/FontFile2" in font["/FontDescriptor"]
        assert "/ToUnicode" in font
    base = {n.split("+", 1)[1] for n in names}
    for face in ["NotoNaskhArabic-Bold", "NanumSquareB", "NotoSerifDevanagari-Bold"]:
        assert face in base, base
    assert {"NotoEmoji-Bold", "NotoSerifThai-Bold"} <= base
    assert all("+" in n for n in names)  # subset prefix: only the glyphs used
    assert len(data) < 150 * 1024


@pytest.mark.slow  # a benchmark section: every script issued and rendered
def test_bench_has_a_row_per_script(tmp_path):
    """``make bench`` measures each script (numbers only: timings are never
    asserted) and the report shows one row per script."""
    from benchmarks import platform_costs, report
    from benchmarks.common import Config

    costs = platform_costs.certificate_issuance(Config(pdfs=1), tmp_path)
    per_script = costs["per_script"]
    assert list(per_script) == list(platform_costs.SCRIPT_NAMES)
    for script, row in per_script.items():
        assert all(isinstance(row[k], float) for k in ("issue_ms", "render_ms", "total_ms")), script
        assert row["pdf_kib"] < 150, script
    skipped = "skipped: not measured here"
    parts = dict.fromkeys(("quiz", "verification", "pages", "load", "classroom"), skipped)
    rows = [r for r in report.platform({**parts, "certificate": costs}) if "name in" in r[1]]
    assert [r[1].split("name in ")[1].split(":")[0] for r in rows] == list(per_script)
