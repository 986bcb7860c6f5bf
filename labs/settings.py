"""The labs' settings: the limits of one run, one pydantic-settings class.

`Limits` reads ``LAB_MAX_WORLD_SIZE``, ``LAB_MAX_BYTES``, ``LAB_TIMEOUT_S``
and ``LAB_HANG_TIMEOUT_S`` from the environment or a ``.env`` file in the
working directory. ``python -m labs`` (also as a rank under torchrun, where
nothing passes anything in) and ``labs.launch.run_lab`` read it afresh on
each run; the web app nests the same class as ``academy.settings.Settings.labs``,
so one ``LAB_MAX_WORLD_SIZE=4`` changes the Labs page, the queue's
validation and ``python -m labs`` together, and each default is written once,
here. The worker also hands its values to the CLI it starts in those
variables (`Limits.environ`), since the CLI's working directory need not hold
the app's ``.env``.

This module imports neither torch nor the app.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Limits(BaseSettings):
    """What one run may ask for."""

    model_config = SettingsConfigDict(env_prefix="LAB_", env_file=".env", extra="ignore", frozen=True)

    max_world_size: int = 8
    max_bytes: int = 256 << 20  # one message (per rank)
    timeout_s: int = 120  # the whole run, wall clock
    # A rank that reports no progress and uses no CPU this long counts as hung; a
    # 64 MiB step on a busy 2-core machine can take 10 s, so twice that.
    hang_timeout_s: int = 20

    @classmethod
    def from_env(cls) -> Limits:
        """The limits in force now: the environment and ``.env``, read afresh (never cached)."""
        return cls()

    def environ(self) -> dict[str, str]:
        """These limits as the environment variables they are read from."""
        prefix = self.model_config["env_prefix"]
        return {f"{prefix}{name.upper()}": str(value) for name, value in self.model_dump().items()}
