"""``Copies`` (every launcher's supervision of a job's processes): the code it records is the copies' own.

The case that made a cancelled Slurm job *completed* (in CI, and on the first try here under load): Slurm's
``scancel --batch --signal=TERM`` signals the job's processes as well as the launcher, so a copy can be
dead before the launcher forwards the stop; ``Popen.send_signal`` polls first and reaps it, and
``waitpid(-1)`` never saw it. The launcher recorded exit code 0. Here the copy's death is made
certain before the stop is forwarded (``waitid`` with ``WNOWAIT`` leaves it a zombie), both with the
launchers' polling wait (Slurm, Ray) and the blocking one (local).
"""

from __future__ import annotations

import os
import signal

import pytest

from tesserae.runtime.launch.supervise import Copies


def _started(*commands: str) -> Copies:
    copies = Copies()
    for command in commands:
        copies.start(["/bin/sh", "-c", command], [dict(os.environ)])
    return copies


def _until_dead(pid: int) -> None:
    """Block until ``pid`` has exited, leaving it unreaped (a zombie)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


@pytest.mark.parametrize("polling", [True, False], ids=["polling-wait", "blocking-wait"])
@pytest.mark.parametrize(("command", "code"), [("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM)])
def test_a_copy_reaped_by_a_forwarded_stop_keeps_its_code(polling: bool, command: str, code: int) -> None:
    copies = _started(command)
    pid = next(iter(copies.children))
    _until_dead(pid)
    copies.forward(signal.SIGTERM)  # what the SIGTERM handler does: Popen polls, and reaps the dead copy
    assert copies.children[pid].returncode == code  # (the premise: Popen reaped it)
    assert copies.wait((lambda now: None) if polling else None) == code
    assert not copies.children


def test_the_first_failure_is_the_code_when_popen_reaped_one_copy_and_the_others_end_later() -> None:
    copies = _started("exit 5", "sleep 30")
    dead, alive = list(copies.children)
    _until_dead(dead)
    copies.forward(signal.SIGTERM)  # reaps the dead copy, SIGTERMs the live one
    assert copies.wait(lambda now: None) == 5
    assert not copies.children
    with pytest.raises(ProcessLookupError):
        os.kill(alive, 0)


def test_every_copy_ending_normally_is_code_zero() -> None:
    copies = _started("exit 0", "true")
    assert copies.wait() == 0 and not copies.children
