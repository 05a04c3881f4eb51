"""Blox's norm_speed.csv: parsing, OOM rows, best strategies, and use as a ThroughputModel."""

from __future__ import annotations

import pytest

from tesserae.core.errors import InputError
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.norm_speed import load_norm_speed, parse_norm_speed, read_norm_speed

S = "S (batch size 32)"
T = "T (batch size 64)"


def test_tiny_table(tiny_csv):
    table = read_norm_speed(tiny_csv)
    assert table.large_types() == [("L", 2)]
    assert table.strategies("L", 2) == [("1,3", 0.8), ("2,2", 0.9), ("DP2", 1.0)]
    assert table.best_solo_strategy("L", 2) == ("DP2", 1.0)
    assert table.pair("L", 2, "2,2", S) == (0.7, 0.8)
    assert table.pair("L", 2, "DP2", S) is None  # OOM: no pair ...
    assert ("L", 2, "DP2", S, 2) in table.pairs  # ... but measured
    assert table.best_strategy("L", 2, S) == ("2,2", 0.7, 0.8)
    assert table.best_strategy("L", 2, T) is None  # every strategy OOM
    assert table.partners("L", 2) == [(S, 2), (T, 2)]


def test_tiny_as_throughput_model(tiny_csv):
    model = load_norm_speed(tiny_csv)
    assert isinstance(model, ThroughputModel)
    assert model.rate("L", 2, "v100") == 1.0
    assert model.rate("L", 2, "a100") == 1.0  # GPU-type agnostic
    assert model.rate("L", 2, "v100", partner=(S, 2)) == 0.7
    assert model.rate(S, 2, "v100", partner=("L", 2)) == 0.8
    assert model.rate("L", 2, "v100", partner=(T, 2)) == 0.0
    assert model.rate(S, 1, "v100", partner=(S, 1)) == 0.6
    assert model.rate(S, 1, "v100", partner=(T, 1)) == 0.0
    assert model.rate(T, 1, "v100", partner=(S, 1)) == 0.0
    assert model.strategy_for("L", 2) == "DP2"
    assert model.strategy_for("L", 2, (S, 2)) == "2,2"
    assert model.check("L", 4) is not None
    assert model.check(S, 1) is None
    scaled = load_norm_speed(tiny_csv, base_rate=2.0)
    assert scaled.rate("L", 2, "v100", partner=(S, 2)) == pytest.approx(1.4)


def test_real_file_strategies(norm_speed_path):
    table = read_norm_speed(norm_speed_path)
    assert table.large_types() == [
        ("Bert-Large", 2), ("Bert-Large", 4), ("GPT2-Medium", 2), ("GPT2-Medium", 4)]
    # seven layer splits + TP24 + DP24 on 2 GPUs; four splits + TP24 + DP24 on 4 GPUs
    assert len(table.strategies("Bert-Large", 2)) == 9
    assert len(table.strategies("Bert-Large", 4)) == 6
    assert ("10,14", 0.78) in table.strategies("Bert-Large", 2)  # quoted field with a comma
    assert table.best_solo_strategy("Bert-Large", 2) == ("DP24", 1.0)
    assert len(table.partners("Bert-Large", 2)) == 12  # 4 small models x 3 batch sizes


def test_real_file_oom_rows_give_no_pair(norm_speed_path):
    table = read_norm_speed(norm_speed_path)
    # line 61 of the file: 6,18 next to vgg19 bs128 is 0.0 / 0.0
    assert table.pair("Bert-Large", 2, "6,18", "vgg19 (batch size 128)") is None
    assert table.pair("Bert-Large", 2, "10,14", "vgg19 (batch size 128)") == (0.2, 0.92)
    # GPT2-Medium on 4 GPUs next to resnet50 bs32 with DP24 is OOM, but some split fits
    assert table.pair("GPT2-Medium", 4, "DP24", "resnet50 (batch size 32)") is None
    assert table.best_strategy("GPT2-Medium", 4, "resnet50 (batch size 32)") is not None


def test_real_file_best_strategy_hand_checked(norm_speed_path):
    table = read_norm_speed(norm_speed_path)
    # Bert-Large on 2 GPUs next to DCGAN bs32 (file lines 38-110, 572, 620): gains 10,14 0.46;
    # 8,16 0.53; 6,18 0.54; 12,12 0.44; 14,10 0.35; 16,8 0.23; 18,6 0.15; TP24 0.13; DP24 0.29.
    assert table.best_strategy("Bert-Large", 2, "DCGAN (batch size 32)") == ("6,18", 0.59, 0.95)
    # a tie in gain (8,16: 0.51 + 0.74; 6,18: 0.46 + 0.79) goes to the faster large job
    assert table.best_strategy("Bert-Large", 2, "resnet50 (batch size 32)") == ("8,16", 0.51, 0.74)


def test_real_file_as_model(norm_speed_path):
    model = load_norm_speed(norm_speed_path)
    assert model.rate("Bert-Large", 2, "v100") == 1.0
    assert model.rate("Bert-Large", 2, "v100", partner=("DCGAN (batch size 32)", 2)) == 0.59
    assert model.rate("DCGAN (batch size 32)", 2, "v100", partner=("Bert-Large", 2)) == 0.95
    assert model.strategy_for("Bert-Large", 2, ("DCGAN (batch size 32)", 2)) == "6,18"
    assert model.skew("vgg19 (batch size 64)") == 0.72
    data = parse_norm_speed(norm_speed_path)
    assert ("resnet50 (batch size 32)", 1) in data.small_jobs
    for jt in model.job_types():
        for n in model.gpu_counts(jt):
            assert model.check(jt, n) is None, (jt, n)


@pytest.mark.parametrize(("row", "line", "field"), [
    ('9,S,X,1,32,fast,0,NA,S,X,1,32,0.6\n', 12, "speed1"),
    ('9,S,X,0,32,0.5,0,NA,S,X,1,32,0.6\n', 12, "gpu_num1"),
    ('9,S,X,1,32,0.5,0,NA,S,X,NA,32,0.6\n', 12, "gpu_num2"),
    ('9,S,X,1,32,0.5,0,NA,S,X,1,32,-0.1\n', 12, "speed2"),
    ('9,NA,X,1,32,0.5,0,NA,S,X,1,32,0.6\n', 12, "model1"),
    ('9,S,X,1,32,0.5,0,NA,S,X,1\n', 12, None),
    ('9,L,D,2,8/2,0.7,"0,1","2,2",S,X,2,32,0.8\n', 12, None),  # duplicate
    ('9,L,D,2,8/2,0.7,"0,1","3,1",S,X,2,32,0.8\n', 12, "pipeline_strategy"),  # no solo row
])
def test_bad_rows(tmp_path, tiny_csv, row, line, field):
    path = tmp_path / "bad.csv"
    path.write_text(tiny_csv.read_text() + row)
    with pytest.raises(InputError) as exc:
        read_norm_speed(path)
    assert exc.value.path == str(path)
    assert exc.value.line == line
    assert exc.value.field == field


def test_missing_column_and_empty_file(tmp_path, tiny_csv):
    path = tmp_path / "bad.csv"
    path.write_text(tiny_csv.read_text().splitlines()[0].replace("speed2", "speedy") + "\n")
    with pytest.raises(InputError) as exc:
        read_norm_speed(path)
    assert exc.value.field == "speed2" and exc.value.line == 1
    path.write_text("")
    with pytest.raises(InputError, match="empty"):
        read_norm_speed(path)
