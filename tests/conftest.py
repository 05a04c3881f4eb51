"""Shared fixtures: the reference data folder beside the checkout, and small helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data folder {SHARED_DATA} is missing (it lies beside the checkout in CI)")
    return SHARED_DATA
