"""Plan: what one scheduling decision changed, relative to the previous one."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one job runs until the next decision. ``partner`` is the row sharing these GPUs."""

    row: int
    gpus: tuple[int, ...]
    partner: int | None = None
    strategy: str | None = None


@dataclass(slots=True)
class Plan:
    """Every job that runs after the decision, and the changes against the previous decision."""

    time: float
    assignments: dict[int, Assignment]
    started: list[int] = field(default_factory=list)  # not running before, running now
    stopped: list[int] = field(default_factory=list)  # running before, not now (preempted)
    migrated: list[int] = field(default_factory=list)  # running before and now, on other GPUs
    pairs: list[tuple[int, int]] = field(default_factory=list)

    @staticmethod
    def diff(time: float, previous: dict[int, Assignment], assignments: dict[int, Assignment],
             pairs: list[tuple[int, int]] | None = None) -> Plan:
        started = [r for r in assignments if r not in previous]
        stopped = [r for r in previous if r not in assignments]
        # An Assignment kept from the previous decision is the same object: no tuple comparison.
        migrated = [r for r, a in assignments.items()
                    if (b := previous.get(r)) is not None and b is not a and b.gpus != a.gpus]
        return Plan(time, assignments, sorted(started), sorted(stopped), sorted(migrated), pairs or [])
