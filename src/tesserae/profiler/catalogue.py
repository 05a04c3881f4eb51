"""The catalogue of models ``tesserae profile`` measures: names, descriptions and sizes.

This module does not import PyTorch, so the command can check ``--models`` (and say what is
accepted) on a machine without it. The networks themselves are in :mod:`tesserae.profiler.models`.

A catalogue name is the job type written to the profile, so it is also what a user passes to
``tesserae submit --type`` and what a trace's ``job_type`` column says. Each model comes in three
sizes: ``full`` (the published architecture and a usual per-GPU batch size, for GPUs), ``small``
(narrower, smaller inputs: a CPU can train it at a few steps per second) and ``tiny`` (a few
thousand parameters, for tests). The sizes change widths, depths, input sizes and batch sizes,
never the kind of network or the training step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tesserae.core.errors import InputError

SIZES = ("full", "small", "tiny")


@dataclass(frozen=True)
class ModelEntry:
    """One catalogue model: ``sizes`` maps a size to the keyword arguments of its builder."""

    name: str
    description: str
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)


CATALOGUE: dict[str, ModelEntry] = {m.name: m for m in (
    ModelEntry("resnet18", "ResNet-18 (basic blocks 2-2-2-2), image classification, SGD with momentum", {
        "full": {"blocks": (2, 2, 2, 2), "width": 64, "image": 224, "classes": 1000, "batch": 32},
        "small": {"blocks": (2, 2, 2, 2), "width": 16, "image": 64, "classes": 100, "batch": 8},
        "tiny": {"blocks": (1, 1, 1, 1), "width": 4, "image": 16, "classes": 10, "batch": 2},
    }),
    ModelEntry("resnet50", "ResNet-50 (bottleneck blocks 3-4-6-3), image classification, SGD with momentum", {
        "full": {"blocks": (3, 4, 6, 3), "width": 64, "image": 224, "classes": 1000, "batch": 32},
        "small": {"blocks": (3, 4, 6, 3), "width": 8, "image": 64, "classes": 100, "batch": 8},
        "tiny": {"blocks": (1, 1, 1, 1), "width": 4, "image": 16, "classes": 10, "batch": 2},
    }),
    ModelEntry("vgg19", "VGG-19 (16 convolutions, 3 fully connected layers), image classification, SGD", {
        "full": {"width": 64, "image": 224, "pool": 7, "hidden": 4096, "classes": 1000, "batch": 32},
        "small": {"width": 8, "image": 64, "pool": 2, "hidden": 512, "classes": 100, "batch": 8},
        "tiny": {"width": 2, "image": 32, "pool": 1, "hidden": 16, "classes": 10, "batch": 2},
    }),
    ModelEntry("gpt-small", "GPT-2-small-style decoder (causal self-attention), next-token loss, AdamW", {
        "full": {"layers": 12, "dim": 768, "heads": 12, "seq": 512, "vocab": 50257, "batch": 8},
        "small": {"layers": 4, "dim": 128, "heads": 4, "seq": 64, "vocab": 4096, "batch": 4},
        "tiny": {"layers": 1, "dim": 16, "heads": 2, "seq": 8, "vocab": 64, "batch": 2},
    }),
    ModelEntry("bert-base", "BERT-base-style encoder, masked-language-model loss, AdamW", {
        "full": {"layers": 12, "dim": 768, "heads": 12, "seq": 128, "vocab": 30522, "batch": 32},
        "small": {"layers": 4, "dim": 128, "heads": 4, "seq": 64, "vocab": 4096, "batch": 4},
        "tiny": {"layers": 1, "dim": 16, "heads": 2, "seq": 8, "vocab": 64, "batch": 2},
    }),
    ModelEntry("dcgan", "DCGAN on 64x64 images: one discriminator and one generator step, Adam", {
        "full": {"nz": 100, "ngf": 64, "ndf": 64, "batch": 128},
        "small": {"nz": 32, "ngf": 8, "ndf": 8, "batch": 16},
        "tiny": {"nz": 8, "ngf": 2, "ndf": 2, "batch": 2},
    }),
    ModelEntry("recommendation", "Neural collaborative filtering: user/item embeddings and an MLP, "
               "binary cross-entropy, Adam", {
        "full": {"users": 138_493, "items": 26_744, "dim": 64, "hidden": (256, 256, 128), "batch": 2048},
        "small": {"users": 10_000, "items": 5_000, "dim": 32, "hidden": (128, 64), "batch": 512},
        "tiny": {"users": 100, "items": 50, "dim": 8, "hidden": (16,), "batch": 16},
    }),
)}

MODEL_NAMES: tuple[str, ...] = tuple(CATALOGUE)


def parse_models(text: str | None) -> list[str]:
    """``"resnet18, gpt-small"`` -> ``['resnet18', 'gpt-small']``; None or "all" -> every model.

    Names are case-insensitive; an unknown or repeated name is an InputError naming the accepted ones.
    """
    if text is None or text.strip().lower() == "all":
        return list(MODEL_NAMES)
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name not in CATALOGUE:
            raise InputError(f"unknown model '{raw.strip()}'; known models: {', '.join(MODEL_NAMES)}",
                             field="models")
        if name in names:
            raise InputError(f"model '{name}' is listed twice", field="models")
        names.append(name)
    if not names:
        raise InputError(f"no model named in '{text}'; known models: {', '.join(MODEL_NAMES)}",
                         field="models")
    return names


def parse_gpu_counts(text: str) -> list[int]:
    """``"1,2"`` -> ``[1, 2]`` (sorted, distinct, each at least 1)."""
    counts: set[int] = set()
    for raw in text.split(","):
        if not raw.strip():
            continue
        try:
            n = int(raw.strip())
        except ValueError:
            raise InputError(f"'{text}' is not a comma-separated list of GPU counts, e.g. 1,2",
                             field="gpus") from None
        if n < 1:
            raise InputError(f"GPU counts must be at least 1, got {n}", field="gpus")
        counts.add(n)
    if not counts:
        raise InputError(f"no GPU count in '{text}'", field="gpus")
    return sorted(counts)


def size_settings(name: str, size: str) -> dict[str, Any]:
    """The builder's keyword arguments for ``name`` at ``size``."""
    if size not in SIZES:
        raise InputError(f"unknown size '{size}'; expected one of {', '.join(SIZES)}", field="size")
    return dict(CATALOGUE[name].sizes[size])
