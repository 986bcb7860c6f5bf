"""The one convention for errors a learner can see (issue #14).

A ``UserError`` carries a catalog key and the values its text needs, never
prose: the page turns it into the learner's language with ``app.ui.error_text``
and nothing else, so no English sentence from a lower layer ends up inside a
translated page. Every key lives in the UI catalog, ``content/i18n/<lang>.yaml``:
that is the catalog pages translate with, the one ``tests/test_i18n.py`` checks
language by language, and the one with plural forms and local number marks.
(``content/certificates`` stays the certificate's own text, ``content/quizzes``
the quiz engine's feedback; neither holds an error a page shows.)

``str(err)`` is the English text, for logs and the operators' CLIs.

Errors only a developer meets (``academy.content.ContentError``,
``quizzes.formula.ExpressionError``) stay plain exceptions, and so do errors
that a lower layer turns into a result before a page sees them:
``labs.params.ParamError`` becomes a ``LabRequestError`` (``labs`` sits beside
``academy`` and must not import it back), and ``certificates``' SignatureError,
CredentialError and StatusListError become a Verify status (``VerifyResult.status``,
whose texts are the certificate's own, in ``content/certificates``).
"""

from __future__ import annotations

from typing import Any

from academy import i18n
from academy.content import DEFAULT_LANG


class UserError(Exception):
    """An error whose text a learner may read: ``key`` in the UI catalog, and ``values``.

    A subclass names its usual ``key`` as a class attribute, so a raise site
    needs no key at all; one that can say several things passes its own.
    """

    key: str = "common.error"
    #: names of ``values`` a person typed: a page shows them verbatim (``app.ui.error_text``),
    #: never as Markdown.
    typed: tuple[str, ...] = ()

    def __init__(self, key: str | None = None, /, **values: Any) -> None:
        if key is not None:
            self.key = key
        self.values = values
        super().__init__(self.key)

    def text(self, lang: str, **shown: Any) -> str:
        """The message in ``lang``, with ``shown`` in place of the same values (a page's
        verbatim form of what was typed); a subclass whose values need translating overrides it."""
        return i18n.t(self.key, lang, **{**self.values, **shown})

    def __str__(self) -> str:
        """English, with the values the sentence leaves out (``field='score'``),
        which an operator reading a log or the CLI still wants."""
        template = i18n.catalog(DEFAULT_LANG).get(self.key, self.key)
        said = " ".join(template.values()) if isinstance(template, dict) else template
        extra = ", ".join(f"{k}={v!r}" for k, v in self.values.items() if "{" + k not in said)
        return f"{self.text(DEFAULT_LANG)} ({extra})" if extra else self.text(DEFAULT_LANG)
