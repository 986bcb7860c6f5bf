"""The certificate store's refusals: each names its text in the UI catalog
(``academy.errors``), so a page shows it in the learner's language and the
CLI prints its English ``str()``.

``InvalidName``, the refusal of a name, lives with the name rules in
``certificates.names``.
"""

from __future__ import annotations

from academy.errors import UserError


class CertificateError(UserError):
    """Base of the errors below: each names its text in the UI catalog
    (``academy.errors``); ``str()`` is English, for the CLI."""

    key = "common.error"


class NotEligible(CertificateError):
    """No passed, finished, non-practice attempt to certify."""

    key = "certificate.err_not_eligible"


class ExercisesMissing(NotEligible):
    """The quiz is passed but required exercises are not (``missing``: their ids, in course order)."""

    key = "certificate.err_exercises"

    def __init__(self, missing: list[str]):
        super().__init__(count=len(missing), exercises=", ".join(missing))
        self.missing = missing


class CertificateNotFound(CertificateError):
    key = "admin_certs.not_found"


class AlreadyRevoked(CertificateError):
    key = "admin_certs.already"


class NotAllowed(CertificateError):
    """The actor may not do this (not an admin; not the certificate's owner)."""

    key = "certificate.err_not_allowed"


class AlreadyCertified(CertificateError):
    """The learner already holds an active certificate for the course, with
    another name or language: ``reissue`` it instead."""

    key = "certificate.already"

    def __init__(self, certificate_id: str):
        super().__init__(id=certificate_id)
        self.certificate_id = certificate_id


class Disqualified(CertificateError):
    """An admin revoked this learner's certificate for cause; no new one
    until an admin lifts it."""

    key = "certificate.disqualified"


class NotDisqualified(CertificateError):
    """Lifting a disqualification that is not there."""

    key = "admin_certs.not_blocked"


class Unchanged(CertificateError):
    """A reissue with the same name and language: nothing to make."""

    key = "certificate.unchanged"


class TooManyReissues(CertificateError):
    """More reissues in a day than ``store.REISSUES_PER_DAY`` (``count``)."""

    key = "certificate.too_many_reissues"


class AddressUnreachable(CertificateError):
    """The public address a certificate would sign (``certificates.address.public_url``) does
    not answer as this academy (``certificates.addresscheck``): ``url``, and ``reason`` and
    ``detail`` for the operator. Nothing is issued; the learner's results are untouched."""

    key = "certificate.err_address"

    def __init__(self, *, url: str, reason: str, detail: str):
        super().__init__(url=url, reason=reason, detail=detail)
        self.url, self.reason, self.detail = url, reason, detail


class InvalidInput(CertificateError, ValueError):
    key = "certificate.err_invalid"

