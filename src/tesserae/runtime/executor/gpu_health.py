"""GPU health from ``nvidia-smi``: a GPU with uncorrectable ECC errors, retired pages pending, a failed
row remap, or that the driver has lost is *unhealthy*, and the scheduler keeps new runs off it as
off a drained node (``controller.node_fences``); what runs there goes on until it ends.

The probe is one ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` every ``interval``
seconds, in a thread of its own (a wedged GPU can hang ``nvidia-smi`` for minutes: the controller
never waits on it). Its output is read as hostile text: bounded, and a line it cannot read makes no
GPU healthy or unhealthy. A GPU missing from the output (fallen off the bus) is unhealthy; so is
every GPU once ``nvidia-smi`` has failed ``FAILS_BEFORE_DOWN`` times in a row (the driver is gone),
while a single failure changes nothing. Drivers too old for ``remapped_rows.failure`` reject the
whole query: the probe then asks the fields every driver has. XID errors are not read: they are in
the kernel log, not in ``nvidia-smi``'s query fields.

Counters such as ECC errors since boot only clear with a GPU reset or a reboot, so an unhealthy
GPU stays so until then; the state is not stored (a restarted server probes again).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence

#: What the probe asks, in order; the last is not known to older drivers (``BASIC`` then).
FIELDS = ("index", "uuid", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
          "remapped_rows.failure")
BASIC = FIELDS[:4]
#: Seconds one probe may take before it counts as a failure.
PROBE_TIMEOUT = 10.0
#: Failed probes in a row after which every GPU is unhealthy.
FAILS_BEFORE_DOWN = 2
#: Most bytes of output read, and most GPUs (lines) taken from it.
MAX_OUTPUT = 1 << 16
MAX_GPUS = 256
#: Values that mean the driver cannot reach the GPU.
_LOST = ("gpu is lost", "unknown error", "err!", "gpu requires reset")
#: Values that mean the GPU does not report the field (no ECC, say): no verdict.
_UNKNOWN = ("[n/a]", "[not supported]", "n/a", "")


def verdict(values: dict[str, str]) -> str:
    """Why a GPU with these field values is unhealthy; '' when it is healthy."""
    for field, raw in values.items():
        value = raw.strip().lower()
        if any(lost in value for lost in _LOST):
            return f"{field}: {raw.strip()[:40]} (the driver has lost the GPU)"
    ecc = values.get("ecc.errors.uncorrected.volatile.total", "").strip()
    if ecc.isdigit() and int(ecc) > 0:
        return f"{int(ecc)} uncorrectable ECC error{'s' if int(ecc) > 1 else ''} since boot"
    for field, what in (("retired_pages.pending", "memory pages waiting to be retired (needs a reset)"),
                        ("remapped_rows.failure", "a memory row remap failed")):
        value = values.get(field, "").strip().lower()
        if value in ("yes", "1") or (value.isdigit() and int(value) > 0):
            return what
    return ""


def parse(text: str, fields: Sequence[str]) -> dict[str, str]:
    """Each GPU's verdict (``verdict``), by its index as text, from ``nvidia-smi``'s CSV; lines that do
    not have the fields asked for, or whose index is not a small number, are left out."""
    out: dict[str, str] = {}
    for line in text[:MAX_OUTPUT].splitlines()[:MAX_GPUS]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields) or not parts[0].isdigit() or len(parts[0]) > 4:
            continue
        out[parts[0]] = verdict(dict(zip(fields[2:], parts[2:], strict=True)))
    return out


def query(command: Sequence[str], timeout: float = PROBE_TIMEOUT) -> tuple[dict[str, str] | None, str]:
    """One probe: the verdicts by GPU index, or None and why it failed."""
    for fields in (FIELDS, BASIC):
        argv = [*command, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"{command[0]} did not run ({type(e).__name__}: {e})"[:200]
        text = done.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
        if done.returncode == 0:
            return parse(text, fields), ""
        said = (done.stderr or done.stdout)[:MAX_OUTPUT].decode("utf-8", "replace")
        if fields is FIELDS and "field" in said.lower():
            continue  # an older driver that does not know remapped_rows.failure: ask the basic fields
        first = next((line.strip() for line in said.splitlines() if line.strip()), "")
        return None, f"{command[0]} exited with {done.returncode}: {first}"[:200]
    return None, "no query worked"


class GpuHealth:
    """The latest verdict on each of this machine's GPUs (``devices``: their indices), kept by a probe
    thread; ``unhealthy`` is what the controller reads."""

    def __init__(self, command: Sequence[str], devices: Sequence[str], interval: float = 30.0,
                 log: Callable[[str], None] | None = None) -> None:
        self.command, self.devices, self.interval = list(command), list(devices), interval
        self.log = log or (lambda msg: None)
        self._lock = threading.Lock()
        self._bad: dict[str, str] = {}
        self._fails = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def probe_once(self) -> None:
        """Probe now and keep the verdicts; log each GPU whose health changed."""
        verdicts, error = query(self.command)
        with self._lock:
            if verdicts is None:
                self._fails += 1
                if self._fails < FAILS_BEFORE_DOWN:
                    return
                bad = {d: f"GPU health probe failing: {error}" for d in self.devices}
            else:
                self._fails = 0
                bad = {d: verdicts.get(d) or "" for d in self.devices}
                bad = {d: why if d in verdicts else "not seen by nvidia-smi (fallen off the bus?)"
                       for d, why in bad.items()}
                bad = {d: why for d, why in bad.items() if why}
            old, self._bad = self._bad, bad
        for d in sorted(set(old) | set(bad), key=lambda x: (len(x), x)):
            if old.get(d) != bad.get(d):
                self.log(f"GPU {d}: " + (f"unhealthy: {bad[d]}" if d in bad else "healthy again"))

    def unhealthy(self) -> dict[str, str]:
        """Device index -> why, for each GPU found unhealthy at the latest probe."""
        with self._lock:
            return dict(self._bad)

    def start(self) -> None:
        """Probe once now (the first decision already knows), then every ``interval`` in a thread."""
        self.probe_once()
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.probe_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_TIMEOUT + 1.0)
