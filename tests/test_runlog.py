import errno
import json
import os
import stat

import numpy as np
import pytest

from llm_policy_gen.run.files import RunDir
from llm_policy_gen.storage.runlog import append_jsonl, read_jsonl, write_json_atomic


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


# ----------------------------------------------------------------------------------------------- issue 9, item 9
@pytest.mark.parametrize("umask", [0o027, 0o002])
def test_every_file_of_a_run_gets_the_mode_the_umask_gives(tmp_path, umask):
    """JSON files used to be 0600 (the temporary file's mode) while PNG and JSONL files were 0644."""
    from llm_policy_gen.cli import main

    before = os.umask(umask)
    try:
        code = main(["train", "--backend", "offline", "--iterations", "2", "--candidates", "2", "--heldout-episodes",
                     "3", "--logs-dir", str(tmp_path), "--run-id", "r", "--no-progress"])
        loose = tmp_path / "loose.json"
        write_json_atomic(loose, {"a": 1})
    finally:
        os.umask(before)
    assert code == 0
    files = [p for p in (tmp_path / "CartPole-v1" / "r").rglob("*") if p.is_file()] + [loose]
    names = {p.name for p in files}
    assert {"config.json", "summary.json", "best_policy.json", "iter_0001.json", "events.jsonl", "transcripts.jsonl",
            "checkpoint.npz", "training.png", "testing.png"} <= names
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes


# ----------------------------------------------------------------------------------------------- issue 9, item 10
def test_a_line_that_does_not_fit_is_cut_back_whole(tmp_path, monkeypatch):
    """A full disk lets a write through part-way; the part is removed and the error says so."""
    p = tmp_path / "t.jsonl"
    append_jsonl(p, {"i": 1})
    real = os.write

    def half(fd, data):
        return real(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(OSError) as info:
        append_jsonl(p, {"i": 2, "text": "x" * 100})
    monkeypatch.setattr(os, "write", real)
    assert info.value.errno == errno.ENOSPC and str(p) in str(info.value)
    assert p.read_text() == '{"i":1}\n'
    append_jsonl(p, {"i": 3})
    assert [r["i"] for r in read_jsonl(p)] == [1, 3]


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "s.json"
    write_json_atomic(p, {"old": True})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_json_atomic(p, {"new": True})
    monkeypatch.undo()
    assert json.loads(p.read_text()) == {"old": True} and os.listdir(tmp_path) == ["s.json"]
