"""Run one golden workload and print its summary and the CPU kernels this process used, as JSON.

    python tests/golden_run.py LABEL NO_BACKFILL(0|1)

``test_golden_kernels.py`` starts this in a fresh process under other kernel settings (they are
read when NumPy and OpenBLAS load, so they cannot change inside a running interpreter).
"""

from __future__ import annotations

import json
import sys

from threadpoolctl import threadpool_info

from test_golden import golden_summary


def simd_found() -> list[str]:
    """NumPy's dispatched SIMD targets that this process may use (after NPY_DISABLE_CPU_FEATURES)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__  # type: ignore[no-redef]
    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


def main() -> int:
    label, no_backfill = sys.argv[1], sys.argv[2] == "1"
    s = golden_summary(label, no_backfill)
    blas = [{k: lib.get(k) for k in ("internal_api", "prefix", "architecture", "num_threads")}
            for lib in threadpool_info() if lib.get("user_api") == "blas"]
    print(json.dumps({"summary": {k: s[k] for k in ("completed", "avg_jct", "makespan", "preemptions", "migrations")},
                      "simd": simd_found(), "blas": blas}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
