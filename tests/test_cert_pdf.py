"""The certificate PDF: names in any script, fonts embedded, text extractable,
QR code and the embedded signed payload. And the locale files are complete."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
from pypdf import PdfReader
from pypdf.generic import IndirectObject

from academy import content
from certificates import i18n, pdf, signing
from certificates import text as layout
from certificates.ids import new_id

NAMES = ["Zoë Ødegård", "张伟", "Nguyễn Thị Minh Khai"]
MARKUP = ["<b>Bold</b> & \"quoted\" 'single'", "Tom & Jerry <script>", "&amp; &lt;b&gt;"]
LONG = ("Maximiliane Alexandra Wilhelmina von Hohenzollern-Sigmaringen-Ødegård " * 3)[:200]


pytestmark = pytest.mark.usefixtures("secrets")  # own issuer keys (conftest.py)


def render(name: str, lang: str = "en", score: float = 92) -> tuple[bytes, str]:
    cert_id = new_id()
    signed = signing.sign(
        signing.make_payload(
            cert_id=cert_id,
            name=name,
            course="data-parallelism",
            score=score,
            pass_date="2025-11-30",
            lang=lang,
            issuer="Data Parallelism Academy",
        )
    )
    data = pdf.render(
        payload=signed.payload, signature=signed.signature, public_url="https://academy.example"
    )
    return data, cert_id


def text_of(data: bytes) -> str:
    return "".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


def squash(text: str) -> str:
    return "".join(text.split())


def resolve(obj):
    return obj.get_object() if isinstance(obj, IndirectObject) else obj


def font_dicts(data: bytes):
    for page in PdfReader(io.BytesIO(data)).pages:
        fonts = resolve(resolve(page["/Resources"]).get("/Font", {}))
        for font in fonts.values():
            yield resolve(font)


@pytest.mark.parametrize("name, lang", list(zip(NAMES, ("en", "zh", "nl"), strict=True)))
def test_name_extracts_in_every_script(name, lang):
    data, cert_id = render(name, lang)
    text = text_of(data)
    assert name in text
    assert cert_id in text
    assert i18n.texts(lang)["course_title"] in text


def test_mixed_script_name_uses_several_fonts():
    name = "Anna 张 Nguyễn"
    runs = layout.visual_runs(name, "serif-bold")
    assert len({r.font for r in runs}) == 2
    assert "".join(r.text for r in runs) == name
    data, _ = render(name)
    assert name in text_of(data)


@pytest.mark.parametrize("name", [*NAMES, "Anna 张 Nguyễn"])
def test_every_font_is_embedded(name):
    data, _ = render(name, "zh")  # Chinese labels and a Latin name: both families
    fonts = list(font_dicts(data))
    assert len(fonts) >= 3
    for font in fonts:
        assert font_problems(font) == [], font


def font_problems(font) -> list[str]:
    """What keeps a font from being embedded and extractable. The /ToUnicode
    map sits on the top-level font (a Type0 font's included), the font file
    on the descriptor of the font that has the glyphs (a Type0's descendant)."""
    problems = [] if "/ToUnicode" in font else ["no /ToUnicode"]
    glyphs = resolve(resolve(font["/DescendantFonts"])[0]) if font["/Subtype"] == "/Type0" else font
    descriptor = resolve(glyphs["/FontDescriptor"])
    if not any(k in descriptor for k in ("/FontFile", "/FontFile2", "/FontFile3")):
        problems.append("not embedded")
    return problems


def test_the_font_check_sees_a_type0_font_without_tounicode():
    # It used to look for /ToUnicode on the descendant CIDFont and excuse it there.
    descendant = {"/Subtype": "/CIDFontType2", "/FontDescriptor": {"/FontFile2": "..."}}
    type0 = {"/Subtype": "/Type0", "/DescendantFonts": [descendant]}
    assert font_problems(type0) == ["no /ToUnicode"]
    assert font_problems({**type0, "/ToUnicode": "..."}) == []
    assert font_problems({"/Subtype": "/TrueType", "/FontDescriptor": {}}) == ["no /ToUnicode", "not embedded"]


@pytest.mark.skipif(not shutil.which("pdffonts"), reason="poppler-utils not installed")
def test_pdffonts_says_embedded(tmp_path):
    data, _ = render("张伟 Zoë", "zh")
    path = tmp_path / "c.pdf"
    path.write_bytes(data)
    out = subprocess.run(["pdffonts", str(path)], capture_output=True, text=True, check=True)
    rows = out.stdout.splitlines()[2:]
    assert rows
    for row in rows:
        cols = row.split()
        assert cols[-5] == "yes", row  # emb


@pytest.mark.parametrize("name", [LONG, "W" * 200, "张" * 200, *MARKUP])
def test_long_and_markup_names_render_as_typed(name):
    assert len(name) <= 200
    data, _ = render(name)
    assert squash(name) in squash(text_of(data))


def test_long_name_fits_the_box():
    size, lines = pdf.fit_name(LONG, max_width=620, max_height=76)
    assert 1 < len(lines) <= 4
    assert all(layout.text_width(line, "serif-bold", size) <= 620 for line in lines)
    assert squash("".join(lines)) == squash(LONG)
    size, lines = pdf.fit_name("Zoë Ødegård", max_width=620, max_height=76)
    assert (size, lines) == (40, ["Zoë Ødegård"])


def test_payload_and_signature_ride_in_the_pdf():
    data, cert_id = render("Zoë Ødegård")
    keywords = PdfReader(io.BytesIO(data)).metadata["/Keywords"]
    payload, signature = pdf.extract_token(keywords)
    assert signing.verify(payload, signature, signing.keys.local_public_keys())["id"] == cert_id


def test_unprintable_characters_are_reported():
    # Devanagari, Thai, Hebrew, Hangul and emoji print now (shaped, bidi);
    # private-use, unassigned and control characters never do.
    assert layout.unprintable_chars("Zoë 张伟 Nguyễn \u0915\u0e01 \u05d0 김 🎉") == []
    assert layout.unprintable_chars("Ann \ue000\u0378\x07\ue000") == ["\ue000", "\u0378", "\x07"]


@pytest.mark.skipif(
    not (shutil.which("zbarimg") and shutil.which("pdftoppm")),
    reason="zbar-tools or poppler missing",
)
def test_qr_code_holds_the_verify_link(tmp_path):
    data, cert_id = render("张伟", "zh")
    (tmp_path / "c.pdf").write_bytes(data)
    subprocess.run(
        [
            "pdftoppm",
            "-png",
            "-r",
            "60",
            "-singlefile",
            str(tmp_path / "c.pdf"),
            str(tmp_path / "c"),
        ],
        check=True,
    )
    out = subprocess.run(
        ["zbarimg", "-q", "--raw", str(tmp_path / "c.png")], capture_output=True, text=True
    )
    assert out.stdout.strip() == f"https://academy.example/verify?id={cert_id}"


def test_locales_have_every_key():
    reference = i18n.texts("en")

    def keys_of(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= keys_of(v, f"{prefix}{k}.")
        return out

    for lang in i18n.languages():
        assert lang in content.catalog_languages(content.CERTIFICATES), f"content/certificates lacks {lang}"
        t = i18n.texts(lang)
        assert keys_of(t) == keys_of(reference), lang
    assert {lang: i18n.texts(lang)["course_title"] for lang in ("en", "zh", "nl")} == {
        "en": "Data Parallelism",
        "zh": "数据并行",
        "nl": "Dataparallellisme",
    }


def test_dates_and_scores_per_language():
    assert i18n.format_date("2025-03-07", "en") == "7 March 2025"
    assert i18n.format_date("2025-03-07", "zh") == "2025年3月7日"
    assert i18n.format_date("2025-03-07", "nl") == "7 maart 2025"
    assert i18n.format_score(92.0, "en") == "92"
    assert i18n.format_score(87.5, "nl") == "87,5"
