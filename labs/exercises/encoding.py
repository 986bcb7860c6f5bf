"""A submission is UTF-8, and says so or says nothing (review N-8: code shown is code run).

Python decodes a source file as its byte order mark or its PEP 263 coding
comment (``# -*- coding: NAME -*-`` in the first two lines) says; the
Exercises page, a reviewer and ``ast.parse`` of the text read the same
bytes as UTF-8. A file that declares another encoding (``utf-7``, say) can
show a harmless stub and run hidden code, so it is refused, before it is
stored (``academy.exercises.check_source``) and before it is graded
(``labs.exercises.grader.static_error``): one rule, in this one function.
"""

from __future__ import annotations

import codecs
import io
import tokenize

UTF8 = ("utf-8", "utf-8-sig")  # codec names: no declaration, a cookie naming UTF-8, a UTF-8 BOM
# UTF-32-LE's mark begins with UTF-16-LE's: the longer ones are tried first.
FOREIGN_MARKS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                 (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
NAME_MAX = 40  # of a declared name quoted back to the learner


def foreign_encoding(source: str | bytes) -> str | None:
    """The encoding ``source`` declares when it is not UTF-8, as the file names it; None when
    the file declares UTF-8 (``utf-8``, ``UTF8``, ``utf_8``, a UTF-8 BOM) or nothing.

    A ``str`` is checked as the UTF-8 bytes it is stored and run as. The cookie is found
    as Python finds it (``tokenize.detect_encoding``) and its name compared after
    ``codecs.lookup``, so an alias of UTF-8 is UTF-8; a name Python does not know, or a
    cookie that contradicts a UTF-8 BOM, is refused too (Python would not run the file).
    The lines are split as Python's compiler splits them: at LF, CRLF and a lone CR.
    ``detect_encoding`` splits at LF only, so ``\r# coding: utf-7\n`` was one blank-looking
    line to it and a cookie on the second line to Python (review 2026-12-04 L-1).
    """
    data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
    for mark, name in FOREIGN_MARKS:
        if data.startswith(mark):
            return name
    data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # the compiler's line ends
    read: list[bytes] = []  # the lines detect_encoding looked at (two at most)
    lines = io.BytesIO(data)

    def readline() -> bytes:
        read.append(lines.readline())
        return read[-1]

    try:
        found = tokenize.detect_encoding(readline)[0]
    except SyntaxError:  # an unknown codec, a cookie against the BOM, or a first line not UTF-8
        found = None
    try:
        if found is not None and codecs.lookup(found).name in UTF8:
            return None
    except LookupError:
        pass
    for line in read:
        match = tokenize.cookie_re.match(line.removeprefix(codecs.BOM_UTF8).decode("latin-1"))
        if match:
            return match.group(1)[:NAME_MAX]
    # No cookie in sight: either Python found one we did not (then refuse it by its name),
    # or the first line is not UTF-8, which declares nothing (check_source refuses it as not text).
    return found
