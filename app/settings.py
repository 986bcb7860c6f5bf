"""One typed settings object for the whole platform.

Values come from the environment or a `.env` file in the working directory,
e.g. ``DATABASE_URL=postgresql+psycopg://user:pw@db/academy``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from labs.params import Limits

ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    database_url: str = f"sqlite:///{ROOT / 'data' / 'academy.db'}"
    # Base of the public verification links printed on certificates and QR codes.
    public_url: str = "http://localhost:8501"
    # Comma-separated e-mail addresses that are admins as soon as they sign up.
    admin_emails: str = ""
    # Where secrets live (session-signing key, certificate issuer keys).
    # Outside the repository in production; created with owner-only permissions.
    secrets_dir: Path = ROOT / "data" / "secrets"
    # How long a "stay signed in" token is valid.
    session_days: int = 14
    # Sign-in rate limit: at most this many failures per e-mail in the window.
    signin_max_failures: int = 5
    signin_window_s: int = 300
    # Labs: how many may run at once (0 = derived from the CPU count). The
    # limits of one run (wall clock, hang, ranks, message size) read the
    # LAB_* variables that `python -m labs` reads too; their defaults are
    # labs.params.Limits', so the number is written once.
    lab_max_concurrent: int = 0
    lab_timeout_s: int = Limits.timeout_s
    lab_hang_timeout_s: int = Limits.hang_timeout_s
    lab_max_world_size: int = Limits.max_world_size
    lab_max_bytes: int = Limits.max_bytes
    # Fair queueing: labs one learner (or one guest's browser session) may have
    # queued or running at once, and labs queued or running in all.
    lab_max_per_learner: int = 2
    lab_max_queued: int = 20
    # Quiz: questions per attempt and the pass mark in percent.
    quiz_questions: int = 12
    quiz_pass_percent: int = 80

    course_id: str = "data-parallelism"
    issuer: str = Field(default="Data Parallelism Academy")

    @property
    def admin_email_set(self) -> set[str]:
        return {e.strip().lower() for e in self.admin_emails.split(",") if e.strip()}

    @property
    def lab_limits(self) -> Limits:
        return Limits(max_world_size=self.lab_max_world_size, max_bytes=self.lab_max_bytes,
                      timeout_s=self.lab_timeout_s, hang_timeout_s=self.lab_hang_timeout_s)

    @property
    def lab_concurrency(self) -> int:
        if self.lab_max_concurrent > 0:
            return self.lab_max_concurrent
        # A lab spawns several busy processes; one at a time per two cores.
        return max(1, (os.cpu_count() or 1) // 2)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
