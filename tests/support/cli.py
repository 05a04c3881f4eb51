"""The ``tesserae`` command in tests: run in this process (real HTTP to a real server, no interpreter
start-up), and the check that a user's mistake gives one line and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_here(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess[str]:
    """The same ``main()`` in this process (no interpreter start-up): still real HTTP to a real server."""
    from tesserae.cli import main

    for key in [k for k in os.environ if k.startswith("TESSERAE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("TESSERAE_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["tesserae", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main()
    out = capsys.readouterr()
    code = exit_info.value.code
    return subprocess.CompletedProcess(args, 0 if code is None else int(code), out.out, out.err)


def one_line_error(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ")
    return lines[0]
