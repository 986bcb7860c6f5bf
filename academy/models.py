"""Database tables (sqlmodel). Schema changes go through Alembic migrations
in ``academy/migrations``; run ``alembic revision --autogenerate`` after editing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import JSON, CheckConstraint, Column, Index, UniqueConstraint, false, text
from sqlmodel import Field, SQLModel

# An exercise's source in bytes of UTF-8 at most (drafts and submissions alike):
# ample for any solution, small enough to keep in a row and a job.
EXERCISE_SOURCE_MAX = 64 * 1024


def utcnow() -> datetime:
    """Timezone-aware UTC now; sqlmodel stores datetimes as UTC."""
    return datetime.now(UTC)


class Learner(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    email: str = Field(index=True, unique=True, max_length=254)
    display_name: str = Field(default="", max_length=200)
    password_hash: str
    is_admin: bool = False
    language: str = Field(default="en", max_length=8)
    created_at: datetime = Field(default_factory=utcnow)


class LoginSession(SQLModel, table=True):
    """A "stay signed in" session; the browser keeps only a signed token id."""

    id: str = Field(primary_key=True, max_length=64)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    revoked_at: datetime | None = None


class SigninCounter(SQLModel, table=True):
    """Sign-in attempts in the current window for one key (an address, a client, or both).

    One row per key, bumped with a single ``UPDATE … RETURNING`` before the
    password is checked, so that concurrent attempts cannot all read the same
    count (review F-4). The window is fixed: it restarts on the first attempt
    after ``window_start`` + the configured length.
    """

    key: str = Field(primary_key=True, max_length=400)
    window_start: datetime = Field(default_factory=utcnow)
    count: int = 0


class AdminToken(SQLModel, table=True):
    """A one-time token, printed by ``python -m academy.admin admin-token``, that makes the
    signed-in learner who redeems it an administrator. Only its SHA-256 is stored."""

    id: str = Field(primary_key=True, max_length=64)  # hex SHA-256 of the token
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    used_at: datetime | None = None
    used_by: int | None = Field(default=None, foreign_key="learner.id")


class LessonProgress(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("learner_id", "section_id"),)

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    section_id: str = Field(max_length=64)
    completed_at: datetime = Field(default_factory=utcnow)


# A lab run's status (``LabRun.status``), the one definition pages and the queue read; a
# node's (``LabRunNode.status``) is one of the last four. Stored as plain text.
RunStatus = Literal["queued", "running", "done", "failed", "cancelled"]
ACTIVE: tuple[RunStatus, ...] = ("queued", "running")  # waiting for a worker, or on one
TERMINAL: tuple[RunStatus, ...] = ("done", "failed", "cancelled")  # ended: nothing changes it again


class LabRun(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    learner_id: int | None = Field(default=None, foreign_key="learner.id", index=True)
    lab: str = Field(max_length=32)
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    machine: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    status: str = Field(default="queued", max_length=16, index=True)  # a RunStatus
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    error: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # The job queue (academy/labruns/queue.py, migration 0004): which hardware queue
    # the run waits in, the worker that claimed it, the worker's heartbeat on
    # it (a run whose heartbeat stops is failed by the reaper), the newest
    # progress event, and the learner's cancel request the worker acts on.
    queue: str = Field(default="cpu", max_length=16, index=True,
                       sa_column_kwargs={"server_default": "cpu"})
    worker: str | None = Field(default=None, max_length=128)
    heartbeat_at: datetime | None = None
    progress: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    cancel_requested: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    # An exercise submission (lab "exercise", migration 0007): the learner's
    # code, kept with the run so that a worker on any machine can grade it.
    # Kept out of ``params``, which pages list and download; only the
    # learner's own page reads it back.
    source: str | None = Field(default=None, max_length=EXERCISE_SOURCE_MAX)
    # A guest's run (no learner, migration 0010): the client that asked for it
    # (``academy.accounts.client_key``), by which guests are counted for fair use
    # (review N-3). None for a learner's run.
    client: str | None = Field(default=None, max_length=64)


class LabRunNode(SQLModel, table=True):
    """One node of a lab run: the worker running it (``params["nodes"]`` of them; an
    ordinary run has one, node 0, taken with the run's claim).

    A row, not JSON on the run, because each node's worker writes its own
    heartbeat twice a second and must not overwrite its peers' (a JSON column
    is read, changed and written whole); and because the primary key makes
    taking a node one conditional INSERT, so a node never runs twice.
    """

    run_id: int = Field(foreign_key="labrun.id", primary_key=True)
    node: int = Field(primary_key=True)
    worker: str = Field(max_length=128)
    heartbeat_at: datetime = Field(default_factory=utcnow)
    status: str = Field(default="running", max_length=16)  # a RunStatus, never "queued"


class ExerciseDraft(SQLModel, table=True):
    """A learner's code for one exercise as last saved (Run or Save), and how many hints they opened.

    One row per learner and exercise, so that a refresh or another device
    brings back the same code.
    """

    __table_args__ = (UniqueConstraint("learner_id", "exercise"),)

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    exercise: str = Field(max_length=64)
    source: str = Field(default="", max_length=EXERCISE_SOURCE_MAX)
    hints_shown: int = 0
    updated_at: datetime = Field(default_factory=utcnow)


class ExercisePass(SQLModel, table=True):
    """The first graded run in which all of an exercise's hidden cases passed.

    Unique per learner and exercise in the database: two passing runs that
    finish at once record one pass. The certificate reads these.

    A pass that a newer grader no longer grants (``academy.regrade``, issue #35)
    is withdrawn, not deleted: ``withdrawn_at`` and the re-grading that withdrew
    it (``regrade_id``, which holds the reason). A withdrawn pass counts for
    nothing; the learner's next passing run makes it a pass again. The database
    keeps the two columns together (both set or neither).
    """

    __table_args__ = (
        UniqueConstraint("learner_id", "exercise"),
        CheckConstraint("(withdrawn_at IS NULL) = (regrade_id IS NULL)", name="ck_exercisepass_withdrawn"),
    )

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    exercise: str = Field(max_length=64)
    run_id: int = Field(foreign_key="labrun.id")
    passed_at: datetime = Field(default_factory=utcnow)
    withdrawn_at: datetime | None = None
    regrade_id: int | None = Field(default=None, foreign_key="exerciseregrade.id")


class ExerciseRegrade(SQLModel, table=True):
    """A stored passing submission graded again by a newer grader (``academy.regrade``).

    One row per run and grader (``labs.exercises.grader.fingerprint``: a hash of
    every file that decides a verdict): a re-grading done is never done again
    under the same grader, and one cut short (killed) left no row and is done
    on the next start. ``status`` is the new outcome beside the run's own (a
    passed report, ``LabRun.result``); ``reason`` the first thing that failed
    (a message key, its values and the case), which the learner's Exercises
    page and the admin's list render in their language.
    """

    __table_args__ = (UniqueConstraint("run_id", "grader"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="labrun.id", index=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    exercise: str = Field(max_length=64)
    grader: str = Field(max_length=64)
    status: str = Field(max_length=16)  # the new report's: "passed" | "failed" | "error"
    reason: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    regraded_at: datetime = Field(default_factory=utcnow)


class LabWorker(SQLModel, table=True):
    """A ``python -m academy.worker`` process, as it last reported itself.

    The page reads it for the expected wait (how many runs can start at once
    per queue); the heartbeat says whether the worker is still there.
    """

    name: str = Field(primary_key=True, max_length=128)
    host: str = Field(max_length=255)
    pid: int
    queues: str = Field(max_length=64)  # comma-separated: cpu,gpu
    slots: int  # runs it may have going at once, over all its queues
    devices: str = Field(default="", max_length=255)  # GPU device sets, e.g. "0,1;2,3"
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow)


_OPEN = "status = 'in_progress'"


class QuizAttempt(SQLModel, table=True):
    # At most one open graded and one open practice attempt per learner: two
    # tabs that start an attempt at once get the same one (quizzes.store).
    __table_args__ = (
        Index(
            "uq_quizattempt_one_open",
            "learner_id",
            "practice",
            unique=True,
            sqlite_where=text(_OPEN),
            postgresql_where=text(_OPEN),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    course_id: str = Field(default="data-parallelism", max_length=64)
    seed: int
    language: str = Field(default="en", max_length=8)
    # The drawn questions: ids, drawn parameter values and option order.
    plan: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON))
    practice: bool = False
    # in_progress | finished | abandoned (a duplicate open attempt closed by migration 0005)
    status: str = Field(default="in_progress", max_length=16, index=True)
    score: float | None = None
    passed: bool | None = None
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None


class QuizAnswer(SQLModel, table=True):
    # One answer per question of an attempt: a second submission of the same
    # question (another tab, a double click) is refused by the database.
    __table_args__ = (UniqueConstraint("attempt_id", "position"),)

    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int = Field(foreign_key="quizattempt.id", index=True)
    position: int
    question_id: str = Field(max_length=96)
    response: Any = Field(default=None, sa_column=Column(JSON))
    correct: bool
    credit: float = 0.0
    answered_at: datetime = Field(default_factory=utcnow)
    # Seconds from the question being shown to this answer, as the page measured
    # them (migration 0012); the review schedule rates a slow right answer Hard.
    seconds: float | None = None


class RunQuestion(SQLModel, table=True):
    """A question built from the figures of one of the learner's finished lab runs (``quizzes.own``).

    ``params`` holds the figures read from the run's stored report and the
    values drawn for the question, from which the answer and its distractors
    are computed; ``quizzes.own.audit`` derives them again from the run. One
    per run and template, in the database: two sessions that build the
    questions of a run at once make each one once.
    """

    __table_args__ = (UniqueConstraint("run_id", "template"),)

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    run_id: int = Field(foreign_key="labrun.id", index=True)
    lab: str = Field(max_length=32)
    template: str = Field(max_length=96)  # a template id of content/quiz-templates
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)


class ReviewCard(SQLModel, table=True):
    """One question in a learner's review queue and its FSRS state (``quizzes.review``).

    The question is a bank question (``question_id``) or a question built from
    a run (``run_question_id``), exactly one of them (a check constraint), and
    each is in the learner's queue once (unique constraints: two sessions that
    add it at once add one card). ``reps`` counts the reviews applied: an
    answer given to the card as it was shown is applied only while ``reps``
    is still what it was then, so the same card answered on two devices at
    once is scheduled once. A retired card (a run question whose template a
    newer run of the same lab asks again) stays, with its history, out of
    the queue.
    """

    __table_args__ = (
        UniqueConstraint("learner_id", "question_id"),
        UniqueConstraint("run_question_id"),
        CheckConstraint("(question_id IS NULL) <> (run_question_id IS NULL)", name="ck_reviewcard_one_question"),
        Index("ix_reviewcard_learner_due", "learner_id", "due"),
    )

    id: int | None = Field(default=None, primary_key=True)
    learner_id: int = Field(foreign_key="learner.id")  # indexed with due, below
    question_id: str | None = Field(default=None, max_length=96)
    run_question_id: int | None = Field(default=None, foreign_key="runquestion.id")
    # fsrs.Card's fields: state 1 learning, 2 review, 3 relearning; step within the
    # (re)learning steps; stability in days and difficulty 1..10 once reviewed.
    state: int = 1
    step: int | None = 0
    stability: float | None = None
    difficulty: float | None = None
    due: datetime = Field(default_factory=utcnow)
    last_review: datetime | None = None
    reps: int = 0
    retired: bool = False
    created_at: datetime = Field(default_factory=utcnow)


class ReviewLog(SQLModel, table=True):
    """Each review applied to a card: a quiz answer (``answer_id``, applied once:
    unique) or an answer on the Review page."""

    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="reviewcard.id", index=True)
    learner_id: int = Field(foreign_key="learner.id", index=True)
    answer_id: int | None = Field(default=None, foreign_key="quizanswer.id", unique=True)
    rating: int  # fsrs.Rating: 1 again, 2 hard, 3 good, 4 easy
    correct: bool
    seconds: float | None = None
    reviewed_at: datetime = Field(default_factory=utcnow)


# One active certificate per learner and course, enforced by the database, so
# that no race or forgotten check can mint a second one. Rows tied to nobody
# (learner_id NULL, the operator's CLI) are not limited: NULLs never collide.
_ONE_ACTIVE = "revoked_at IS NULL"


class Certificate(SQLModel, table=True):
    __table_args__ = (
        Index(
            "uq_certificate_one_active",
            "learner_id",
            "course_id",
            unique=True,
            sqlite_where=text(_ONE_ACTIVE),
            postgresql_where=text(_ONE_ACTIVE),
        ),
    )

    id: str = Field(primary_key=True, max_length=40)
    learner_id: int | None = Field(default=None, foreign_key="learner.id", index=True)
    attempt_id: int | None = Field(default=None, foreign_key="quizattempt.id")
    name: str = Field(max_length=400)
    course_id: str = Field(max_length=64)
    score: float
    language: str = Field(max_length=8)
    pass_date: str = Field(max_length=10)  # ISO date, part of the signed payload
    key_id: str = Field(max_length=32)
    payload: str  # canonical JSON that was signed
    signature: str  # base64url Ed25519 signature over payload
    # The server's HMAC-SHA256 of payload and signature (``signing.row_check``,
    # migration 0011): a look-up that finds it right needs no Ed25519 verify
    # (certificates/verify.py says why that is safe). None on rows issued before.
    check_mac: str | None = Field(default=None, max_length=64)
    # The same key's HMAC of the revocation state (revoked_at, revoked_reason, replaced_by,
    # show_replacement: ``signing.status_check``, migration 0013), written with every change of
    # it: a look-up that finds it wrong does not trust the row's status (review 2026-12-04 I-3).
    status_mac: str | None = Field(default=None, max_length=64)
    issued_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None
    revoked_reason: str | None = Field(default=None, max_length=500)
    replaced_by: str | None = Field(default=None, max_length=40)
    # The holder's choice when reissuing (issue #22, migration 0009): the old
    # certificate's public verification names ``replaced_by``.
    show_replacement: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    # Revoked for cause by an admin: no new certificate for this learner and
    # course until an admin lifts it (sets this back to False).
    disqualified: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    # Open Badges 3.0 form (certificates/openbadges.py): this certificate's bit in
    # the public status list, and the signed credential as JSON with a Data
    # Integrity proof and as a compact VC-JWT. Set once, on first need, never
    # changed: the salt of the hashed e-mail inside is random, so it is kept.
    status_index: int | None = Field(default=None, unique=True, index=True)
    credential_json: str | None = None
    credential_jwt: str | None = None


class CertificateEvent(SQLModel, table=True):
    """Audit log: who did what to a certificate, when and why."""

    id: int | None = Field(default=None, primary_key=True)
    certificate_id: str = Field(foreign_key="certificate.id", index=True, max_length=40)
    # issued | revoked | reissued | disqualified | lifted | superseded (migration 0002)
    action: str = Field(max_length=16)
    actor_id: int | None = Field(default=None, foreign_key="learner.id")
    reason: str | None = Field(default=None, max_length=500)
    at: datetime = Field(default_factory=utcnow)
