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
the app's ``.env``. The exercise sandbox's ``EXERCISE_*`` settings are a class
of the same kind (``labs.sandbox.limits.Limits``, ``Settings.exercises``);
both are read with `read`, whose error names the variable at fault.

This module imports neither torch nor the app.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

S = TypeVar("S", bound=BaseSettings)


class SettingError(ValueError):
    """A setting whose value cannot be used; the message names its variable."""


def read(cls: type[S], **overrides: object) -> S:
    """``cls`` from the environment and ``.env`` (read afresh), ``overrides`` winning;
    a bad value raises `SettingError` naming the variable, e.g. ``EXERCISE_WALL_S='soon'``."""
    try:
        return cls(**overrides)
    except ValidationError as err:
        prefix = cls.model_config.get("env_prefix", "")
        raise SettingError("; ".join(
            f"{prefix}{'_'.join(str(part) for part in e['loc']).upper()}={e['input']!r}: {e['msg']}"
            for e in err.errors())) from None


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
        return read(cls)

    def environ(self) -> dict[str, str]:
        """These limits as the environment variables they are read from."""
        prefix = self.model_config["env_prefix"]
        return {f"{prefix}{name.upper()}": str(value) for name, value in self.model_dump().items()}
