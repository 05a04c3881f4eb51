"""Shared by the profiling benchmarks: reading a pyinstrument frame tree without a viewer.

``top_frames`` ranks the functions by self and by inclusive time; ``step_times`` splits a tree's
time among named steps, each sample going to the innermost step on its stack (so nested steps,
e.g. the type choice inside packing, are not counted twice and the steps add up to the total).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

#: A step: its label and the frames that open it, as (function name, file basename or None for any file).
Step = tuple[str, Sequence[tuple[str, str | None]]]


def _name(frame: Any) -> str:
    return f"{frame.function} ({os.path.basename(frame.file_path or '?')}:{frame.line_no})"


def _synthetic(frame: Any) -> bool:
    """pyinstrument's own frames ([self], [await], ...): their time is in the parent's self time."""
    return frame.function.startswith("[")


def top_frames(root: Any, top: int) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """(self seconds, frame) and (inclusive seconds, frame) of the ``top`` costliest functions."""
    self_t: dict[str, float] = {}
    total_t: dict[str, float] = {}

    def walk(frame: Any, seen: frozenset[str]) -> None:
        if _synthetic(frame):
            return
        name = _name(frame)
        self_t[name] = self_t.get(name, 0.0) + frame.total_self_time
        if name not in seen:  # recursion: count a frame's total once per stack
            total_t[name] = total_t.get(name, 0.0) + frame.time
        for child in frame.children:
            walk(child, seen | {name})

    walk(root, frozenset())
    by_self = sorted(((s, n) for n, s in self_t.items()), reverse=True)[:top]
    by_total = sorted(((s, n) for n, s in total_t.items()), reverse=True)[:top]
    return by_self, by_total


def print_top_frames(root: Any, top: int) -> None:
    by_self, by_total = top_frames(root, top)
    print(f"\nsampled {root.time:.2f} s; by self time:")
    for sec, name in by_self:
        print(f"  {sec:8.3f} s  {100 * sec / root.time:5.1f}%  {name}")
    print("by total time (inclusive):")
    for sec, name in by_total:
        print(f"  {sec:8.3f} s  {100 * sec / root.time:5.1f}%  {name}")


def step_times(root: Any, steps: Sequence[Step], other: str = "other") -> dict[str, float]:
    """Sampled seconds of each step (innermost step on the stack wins), the rest under ``other``."""
    out = {label: 0.0 for label, _ in steps}
    out[other] = 0.0
    opens = {}
    for label, frames in steps:
        for function, file in frames:
            opens[(function, file)] = label

    def step_of(frame: Any) -> str | None:
        base = os.path.basename(frame.file_path or "")
        return opens.get((frame.function, base)) or opens.get((frame.function, None))

    def walk(frame: Any, current: str) -> None:
        if _synthetic(frame):
            return
        current = step_of(frame) or current
        out[current] += frame.total_self_time
        for child in frame.children:
            walk(child, current)

    walk(root, other)
    return out
