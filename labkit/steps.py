"""The three steps of the incident workflow, in the only order they may be taken.

Kept apart from the coordinator so the store can name them in its schema without an
import cycle. Taught in 02_three_states.
"""

from __future__ import annotations

from enum import StrEnum


class Step(StrEnum):
    """Where a run is. Each value is exactly what the ``runs.step`` column stores."""

    NOT_INSPECTED = "not_inspected"
    EVIDENCE_RECORDED = "evidence_recorded"
    REPORT_COMPLETED = "report_completed"

    @property
    def rank(self) -> int:
        """Position in the workflow; a run's rank never decreases (invariant 4)."""
        return ORDER.index(self)

    @property
    def next(self) -> Step | None:
        """The only step a run may move to from this one; None at the end."""
        return ORDER[self.rank + 1] if self.rank + 1 < len(ORDER) else None

    def __str__(self) -> str:
        return self.value


ORDER: tuple[Step, ...] = (Step.NOT_INSPECTED, Step.EVIDENCE_RECORDED, Step.REPORT_COMPLETED)
