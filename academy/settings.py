"""One typed settings object for the whole platform.

Values come from the environment or a `.env` file in the working directory,
e.g. ``DATABASE_URL=postgresql+psycopg://user:pw@db/academy``. The labs'
part, the limits of one run (``LAB_TIMEOUT_S`` and the like), is
``labs.settings.Limits``, nested here as ``Settings.labs``: ``python -m labs``
reads the same class on its own (also under torchrun). The exercise sandbox's
part (``EXERCISE_SANDBOX``, ``EXERCISE_MEMORY_MB`` and the like) is
``labs.sandbox.limits.Limits``, nested as ``Settings.exercises``: the grader
reads the same class on its own.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from labs import content
from labs.sandbox import limits as sandbox_limits
from labs.settings import Limits

ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    database_url: str = f"sqlite:///{ROOT / 'data' / 'academy.db'}"
    # The public address of the academy, e.g. https://academy.example.org: the base of every
    # link a certificate signs (verification link, QR code, Open Badge ids, issuer did:web,
    # status list). Empty: the address the app serves on, from Streamlit's settings
    # (certificates.address; with a warning, as such an address is usually local).
    public_url: str = ""
    # Before a certificate is issued, ask the public address whether it answers as this academy
    # (certificates.addresscheck). Off only for a server that cannot reach its own public name.
    public_url_check: bool = True
    # Where secrets live (session-signing key, certificate issuer keys).
    # Outside the repository in production; created with owner-only permissions.
    secrets_dir: Path = ROOT / "data" / "secrets"
    # How long a "stay signed in" token is valid.
    session_days: int = 14
    # Sign-in limits per window (failures and attempts still being checked count):
    # per address from one client, per client over all addresses, and per address
    # from all clients together (a high backstop against many addresses guessing
    # one password: a lower one would let anyone lock the owner out, review F-15).
    signin_max_failures: int = 5
    signin_max_failures_client: int = 20
    signin_max_failures_address: int = 50
    signin_window_s: int = 300
    # Sign-ups per client and window (each costs an Argon2 hash and probes an address).
    signup_max_per_client: int = 10
    # Argon2id cost per hash: OWASP's recommended minimum for argon2id (19 MiB, two
    # passes, one lane), about 40 ms on one core of the 2-core server (`make bench`,
    # "Argon2id hash" row). A stored hash made with other values is rehashed at its next
    # sign-in (academy.accounts.sign_in).
    argon2_memory_kib: int = Field(default=19_456, ge=19_456)
    argon2_time_cost: int = Field(default=2, ge=2)
    argon2_parallelism: int = Field(default=1, ge=1)
    # Argon2id hashes at once (0 = one per CPU); the others wait their turn, first come
    # first served, at most ARGON2_WAIT_S seconds, then are told "busy".
    argon2_max_concurrent: int = 0
    argon2_wait_s: float = 15.0
    # Reverse proxies in front of the app that append the client to X-Forwarded-For.
    # 0: the client is the peer address of the websocket (no proxy; a proxy on
    # another machine then counts as one client for everybody, one on this machine
    # as no client: loopback turns the per-client limits off, academy.accounts.client_key).
    trusted_proxy_hops: int = 0
    # An IPv6 client is its network of this many leading bits, not its address: a host
    # routinely holds a whole /64 (a cloud VM, most home lines), and one address each
    # would make it 2^64 clients to the per-client limits (review 2026-12-04 M-1).
    # 128 keys each address apart; IPv4 clients are always their address.
    client_ipv6_prefix: int = Field(default=64, ge=1, le=128)
    # Labs: how many CPU labs one worker runs at once (0 = derived from the CPU count).
    lab_max_concurrent: int = 0
    # The limits of one run (wall clock, hang, ranks, message size): LAB_TIMEOUT_S,
    # LAB_HANG_TIMEOUT_S, LAB_MAX_WORLD_SIZE and LAB_MAX_BYTES, read by the labs'
    # own settings class, as `python -m labs` reads them.
    labs: Limits = Field(default_factory=Limits.from_env)
    # Fair queueing: labs one learner may have queued or running at once, and labs
    # queued or running in all. Guests are counted per client (academy.accounts.client_key;
    # per browser session where the client is unknown, i.e. loopback), and all guests
    # together may hold this share of lab_max_queued (rounded up; 0: no labs for
    # guests), so that the rest stays for signed-in learners (review N-3).
    lab_max_per_learner: int = 2
    lab_max_queued: int = 20
    lab_guest_share: float = Field(default=0.25, ge=0, le=1)
    # A run's stored report (LabRun.result, review N-6): at most this many bytes of
    # JSON (a larger one is stored as "report too large"), and full reports only for
    # the newest runs of each learner (a guest: client) and lab or exercise; older
    # ones keep their status and summary.
    lab_result_max_bytes: int = 64 * 1024
    lab_keep_full_results: int = 5
    # The lab job queue (academy/labruns/queue.py). Empty: huey's SQLite storage in
    # a file beside the database, for one machine with no extra server.
    # ``redis://host:6379/0``: Redis, for web servers and workers on several machines.
    lab_queue_url: str = ""
    # A worker writes a heartbeat on each run it has going about once a second;
    # a run whose heartbeat is older than this is failed (the worker died).
    lab_dead_after_s: int = 10
    # A run queued this long with no message left in its queue (Redis flushed,
    # a worker killed between taking the message and claiming the run) is sent again.
    lab_requeue_after_s: int = 30
    # Multi-node labs: the most nodes (workers, one torchrun each) a run may ask
    # for; 1 turns multi-node runs off. A run of N nodes also needs the torchrun
    # rendezvous endpoint (host:port) that every node's worker passes as
    # --rdzv-endpoint, and fails with kind ``nodes_missing`` when its nodes have
    # not all been taken by workers within ``lab_node_wait_s``.
    lab_max_nodes: int = 1
    lab_rendezvous_endpoint: str = ""
    lab_node_wait_s: int = 60
    # Warm lab processes per worker (PyTorch imported, academy.labruns.pool): a single-node
    # CPU lab starts in one without a fresh import; 0 turns them off. Fewer when memory is short.
    lab_warm_pool: int = Field(default=1, ge=0, le=8)
    # Warm graders per worker (academy.labruns.pool.GraderPool): a sandbox started ahead up to
    # the point where the exercise is chosen, so it grades any exercise; each grades one
    # submission and is then discarded; 0 turns them off. Fewer when memory is short.
    lab_warm_exercises: int = Field(default=1, ge=0, le=8)
    # Coding exercises (issue #16): how the worker runs learners' code (EXERCISE_SANDBOX:
    # "bwrap", or "none" for a single-user machine only) and the sandbox's limits
    # (EXERCISE_MEMORY_MB and the like), read by the sandbox's own settings class,
    # as the grader reads them; the worker hands the ones set to the grading command.
    exercises: sandbox_limits.Limits = Field(default_factory=sandbox_limits.Limits.from_env)
    # The certificate needs, besides the passed quiz, the exercises of
    # labs.exercises.REQUIRED_FOR_CERTIFICATE passed (and then says so).
    certificate_requires_exercises: bool = True
    # Quiz: questions per attempt and the pass mark in percent.
    quiz_questions: int = 12
    quiz_pass_percent: int = 80
    # The review queue (quizzes.review, issue #42). FSRS schedules each answered question
    # so that it is recalled with this probability when it comes back; an answer is
    # rated from its correctness and time: right within review_easy_s seconds Easy,
    # right after more than review_hard_s Hard, right in between Good, wrong Again.
    # A question that asks for a computation (a numeric one, one built from a run)
    # gets review_compute_factor times as long.
    review_retention: float = Field(default=0.9, gt=0.5, lt=1)
    review_easy_s: float = Field(default=15.0, gt=0)
    review_hard_s: float = Field(default=60.0, gt=0)
    review_compute_factor: float = Field(default=3.0, ge=1)

    course_id: str = "data-parallelism"
    issuer: str = Field(default="Data Parallelism Academy")
    # Course content (every learner-visible text per language); see labs/content.py (the loader).
    content_dir: Path = content.DEFAULT_ROOT

    @property
    def https(self) -> bool:
        """Served over HTTPS: the cookie gets ``Secure`` and the ``__Host-`` prefix, and HSTS is sent."""
        return self.public_url.lower().startswith("https://")

    @property
    def lab_max_guests(self) -> int:
        """Labs all guests together may have queued or running: ``lab_guest_share``
        of ``lab_max_queued``, rounded up (5 of 20 by default)."""
        return math.ceil(round(self.lab_max_queued * self.lab_guest_share, 6))

    @property
    def lab_concurrency(self) -> int:
        if self.lab_max_concurrent > 0:
            return self.lab_max_concurrent
        # A lab spawns several busy processes; one at a time per two cores.
        return max(1, (os.cpu_count() or 1) // 2)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
