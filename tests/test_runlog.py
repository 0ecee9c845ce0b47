import json
import os

import numpy as np
import pytest

from llm_policy_gen.runlog import RunDir, append_jsonl, read_jsonl, write_json_atomic


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    p = tmp_path / "a.json"
    write_json_atomic(p, {"x": np.int64(3), "y": np.array([1.5, 2.0])})
    write_json_atomic(p, {"x": 4})
    assert json.loads(p.read_text()) == {"x": 4}
    assert os.listdir(tmp_path) == ["a.json"]


def test_failed_write_keeps_the_old_file(tmp_path):
    p = tmp_path / "a.json"
    write_json_atomic(p, {"ok": True})
    with pytest.raises(ValueError):
        write_json_atomic(p, {"bad": float("nan")})
    assert json.loads(p.read_text()) == {"ok": True}
    assert os.listdir(tmp_path) == ["a.json"]


def test_jsonl_lines_and_partial_tail_skipped(tmp_path):
    p = tmp_path / "e.jsonl"
    append_jsonl(p, {"i": 1})
    append_jsonl(p, {"i": 2})
    with open(p, "a") as fh:
        fh.write('{"i": 3, "trunc')  # a crash mid-line
    assert [r["i"] for r in read_jsonl(p)] == [1, 2]


def test_run_dirs_never_collide(tmp_path):
    a = RunDir.create(tmp_path, "CartPole-v1", "openai:gpt/x", 0, run_id="same")
    b = RunDir.create(tmp_path, "CartPole-v1", "openai:gpt/x", 0, run_id="same")
    assert a.path != b.path and (a.path / "policies").is_dir()
    assert a.policy_file(7).name == "iter_0007.json"
