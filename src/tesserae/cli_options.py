"""Option parsing shared by the simulator's and the runtime's commands (one place, one message)."""

from __future__ import annotations

from tesserae.core.errors import InputError


def parse_queues(text: str | None) -> tuple[float, ...] | None:
    """``--queues 3250,7200``: positive, increasing Tiresias thresholds in GPU-seconds."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"'{text}' is not a comma-separated list of numbers", field="queues") from None
    if not values or any(v <= 0 for v in values) or list(values) != sorted(values):
        raise InputError(f"'{text}' must be positive, increasing thresholds", field="queues")
    return values
