"""The catalogue's networks and the worker's protocol, in this process (tiny sizes, CPU)."""

from __future__ import annotations

import multiprocessing

import pytest

try:
    import torch
except ImportError as exc:  # not installed, or installed but broken
    pytest.skip(f"PyTorch cannot be imported ({exc}); the profiler needs it: pip install 'tesserae[profiler]'",
                allow_module_level=True)

from tesserae.profiler.catalogue import MODEL_NAMES
from tesserae.profiler.models import TrainStep, build
from tesserae.profiler.worker import Channel, Worker, injected_oom, is_oom, probe


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_trains_one_step(name: str) -> None:
    job = build(name, "tiny")
    before = {n: p.detach().clone() for n, p in enumerate(_params(job))}
    job.step()
    job.step()
    changed = sum(not torch.equal(before[n], p) for n, p in enumerate(_params(job)))
    assert changed > 0, "the optimizer step changed no parameter"
    assert job.parameters > 0 and 0.0 < job.skew <= 1.0 and job.batch >= 1


def _params(job: TrainStep) -> list:
    return [p for m in job.modules for p in m.parameters()]


def test_full_sizes_have_the_published_parameter_counts() -> None:
    # Built on the meta device: no memory, no time.
    with torch.device("meta"):
        counts = {name: build(name, "full", device="meta").parameters for name in ("resnet18", "resnet50", "vgg19")}
    assert counts["resnet18"] == pytest.approx(11.69e6, rel=0.01)
    assert counts["resnet50"] == pytest.approx(25.56e6, rel=0.01)
    assert counts["vgg19"] == pytest.approx(143.67e6, rel=0.01)


def test_is_oom_and_injection() -> None:
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"))
    assert is_oom(MemoryError())
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_oom(ValueError("out of memory"))
    assert injected_oom("dcgan", shared=True, env="dcgan,vgg19:always")
    assert not injected_oom("dcgan", shared=False, env="dcgan,vgg19:always")
    assert injected_oom("vgg19", shared=False, env="dcgan,vgg19:always")
    assert not injected_oom("resnet18", shared=True, env="")


def _run_worker(spec: dict, commands: list[str]) -> tuple[int, list[dict]]:
    mine, theirs = multiprocessing.Pipe()
    for word in commands:
        mine.send(word)
    try:
        code = Worker(spec, Channel(theirs)).run()
        events = []
        while mine.poll():
            events.append(mine.recv())
    finally:
        mine.close()
        theirs.close()
    return code, events


SPEC = {"model": "recommendation", "size": "tiny", "device": "cpu", "seconds": 0.05, "warmup": 0.01,
        "threads": 1, "timeout": 30}


def test_worker_protocol_in_process() -> None:
    code, events = _run_worker(SPEC, ["go", "stop"])
    assert code == 0
    assert [e["event"] for e in events] == ["ready", "window", "result"]
    window, result = events[1], events[2]
    assert window["iterations"] >= 1 and window["seconds"] >= 0.05
    assert window["throughput"] == pytest.approx(window["iterations"] / window["seconds"])
    assert result["parameters"] > 0 and result["peak_memory_bytes"] >= 0


def test_worker_stopped_before_go_sends_no_window() -> None:
    code, events = _run_worker(SPEC, ["stop"])
    assert code == 0 and [e["event"] for e in events] == ["ready"]


def test_worker_reports_oom_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERAE_PROFILER_INJECT_OOM", "recommendation")
    code, events = _run_worker({**SPEC, "shared": True}, ["go", "stop"])
    assert code == 0 and [e["event"] for e in events] == ["oom"]
    assert "out of memory" in events[0]["message"]
    code, events = _run_worker({**SPEC, "size": "enormous"}, ["go", "stop"])
    assert code == 1 and events[0]["event"] == "error" and "enormous" in events[0]["message"]


def test_probe_describes_this_interpreter() -> None:
    info = probe()
    assert info["torch_version"] == torch.__version__
    assert info["cores"] and info["cpu_name"]
    assert info["gloo"] is True
