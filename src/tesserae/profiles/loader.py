"""``--profile`` resolution: one entry point from a user's option to a ThroughputModel.

``None`` or ``"default"`` -> the built-in :class:`DefaultModel`; a ``.json`` file -> the project's
own format (``"format": "tesserae-profile"``), a DefaultModel override (``"kind": "default-model"``)
or Gavel's ``simulation_throughputs.json``, told apart by content; a ``.csv`` file -> Blox's
``norm_speed.csv``. Anything else is an InputError that says what is accepted.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tesserae.core.errors import InputError
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.default_model import DefaultModel, DefaultModelConfig
from tesserae.profiles.gavel import gavel_from_document, looks_like_gavel
from tesserae.profiles.json_file import read_json_file
from tesserae.profiles.norm_speed import load_norm_speed

ACCEPTED = ("'default', a .json profile (Tesserae's own format, a default-model override or Gavel's "
            "simulation_throughputs.json) or a .csv co-location table (norm_speed.csv)")


def load_profile(spec: str | Path | None) -> ThroughputModel:
    """The throughput model named by ``spec`` (see module docstring)."""
    if spec is None or str(spec) == "default":
        return DefaultModel()
    path = Path(spec)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise InputError(f"unknown profile; expected {ACCEPTED}", path=str(path))
    if not path.is_file():
        raise InputError("profile file not found", path=str(path))
    if suffix == ".csv":
        return load_norm_speed(path)
    doc = read_json_file(path, "profile")
    if isinstance(doc, dict) and "format" in doc:
        # Imported here: building its pydantic models takes a tenth of a second at every start.
        from tesserae.profiles.tesserae_profile import FORMAT, tesserae_profile_from_document

        if doc["format"] != FORMAT:
            raise InputError(f"unknown profile format {doc['format']!r}; expected {FORMAT!r}",
                             path=str(path), field="format")
        return tesserae_profile_from_document(doc, source=str(path))
    if isinstance(doc, dict) and "kind" in doc:
        try:
            return DefaultModel(DefaultModelConfig.model_validate(doc))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise InputError(err["msg"], path=str(path), field=field) from exc
    if looks_like_gavel(doc):
        return gavel_from_document(doc, source=str(path))
    raise InputError(f"unrecognised JSON profile; expected {ACCEPTED}", path=str(path))
