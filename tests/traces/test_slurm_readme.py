"""The README's Slurm block (import a site's history, describe it, compare policies on it, view) works pasted
whole, on a synthetic sacct dump of 300 jobs (``benchmarks/slurm_import.py``'s generator) in its place."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from slurm_import import synthetic_dump  # noqa: E402 - the benchmark's generator of sacct dumps


def test_the_slurm_block_works_pasted_whole(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("### A Slurm site"):], re.S).group(1)  # type: ignore[union-attr]
    assert "trace import slurm sacct-may.txt" in block and "tesserae view out/site/cmp" in block
    synthetic_dump(tmp_path / "sacct-may.txt", 300, seed=3)
    script = block.replace("tesserae view out/site/cmp", "test -s out/site/cmp/report.html")
    bin_dir = Path(sys.executable).parent
    r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "imported" in r.stdout and "times read in Europe/Berlin" in r.stdout
    assert "tiresias-las:tesserae+packing" in r.stdout and "failed / timed out / cancelled" in r.stdout
    assert (tmp_path / "out" / "site" / "cmp" / "compare.csv").exists()
