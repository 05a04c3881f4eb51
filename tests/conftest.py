"""Shared fixtures (the reference data folder beside the checkout) and the markers every test gets
by where it lives: ``ray`` (tests/ray/), ``browser`` (a real browser on the dashboard), ``server``
(a real ``tesserae server``, Slurm daemons: tests/runtime/, tests/slurm/, tests/web/), else
``unit``; a module of units under those folders says so in its name (``*_units.py``,
``test_store_queries.py``). ``make test-fast`` runs ``unit and not slow``.

Property tests draw their examples from a seed fixed per test (``derandomize``), so ``make test``
gives the same verdict on every run and CI judges what ran here; ``TESSERAE_HYPOTHESIS=explore``
draws fresh examples each run, to look for new counterexamples (keep what one finds as an
``@example``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("TESSERAE_HYPOTHESIS", "repeatable"))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TESTS = Path(__file__).resolve().parent
#: Folders whose tests run a real server (or real daemons), and the marker of each.
BY_FOLDER = {"ray": "ray", "runtime": "server", "slurm": "server", "web": "server"}
#: Modules whose tests need a browser, and modules of unit tests inside those folders.
BROWSER = {"test_browser.py"}
UNITS = {"test_store_queries.py"}
KINDS = ("unit", "server", "ray", "browser")


def kind_of(path: Path) -> str:
    """The marker of a test module by where it lives (see the module docstring)."""
    if path.name in BROWSER:
        return "browser"
    if path.name in UNITS or path.stem.endswith("_units"):
        return "unit"
    parts = path.resolve().relative_to(TESTS).parts
    return BY_FOLDER.get(parts[0], "unit") if len(parts) > 1 else "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(k) for k in KINDS):
            item.add_marker(kind_of(item.path))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data folder {SHARED_DATA} is missing (it lies beside the checkout in CI)")
    return SHARED_DATA
