"""The catalogue, option parsing and the profile document: no PyTorch needed."""

from __future__ import annotations

import pytest

from tesserae.core.errors import InputError
from tesserae.profiler.catalogue import CATALOGUE, MODEL_NAMES, SIZES, parse_gpu_counts, parse_models
from tesserae.profiler.document import profile_document
from tesserae.profiler.runner import (
    Device,
    JobOutcome,
    Measurement,
    ProfileConfig,
    ProfileResult,
    check_config,
    detect_device,
    plan,
    resolve_size,
)
from tesserae.profiles.tesserae_profile import tesserae_profile_from_document

CPU_INFO = {"cpu_name": "Test CPU", "cores": [0, 1, 2, 3], "torch_version": "2.13.0+cpu", "cuda_count": 0,
            "cuda_names": [], "driver": "n/a"}


def test_catalogue_has_the_issue_models_in_every_size() -> None:
    assert set(MODEL_NAMES) >= {"resnet18", "resnet50", "vgg19", "gpt-small", "bert-base", "dcgan",
                                "recommendation"}
    for entry in CATALOGUE.values():
        assert set(entry.sizes) == set(SIZES), entry.name
        assert all(s["batch"] >= 1 for s in entry.sizes.values())


def test_parse_models() -> None:
    assert parse_models(None) == list(MODEL_NAMES)
    assert parse_models("all") == list(MODEL_NAMES)
    assert parse_models(" ResNet18 , gpt-small,") == ["resnet18", "gpt-small"]
    with pytest.raises(InputError, match="unknown model 'alexnet'; known models: resnet18"):
        parse_models("resnet18,alexnet")
    with pytest.raises(InputError, match="listed twice"):
        parse_models("dcgan,dcgan")
    with pytest.raises(InputError, match="no model"):
        parse_models(" , ")


def test_parse_gpu_counts() -> None:
    assert parse_gpu_counts("2,1,2") == [1, 2]
    for bad in ("two", "0", ","):
        with pytest.raises(InputError):
            parse_gpu_counts(bad)


def test_plan_solo_then_pairs_with_self_pairs() -> None:
    runs = plan(ProfileConfig(models=["a", "b"], gpu_counts=[1, 2], pairs=True))
    assert [(m.models, m.num_gpus) for m in runs] == [
        (("a",), 1), (("b",), 1), (("a",), 2), (("b",), 2),
        (("a", "a"), 1), (("a", "b"), 1), (("b", "b"), 1), (("a", "a"), 2), (("a", "b"), 2), (("b", "b"), 2)]
    assert len(plan(ProfileConfig(models=["a", "b"]))) == 2


def test_detect_device_cpu_and_cuda() -> None:
    cfg = ProfileConfig(models=["resnet18"], cpu_threads=2)
    cpu = detect_device(cfg, CPU_INFO)
    assert (cpu.kind, cpu.name, cpu.gpu_type, cpu.count) == ("cpu", "Test CPU", "cpu", 2)
    assert cpu.core_slice(1) == [2, 3]
    assert resolve_size(cfg, cpu) == "small"
    info = {**CPU_INFO, "cuda_count": 2, "cuda_names": ["NVIDIA H100 80GB HBM3"] * 2, "driver": "550.54.15"}
    gpu = detect_device(ProfileConfig(models=["resnet18"]), info)
    assert (gpu.kind, gpu.gpu_type, gpu.count, gpu.driver) == ("cuda", "h100", 2, "550.54.15")
    assert gpu.sharing in ("mps", "time-slicing")
    assert resolve_size(ProfileConfig(models=["x"]), gpu) == "full"
    assert detect_device(ProfileConfig(models=["x"], device="cpu"), info).kind == "cpu"
    assert detect_device(ProfileConfig(models=["x"], gpu_type="H100-SXM"), info).gpu_type == "h100-sxm"


def test_detect_device_errors() -> None:
    with pytest.raises(InputError, match="PyTorch cannot be imported"):
        detect_device(ProfileConfig(models=["x"]), {"cpu_name": "c", "torch_error": "No module named 'torch'"})
    with pytest.raises(InputError, match="no CUDA GPU"):
        detect_device(ProfileConfig(models=["x"], device="cuda"), CPU_INFO)
    mixed = {**CPU_INFO, "cuda_count": 2, "cuda_names": ["NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB"]}
    with pytest.raises(InputError, match="mixes GPU models"):
        detect_device(ProfileConfig(models=["x"]), mixed)
    cpu = detect_device(ProfileConfig(models=["x"]), CPU_INFO)
    with pytest.raises(InputError, match="asks for 8"):
        check_config(ProfileConfig(models=["x"], gpu_counts=[1, 8]), cpu)
    with pytest.raises(InputError, match="--seconds"):
        check_config(ProfileConfig(models=["x"], seconds=0.0), cpu)
    with pytest.raises(InputError, match="size"):
        resolve_size(ProfileConfig(models=["x"], size="huge"), cpu)


def test_profile_document_records_oom_self_pairs_and_provenance() -> None:
    dev = Device("cuda", "NVIDIA H100 80GB HBM3", "550.54.15", "2.13.0", "h100", 1)
    res = ProfileResult(dev, ProfileConfig(models=["a", "b", "c"], pairs=True), "full",
                        date="2025-01-02T03:04:05+00:00")
    res.solo[("a", 1)] = JobOutcome("a", 1, 10.0, 2.5, skew=0.2)
    res.solo[("b", 1)] = JobOutcome("b", 1, 4.0, 30.0, skew=0.7)
    res.solo[("c", 1)] = JobOutcome("c", 1, oom=True)
    res.pairs[("a", "a", 1)] = (JobOutcome("a", 1, 6.0), JobOutcome("a", 1, 5.0))
    res.pairs[("a", "b", 1)] = (JobOutcome("a", 1, 7.0), JobOutcome("b", 1, 3.0))
    res.pairs[("b", "b", 1)] = (JobOutcome("b", 1, oom=True), JobOutcome("b", 1, 0.0))
    res.pairs[("a", "c", 1)] = (JobOutcome("a", 1, oom=True), JobOutcome("c", 1, oom=True))
    doc = profile_document(res)
    assert doc["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "torch_version": "2.13.0",
                          "date": "2025-01-02T03:04:05+00:00", "gpu_type": "h100"}
    assert doc["reference_gpu_type"] == "h100"
    assert doc["skew"] == {"a": 0.2, "b": 0.7}
    model = tesserae_profile_from_document(doc)
    assert model.rate("a", 1, "h100") == 10.0 and model.rate("c", 1, "h100") == 0.0
    assert model.memory_gb("b", 1) == 30.0
    assert model.rate("a", 1, "h100", partner=("a", 1)) == 5.5
    assert model.rate("b", 1, "h100", partner=("a", 1)) == 3.0
    assert model.rate("b", 1, "h100", partner=("b", 1)) == 0.0
    assert not model.pair_fits("a", "c", "h100")
    assert {p["job_type"] + "+" + p["partner_type"]: p["oom"] for p in doc["pairs"]}["b+b"] is True
    assert Measurement(("a", "b"), 2).describe(dev) == "a + b on 2 x h100"
