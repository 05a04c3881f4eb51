"""Bad input: every case raises InputError whose message names the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tesserae.core.errors import InputError
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import read_trace
from tesserae.traces._fields import number
from tesserae.traces.canonical import read_canonical_parquet, write_canonical_parquet

MODEL = DefaultModel()

TIRESIAS_HEAD = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
TIRESIAS_OK = "0,1,0,606,vgg19,164,30\n"
PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_OK = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
GAVEL_OK = "CycleGAN\tcmd\t--n_steps\t1\t500\t20.0\t1\n"
CANON_HEAD = "job_id,submit_time,num_gpus,job_type,work,duration,user,priority_weight,name\n"
CANON_OK = "0,0,1,vgg19,10,10,,1,a\n"

# (format, file text, expected line, expected field, a word the message must contain)
CASES = [
    ("tiresias", "", 1, "job_id", "no jobs"),
    ("tiresias", TIRESIAS_HEAD, 2, "job_id", "no jobs"),
    ("tiresias", "job_id,num_gpu,submit_time,model_name\n0,1,0,vgg19\n", 1, "duration", "missing column"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,abc,6,vgg19,164,3\n", 3, "submit_time", "not a number"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,5,606,vgg19,nan,30\n", 3, "duration", "finite"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,5,606,vgg19,inf,30\n", 3, "duration", "finite"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,-5,606,vgg19,10,30\n", 3, "submit_time", "negative"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,0,5,606,vgg19,10,30\n", 3, "num_gpu", "at least 1"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1.5,5,606,vgg19,10,30\n", 3, "num_gpu", "integer"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,5,606,,10,30\n", 3, "model_name", "missing value"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,5,606,vgg19,0,30\n", 3, "duration", "positive"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + "1,1,5\n", 3, "model_name", "missing value"),
    ("tiresias", TIRESIAS_HEAD + TIRESIAS_OK + TIRESIAS_OK, 3, "job_id", "duplicate"),
    ("philly", "", 1, "timestamp", "no jobs"),
    ("philly", PHILLY_HEAD + "\n", 2, "timestamp", "no jobs"),
    ("philly", "timestamp,num_gpus\n" + "2017-10-09 07:01:55,1\n", 1, "duration", "missing column"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-13-09 07:01:55,66.0,1,66.0,x\n", 3, "timestamp", "timestamp"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "yesterday,66.0,1,66.0,x\n", 3, "timestamp", "timestamp"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-10-09 07:01:55,-1,1,66.0,x\n", 3, "duration", "negative"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-10-09 07:01:55,NaN,1,66.0,x\n", 3, "duration", "finite"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-10-09 07:01:55,5,0,66.0,x\n", 3, "num_gpus", "at least 1"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-10-09 07:01:55,5,four,66.0,x\n", 3, "num_gpus", "number"),
    ("philly", PHILLY_HEAD + PHILLY_OK + "2017-10-09 07:01:55,5\n", 3, "num_gpus", "missing value"),
    ("gavel", "", 1, "job_type", "no jobs"),
    ("gavel", GAVEL_OK + "CycleGAN\tcmd\t--n_steps\t1\t500\t20.0\n", 2, "scale_factor", "fields"),
    ("gavel", "CycleGAN\tcmd\t--n_steps\t1\t500\n", 1, "arrival_time", "fields"),
    ("gavel", GAVEL_OK + "CycleGAN\tcmd\t--n_steps\t1\tlots\t20.0\t1\n", 2, "total_steps", "not a number"),
    ("gavel", GAVEL_OK + "CycleGAN\tcmd\t--n_steps\t1\t500\t-20.0\t1\n", 2, "arrival_time", "negative"),
    ("gavel", GAVEL_OK + "CycleGAN\tcmd\t--n_steps\t1\t500\t20.0\t0\n", 2, "scale_factor", "at least 1"),
    ("gavel", GAVEL_OK + "CycleGAN\tcmd\t--n_steps\t1\tinf\t20.0\t1\n", 2, "total_steps", "finite"),
    ("gavel", "A3C\tc\t/wd\t--s\t0\t300\t1\t-2\t-1\t0\n", 1, "priority_weight", "negative"),
    ("canonical", "", 1, "job_id", "no jobs"),
    ("canonical", CANON_HEAD, 2, "job_id", "no jobs"),
    ("canonical", "job_id,submit_time,num_gpus,job_type\n0,0,1,vgg19\n", 1, "work", "missing column"),
    ("canonical", CANON_HEAD + CANON_OK + "x,0,1,vgg19,10,,,,\n", 3, "job_id", "not a number"),
    ("canonical", CANON_HEAD + CANON_OK + "1,0,1,vgg19,-10,,,,\n", 3, "work", "negative"),
    ("canonical", CANON_HEAD + CANON_OK + "1,0,1,vgg19,10,nan,,,\n", 3, "duration", "finite"),
    ("canonical", CANON_HEAD + CANON_OK + "1,0,1,vgg19,10,,,-1,\n", 3, "priority_weight", "negative"),
    ("canonical", CANON_HEAD + CANON_OK + "1,0,0,vgg19,10,,,,\n", 3, "num_gpus", "at least 1"),
    ("canonical", CANON_HEAD + CANON_OK + CANON_OK, 3, "job_id", "duplicate"),
]


def _check(err: InputError, path: Path, line: int, field: str) -> None:
    msg = str(err)
    assert str(path) in msg, msg
    assert f"line {line}" in msg, msg
    assert f"field '{field}'" in msg, msg
    assert (err.path, err.line, err.field) == (str(path), line, field)


@pytest.mark.parametrize(("fmt", "text", "line", "field", "word"), CASES)
def test_bad_input_names_file_line_field(tmp_path: Path, fmt: str, text: str, line: int, field: str,
                                         word: str) -> None:
    path = tmp_path / f"bad.{'trace' if fmt == 'gavel' else 'csv'}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trace(path, fmt, MODEL)
    _check(e.value, path, line, field)
    assert word in str(e.value)


def test_blank_lines_are_not_rows_but_bad_rows_are_never_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TIRESIAS_HEAD + "\n" + TIRESIAS_OK + "\n\n" + "1,x,0,1,vgg19,1,1\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trace(path, "tiresias", MODEL)
    _check(e.value, path, 6, "num_gpu")


def test_not_utf8_names_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(TIRESIAS_HEAD.encode() + TIRESIAS_OK.encode() + b"1,1,0,1,vgg\xff\xfe,1,1\n")
    with pytest.raises(InputError, match="UTF-8") as e:
        read_trace(path, "tiresias", MODEL)
    assert str(path) in str(e.value)


def test_parquet_missing_column_and_bad_value(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"job_id": [0], "submit_time": [0.0], "num_gpus": [1], "job_type": ["a"]}), path)
    with pytest.raises(InputError) as e:
        read_canonical_parquet(path)
    _check(e.value, path, 1, "work")

    pq.write_table(pa.table({"job_id": [0, 1, 2], "submit_time": [0.0, 1.0, 2.0], "num_gpus": [1, 1, 1],
                             "job_type": ["a", "b", "c"], "work": [1.0, float("nan"), 1.0]}), path)
    with pytest.raises(InputError) as e:
        read_canonical_parquet(path)
    _check(e.value, path, 3, "work")  # row 2 of the table = line 3 of the equivalent CSV

    write_canonical_parquet([], path)
    with pytest.raises(InputError, match="no jobs"):
        read_canonical_parquet(path)


def test_parquet_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_text("not parquet at all", encoding="utf-8")
    with pytest.raises(InputError, match="Parquet") as e:
        read_trace(path, "canonical", MODEL)
    assert str(path) in str(e.value)


@given(st.text(max_size=12))
def test_number_never_accepts_garbage(raw: str) -> None:
    """Any text either parses to a finite non-negative float or raises InputError: nothing else."""
    try:
        x = number(raw, Path("f.csv"), 7, "duration")
    except InputError as e:
        assert "f.csv" in str(e) and "line 7" in str(e) and "field 'duration'" in str(e)
    else:
        assert x >= 0 and x == x and x != float("inf")
