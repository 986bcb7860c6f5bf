"""Certificate IDs: short, readable, unguessable and typo-checked.

    DP-7K3M-9QXZ-A2B4-HJ8R-5T
       16 digits: 80 random bits   2 check digits

The body is 80 bits from ``secrets`` written as 16 Crockford base32 digits
(0-9 and A-Z without I, L, O, U, so nothing looks like anything else).

The check is two more base32 digits holding c = (-body * 32**2) mod 1021,
chosen so that the whole 18-digit number is a multiple of the prime 1021.
Like Crockford's own mod-37 check symbol this catches *every* single-digit
substitution (it changes the number by d * 32**k with 0 < |d| < 32, never a
multiple of 1021) and every swap of two neighbours, check digits included
(d * 31 * 32**k). Unlike mod 37 it needs no extra symbols (* ~ $ = U) that
are awkward to type and to put in a URL, and a random string passes only
once in ~1000 tries instead of once in 37.

Text that fails its check digits is a typo only when any spaces or dashes
in it stand where an ID has them; words that happen to add up to 18 letters
("hello world drop table") are, like text of the wrong length or with other
characters, not an ID at all.

Reading is forgiving, as Crockford intends: case, spaces and dashes do not
matter, I and L read as 1, O as 0, the ``DP`` prefix may be left out and a
pasted verification URL works too. Text is NFKC-normalised first, so an ID
typed with a CJK input method (full-width ``ＤＰ－３２ＧＹ…``) reads as well.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from urllib.parse import parse_qs, urlsplit

from academy.errors import UserError

PREFIX = "DP"
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BODY_DIGITS = 16  # 16 x 5 = 80 random bits
CHECK_DIGITS = 2
PRIME = 1021  # largest prime below 32**2
_VALUE = {c: i for i, c in enumerate(ALPHABET)}
_ALIASES = str.maketrans({"I": "1", "L": "1", "O": "0"})
_SEPARATORS = re.compile(r"[\s\-_.\u2010-\u2015\u2212]+")


class InvalidId(UserError, ValueError):
    """The text is not a certificate ID; ``kind`` says why (a Verify status)."""

    kind = "invalid"
    key = "certificate.err_id_malformed"

    def __init__(self, detail: str) -> None:
        super().__init__(detail=detail)  # English, for the CLI: the page's text has no slot for it


class MalformedId(InvalidId):
    """Wrong length or characters: not the shape of an ID at all."""

    kind = "malformed"


class IdTypo(InvalidId):
    """Right shape, but the check digits do not match: a mistyped character."""

    kind = "typo"
    key = "certificate.err_id_typo"


def _encode(value: int, digits: int) -> str:
    out = []
    for _ in range(digits):
        value, r = divmod(value, 32)
        out.append(ALPHABET[r])
    return "".join(reversed(out))


def _decode(text: str) -> int:
    value = 0
    for c in text:
        value = value * 32 + _VALUE[c]
    return value


def check_digits(body: str) -> str:
    """The two check digits for a 16-digit body (canonical characters)."""
    return _encode((-_decode(body) * 32**CHECK_DIGITS) % PRIME, CHECK_DIGITS)


def format_id(body: str) -> str:
    """``DP-XXXX-XXXX-XXXX-XXXX-CC`` for a canonical 16-digit body."""
    groups = [body[i : i + 4] for i in range(0, BODY_DIGITS, 4)]
    return "-".join([PREFIX, *groups, check_digits(body)])


def new_id() -> str:
    """A fresh random certificate ID."""
    return format_id(_encode(secrets.randbits(5 * BODY_DIGITS), BODY_DIGITS))


def _strip_url(text: str) -> str:
    """The ``id`` query value if ``text`` is a pasted verification link."""
    if "id=" not in text:
        return text
    try:
        query = urlsplit(text).query if "://" in text or "?" in text else text
    except ValueError as e:  # e.g. "x://[/?id=1": Invalid IPv6 URL
        raise MalformedId("not a verification link") from e
    values = parse_qs(query).get("id")
    return values[0] if values else text


def parse_id(text: str) -> str:
    """Normalise typed text to the canonical ID, or raise.

    Raises ``MalformedId`` for the wrong shape or characters and ``IdTypo``
    when the check digits do not match; both are ``InvalidId``.
    """
    # An ID already written as format_id writes it (a link, the API) is its own
    # answer: ASCII (NFKC leaves it), nothing to strip or translate. Only its
    # check digits need computing; anything else takes the whole way.
    if type(text) is str and _CANONICAL.fullmatch(text) and check_digits(text[3:22].replace("-", "")) == text[23:]:
        return text
    return _parse(text)


_CANONICAL = re.compile(rf"{PREFIX}(?:-[{ALPHABET}]{{4}}){{4}}-[{ALPHABET}]{{2}}", re.ASCII)


def _parse(text: str) -> str:
    if not isinstance(text, str):
        raise MalformedId("not text")
    text = unicodedata.normalize("NFKC", text)
    typed = _strip_url(text.strip())
    raw = _SEPARATORS.sub("", typed).upper()
    prefixed = len(raw) == len(PREFIX) + BODY_DIGITS + CHECK_DIGITS and raw.startswith(PREFIX)
    if prefixed:
        raw = raw[len(PREFIX) :]
    raw = raw.translate(_ALIASES)
    if len(raw) != BODY_DIGITS + CHECK_DIGITS:
        raise MalformedId(f"expected {BODY_DIGITS + CHECK_DIGITS} characters after DP-")
    bad = sorted({c for c in raw if c not in _VALUE})
    if bad:
        raise MalformedId(f"characters not used in IDs: {''.join(bad)}")
    body, check = raw[:BODY_DIGITS], raw[BODY_DIGITS:]
    if check_digits(body) != check:
        if not _grouped(typed, prefixed):  # words that happen to have 18 letters (journey Minor 11)
            raise MalformedId("separators where an ID has none: words, not an ID")
        raise IdTypo("check digits do not match: a character is mistyped")
    return format_id(body)


def _grouped(typed: str, prefixed: bool) -> bool:
    """Whether every separator in ``typed`` stands where the printed ID has one: after ``DP``
    and between groups of four (``DP-XXXX-XXXX-XXXX-XXXX-XX``), or none at all."""
    where = {2, 6, 10, 14, 18} if prefixed else {4, 8, 12, 16}
    count = 0
    for part in _SEPARATORS.split(typed)[:-1]:
        count += len(part)
        if count not in where:
            return False
    return True


def verify_url(public_url: str, cert_id: str) -> str:
    """The public verification link of an ID (what the QR code holds); ``parse_id`` reads it back."""
    return f"{public_url.rstrip('/')}/verify?id={cert_id}"
