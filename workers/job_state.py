"""JobState: the life of a search job, owned here and used by the store, the jobs, the API and the CLI.

    queued --worker picks it up--> running --> finished | failed | cancelled
    queued --DELETE /jobs/{id}--> cancelled
"""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    """A job's state, stored as its value in the job hash (``"queued"``, ...)."""

    queued = "queued"
    running = "running"
    finished = "finished"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def active(self) -> bool:
        """Whether the job may still measure (queued or running)."""
        return self in ACTIVE_STATES


ACTIVE_STATES = frozenset({JobState.queued, JobState.running})
ENDED_STATES = frozenset({JobState.finished, JobState.failed, JobState.cancelled})
