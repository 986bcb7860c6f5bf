"""Certificate IDs: shape, forgiving reading, and the check digits."""

from __future__ import annotations

import random
import re

import pytest

from certificates.ids import (
    ALPHABET,
    IdTypo,
    MalformedId,
    check_digits,
    format_id,
    new_id,
    parse_id,
)

SHAPE = re.compile(r"^DP-([0-9A-HJKMNP-TV-Z]{4}-){4}[0-9A-HJKMNP-TV-Z]{2}$")


def test_new_ids_have_the_shape_and_parse_to_themselves():
    seen = set()
    for _ in range(2000):
        cert_id = new_id()
        assert SHAPE.match(cert_id), cert_id
        assert parse_id(cert_id) == cert_id
        seen.add(cert_id)
    assert len(seen) == 2000


def test_80_random_bits_in_the_body():
    body = "".join(new_id().split("-")[1:5])
    assert len(body) * 5 == 80


@pytest.mark.parametrize(
    "typed",
    [
        "{id}",
        "{id_lower}",
        "  {id}  ",
        "{plain}",  # no dashes at all
        "{no_prefix}",  # no DP
        "DP {spaced}",  # spaces instead of dashes
        "DP--{id_body}",  # extra dashes
        "https://academy.example/verify?id={id}",  # a pasted link
    ],
)
def test_reading_is_forgiving(typed):
    cert_id = "DP-0123-4567-89AB-CDEF-" + check_digits("0123456789ABCDEF")
    body = cert_id[3:]
    text = typed.format(
        id=cert_id,
        id_lower=cert_id.lower(),
        plain=cert_id.replace("-", ""),
        no_prefix=body,
        spaced=body.replace("-", " "),
        id_body=body,
    )
    assert parse_id(text) == cert_id


def test_i_l_o_read_as_1_and_0():
    body = "1010101010101010"
    cert_id = format_id(body)
    typed = cert_id.replace("1", "I", 3).replace("1", "l", 2).replace("0", "O", 4)
    assert typed != cert_id
    assert parse_id(typed) == cert_id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "DP-",
        "hello",
        "DP-1234",
        "DP-0123-4567-89AB-CDEF-0123-4567",
        "DP-0123-4567-89AB-CDEU-00",
        "DP-0123-4567-89AB-CD#F-00",
        "XX-0123-4567-89AB-CDEF-00",
        "DP-0123-4567-89AB-CDEF-Ü0",
    ],
)
def test_malformed(text):
    with pytest.raises(MalformedId):
        parse_id(text)


def test_every_single_substitution_is_a_typo():
    rng = random.Random(1)
    for _ in range(200):
        cert_id = new_id()
        digits = cert_id.replace("-", "")[2:]
        for pos in range(len(digits)):
            for ch in ALPHABET:
                if ch == digits[pos]:
                    continue
                typed = digits[:pos] + ch + digits[pos + 1 :]
                with pytest.raises(IdTypo):
                    parse_id(typed)
        # and a random one in the printed form
        pos = rng.choice([i for i, c in enumerate(cert_id) if i > 2 and c != "-"])
        ch = rng.choice([c for c in ALPHABET if c != cert_id[pos]])
        with pytest.raises(IdTypo):
            parse_id(cert_id[:pos] + ch + cert_id[pos + 1 :])


def test_every_adjacent_swap_is_caught():
    for _ in range(500):
        digits = new_id().replace("-", "")[2:]
        for pos in range(len(digits) - 1):
            if digits[pos] == digits[pos + 1]:
                continue
            swapped = digits[:pos] + digits[pos + 1] + digits[pos] + digits[pos + 2 :]
            with pytest.raises(IdTypo):
                parse_id(swapped)


def test_check_digits_stay_below_the_prime():
    # 1021 to 1023 would be a second spelling of 0 to 2: never produced, never accepted
    for _ in range(5000):
        check = new_id()[-2:]
        assert ALPHABET.index(check[0]) * 32 + ALPHABET.index(check[1]) < 1021


@pytest.mark.parametrize(
    "text", ["x://[/?id=1", "http://[::1/?id=DP-32GY-9968-T9TV-JB45-KH", "https://[/verify?id=x"]
)
def test_broken_links_are_malformed_not_a_crash(text):
    # F-12: urlsplit raises ValueError("Invalid IPv6 URL"); parse_id promises only InvalidId.
    with pytest.raises(MalformedId):
        parse_id(text)


def test_full_width_ids_are_read():
    # F-19: an ID typed with a CJK input method comes in full-width forms.
    cert_id = "DP-0123-4567-89AB-CDEF-" + check_digits("0123456789ABCDEF")
    full_width = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in cert_id)
    assert full_width != cert_id
    assert parse_id(full_width) == cert_id
    assert parse_id(full_width.lower()) == cert_id


def _outcome(read, text):
    try:
        return ("ok", read(text))
    except Exception as e:  # noqa: BLE001 - the kind and message are compared
        return (type(e).__name__, str(e))


def test_the_canonical_shortcut_answers_exactly_as_the_whole_reading():
    """``parse_id`` answers an ID written as ``format_id`` writes it without the whole
    reading (issue #26): for any text, typo or junk, the answer is the same as
    ``_parse``'s, the whole reading, whether a value or the same refusal."""
    from certificates import ids

    rng = random.Random(26)
    full_width = str.maketrans({chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)})
    texts: list[object] = [None, 5, b"DP-0123", "DP-0000-0000-0000-0000-00", "dp-0000-0000-0000-0000-00"]
    for _ in range(3000):
        cert_id = new_id()
        pos = rng.choice([i for i, c in enumerate(cert_id[:-1]) if i > 2 and c != "-"])
        texts += [
            cert_id, cert_id.lower(), f" {cert_id}", f"{cert_id}\n", cert_id + "-", "-" + cert_id,
            cert_id[:pos] + rng.choice(ALPHABET + "ILOUilou#ü٣") + cert_id[pos + 1:],  # a typo or junk
            cert_id[:pos] + cert_id[pos + 1] + cert_id[pos] + cert_id[pos + 2:],  # a swap (maybe of a dash)
            cert_id[:pos] + cert_id[pos + 1:], cert_id.replace("-", "", rng.randint(1, 5)),
            cert_id.replace("-", rng.choice(" _.\u2010\u2212")), cert_id[3:], cert_id.translate(full_width),
            cert_id.replace("1", "I").replace("0", "O"), f"https://academy.example/verify?id={cert_id}",
            cert_id[:-2] + ALPHABET[rng.randrange(32)] + ALPHABET[rng.randrange(32)],  # other check digits
            "DP-" + "-".join("".join(rng.choices(ALPHABET, k=4)) for _ in range(4)) + "-"
            + "".join(rng.choices(ALPHABET, k=2)),  # random body and check: a typo 1020 times in 1021
        ]
    for text in texts:
        assert _outcome(parse_id, text) == _outcome(ids._parse, text), text
