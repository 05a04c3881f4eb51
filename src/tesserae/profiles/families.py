"""Model families: one normalised name for the many spellings of a model across traces and tables."""

from __future__ import annotations

import re

_BATCH_SUFFIX = re.compile(r"\s*\(\s*batch size[^)]*\)\s*$", re.IGNORECASE)


def model_family(job_type: str) -> str:
    """Normalised model name: 'ResNet-50 (batch size 16)' -> 'resnet50', 'Inception-v3' -> 'inception3'."""
    name = _BATCH_SUFFIX.sub("", job_type).lower()
    name = re.sub(r"[^a-z0-9]", "", name)
    return re.sub(r"(?<=[a-z])v(?=\d)", "", name)
