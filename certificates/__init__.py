"""Signed PDF certificates with a typo-checked ID, a QR code, public
verification (online and offline), revocation and reissue.

    python -m certificates issue --name "Zoë Ødegård" --score 92 --lang en --out zoe.pdf
    python -m certificates verify zoe.pdf          # offline signature check
    python -m certificates verify --id DP-...      # database, sees revocation

The signed data is the authority. A learner holds one active certificate per
course (a unique partial index; a new name is a ``reissue``); an admin's
revocation for cause (``revoke(disqualify=True)``) blocks a new one until
``lift_disqualification``. An uploaded PDF is never parsed in the caller's
process: ``pdfscan`` caps its size, requires one page and reads it in a
resource-limited child; ``verify_pdf`` checks the signature offline and
``check_pdf`` adds the database (revoked, replaced). No printed text is
compared; the signed name and ID are shown for a person to compare.

Pages call the functions re-exported here; nothing in this package imports
Streamlit. It sits above ``academy`` (tables, settings, the language list) and
beside ``quizzes``, whose ``store.passed_attempt`` decides what a passed quiz is.
Who may claim a certificate is one function, ``eligibility`` (in
``certificates.eligibility``): the store's issue path refuses what it refuses,
and the Home and Certificate pages show what it answers.
"""

from certificates.eligibility import Eligibility, eligibility, eligible_attempt, is_disqualified
from certificates.errors import (
    AlreadyCertified,
    AlreadyRevoked,
    CertificateError,
    CertificateNotFound,
    Disqualified,
    ExercisesMissing,
    InvalidInput,
    NotAllowed,
    NotDisqualified,
    NotEligible,
    TooManyReissues,
    Unchanged,
)
from certificates.i18n import format_date, format_score, languages, texts
from certificates.ids import IdTypo, InvalidId, MalformedId, new_id, parse_id
from certificates.keys import (
    PublicKeyInfo,
    active_key,
    export_public_keys_json,
    public_key_info,
    rotate_key,
)
from certificates.names import MARKS_MAX, InvalidName, char_names, clean_name, refusal_message
from certificates.openbadges import ensure_credential, linkedin_url
from certificates.store import (
    REISSUES_PER_DAY,
    certificates_of,
    disqualified_certificates,
    events_of,
    get_certificate,
    issue_certificate,
    issue_for_learner,
    lift_disqualification,
    pdf_filename,
    reissue,
    render_pdf,
    revoke,
    stated_exercises,
    verify_link,
)
from certificates.verify import STATUSES, VerifyResult, check_pdf, lookup, row_status, verify_pdf

__all__ = [
    "MARKS_MAX",
    "REISSUES_PER_DAY",
    "STATUSES",
    "AlreadyCertified",
    "AlreadyRevoked",
    "CertificateError",
    "CertificateNotFound",
    "Disqualified",
    "Eligibility",
    "ExercisesMissing",
    "IdTypo",
    "InvalidId",
    "InvalidInput",
    "InvalidName",
    "MalformedId",
    "NotAllowed",
    "NotDisqualified",
    "NotEligible",
    "TooManyReissues",
    "Unchanged",
    "PublicKeyInfo",
    "VerifyResult",
    "active_key",
    "certificates_of",
    "stated_exercises",
    "char_names",
    "check_pdf",
    "clean_name",
    "disqualified_certificates",
    "eligibility",
    "eligible_attempt",
    "events_of",
    "export_public_keys_json",
    "format_date",
    "format_score",
    "get_certificate",
    "is_disqualified",
    "issue_certificate",
    "issue_for_learner",
    "languages",
    "lift_disqualification",
    "lookup",
    "new_id",
    "parse_id",
    "pdf_filename",
    "public_key_info",
    "reissue",
    "render_pdf",
    "revoke",
    "ensure_credential",
    "linkedin_url",
    "refusal_message",
    "rotate_key",
    "row_status",
    "texts",
    "verify_link",
    "verify_pdf",
]
