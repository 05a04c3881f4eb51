"""load_profile: dispatch from a --profile option to the right reader, and clear errors otherwise."""

from __future__ import annotations

import json

import pytest

from tesserae.core.errors import InputError
from tesserae.profiles.default_model import DefaultModel
from tesserae.profiles.loader import load_profile
from tesserae.profiles.table_model import TableModel
from tesserae.profiles.tesserae_profile import write_tesserae_profile


@pytest.mark.parametrize("spec", [None, "default"])
def test_default(spec):
    model = load_profile(spec)
    assert isinstance(model, DefaultModel)
    assert model.measured is False


def test_default_model_override(tmp_path):
    path = tmp_path / "knobs.json"
    path.write_text(json.dumps({"kind": "default-model", "share_factor": 0.5}))
    model = load_profile(str(path))
    assert isinstance(model, DefaultModel)
    assert model.config.share_factor == 0.5
    path.write_text(json.dumps({"kind": "default-model", "share_factor": 2.0}))
    with pytest.raises(InputError) as exc:
        load_profile(str(path))
    assert exc.value.field == "share_factor"


def test_gavel_json(tiny_gavel_path):
    model = load_profile(str(tiny_gavel_path))
    assert isinstance(model, TableModel)
    assert model.rate("A", 1, "v100") == 10.0


def test_real_gavel_json(gavel_path):
    model = load_profile(str(gavel_path))
    assert isinstance(model, TableModel) and len(model.job_types()) == 26


def test_tesserae_json(tmp_path, tiny_gavel_path):
    path = tmp_path / "own.json"
    write_tesserae_profile(load_profile(str(tiny_gavel_path)), path)
    model = load_profile(path)
    assert isinstance(model, TableModel)
    assert model.name.startswith("tesserae-profile")
    assert model.rate("A", 1, "v100", partner=("B", 1)) == 6.0


def test_norm_speed_csv(tiny_csv):
    model = load_profile(str(tiny_csv))
    assert isinstance(model, TableModel)
    assert model.strategy_for("L", 2) == "DP2"


def test_real_norm_speed_csv(norm_speed_path):
    assert load_profile(str(norm_speed_path)).rate("Bert-Large", 4, "h100") == 1.0


@pytest.mark.parametrize(("name", "content", "match"), [
    ("profile.yaml", "a: 1", "unknown profile"),
    ("list.json", "[1, 2]", "unrecognised JSON"),
    ("other.json", '{"format": "gavel"}', "unknown profile format"),
    ("broken.json", "{", "not valid JSON"),
    ("empty.json", "{}", "unrecognised JSON"),
])
def test_errors(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputError, match=match) as exc:
        load_profile(str(path))
    assert name in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_profile(str(tmp_path / "nope.json"))
    with pytest.raises(InputError, match="unknown profile"):
        load_profile("gavel")
