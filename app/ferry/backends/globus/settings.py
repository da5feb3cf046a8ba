"""What the environment says about Globus, read once and passed in (tests pass values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GlobusSettings:
    poll: float = 2.0  # FERRY_GLOBUS_POLL: seconds between task status calls
    use_gcp: bool = True  # FERRY_GLOBUS_NO_GCP set: never route through Globus Connect Personal
    gcp_config_dir: str | None = None  # FERRY_GCP_CONFIG_DIR: where Globus Connect Personal keeps its id

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GlobusSettings:
        try:
            poll = max(0.01, float(env.get("FERRY_GLOBUS_POLL", "2")))
        except ValueError:
            poll = 2.0
        return cls(
            poll=poll,
            use_gcp=not env.get("FERRY_GLOBUS_NO_GCP"),
            gcp_config_dir=env.get("FERRY_GCP_CONFIG_DIR") or None,
        )
