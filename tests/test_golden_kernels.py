"""The pinned results of ``test_golden.py`` hold, with the same pins, under other CPU kernels.

A simulation's result may depend only on its inputs (issue 29): not on the SIMD code NumPy
dispatches to on this CPU, nor on the BLAS kernel OpenBLAS picks for it, nor on its thread count.
Each golden workload runs again in a fresh process (these settings are read when the libraries
load) with every SIMD target NumPy dispatches to on this CPU switched off (its baseline code only),
OpenBLAS forced onto another core type than this CPU's and onto one thread, and must give the
pinned values. The process reports what it ran on, so the test fails rather than passes vacuously
when a setting did not take.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info

from golden_run import simd_found
from test_golden import GOLDEN, check_pinned

HERE = Path(__file__).resolve().parent
#: OpenBLAS x86-64 core types to force instead of this CPU's, in order, with what each needs.
CORES = (("Haswell", ("AVX2", "FMA3")), ("Sandybridge", ("AVX",)), ("Nehalem", ("SSE42",)))


def _openblas() -> list[dict]:
    return [lib for lib in threadpool_info() if lib.get("internal_api") == "openblas"]


def other_core() -> str | None:
    """An OpenBLAS core type this CPU runs but does not pick by itself (None off x86-64 or OpenBLAS)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not _openblas():
        return None
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__  # type: ignore[no-redef]
    native = {str(lib.get("architecture", "")).lower() for lib in _openblas()}
    for core, needs in CORES:
        if core.lower() not in native and all(__cpu_features__.get(f) for f in needs):
            return core
    return None


def alternate_kernels() -> dict[str, str]:
    env = {"OPENBLAS_NUM_THREADS": "1", "NPY_DISABLE_CPU_FEATURES": " ".join(simd_found())}
    core = other_core()
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return env


ALTERNATE = alternate_kernels()


@pytest.mark.parametrize(("label", "no_backfill"), list(GOLDEN))
def test_pins_hold_under_other_kernels(label: str, no_backfill: bool) -> None:
    env = {**os.environ, **ALTERNATE}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, str(HERE / "golden_run.py"), label, "1" if no_backfill else "0"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The settings took: no dispatched SIMD target left, OpenBLAS on the forced core and one thread.
    assert out["simd"] == [], f"NPY_DISABLE_CPU_FEATURES={ALTERNATE['NPY_DISABLE_CPU_FEATURES']!r} left {out['simd']}"
    for lib in out["blas"]:
        if lib["internal_api"] == "openblas":
            assert lib["num_threads"] == 1, lib
            if "OPENBLAS_CORETYPE" in ALTERNATE:
                assert str(lib["architecture"]).lower() == ALTERNATE["OPENBLAS_CORETYPE"].lower(), lib
    check_pinned(label, no_backfill, out["summary"])
