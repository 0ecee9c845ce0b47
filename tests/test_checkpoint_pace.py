"""A large state's checkpoint waits a few iterations (:mod:`llm_policy_gen.run.pace`): the run's files still keep
every finished iteration however the run ends (its stops, Ctrl-C, a failed write), and a run killed outright resumes
from the last checkpoint written to the uninterrupted result.

The pace is made to wait for every checkpoint after the start (any size paced, a share of ~0): which checkpoints are
written then depends on no clock.
"""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_helpers import ROOT, comparable

from llm_policy_gen.cli import main
from llm_policy_gen.modes.qlearning import QLearningMode
from llm_policy_gen.run import checkpoint as checkpoint_module
from llm_policy_gen.run import pace
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.run.pace import CheckpointPace, snapshot
from llm_policy_gen.storage.runlog import read_jsonl

ENV = "CliffWalking-v1"
PACED = ("import sys, llm_policy_gen.run.pace as pace; pace.PACE_ABOVE_BYTES = 0; pace.SHARE = 1e-12; "
         "from llm_policy_gen.cli import main; sys.exit(main(sys.argv[1:]))")


def args(logs: Path, run_id: str, iterations: int = 6) -> list[str]:
    return ["train", "--env", ENV, "--backend", "q-learning", "--iterations", str(iterations), "--heldout-episodes",
            "5", "--logs-dir", str(logs), "--run-id", run_id, "--no-plots", "--no-progress", "--quiet"]


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every checkpoint after the start waits; counts the checkpoints written."""
    monkeypatch.setattr(pace, "PACE_ABOVE_BYTES", 0)
    monkeypatch.setattr(pace, "SHARE", 1e-12)
    written = {"n": 0}
    real = checkpoint_module.save_checkpoint

    def save(path: Path, state: dict[str, Any]) -> None:
        written["n"] += 1
        real(path, state)

    monkeypatch.setattr(checkpoint_module, "save_checkpoint", save)
    return written


def kept(run: Path) -> tuple[int, list[int]]:
    """The checkpoint's iteration and the iterations of events.jsonl."""
    return int(load_checkpoint(run / "checkpoint.npz")["iteration"]), [e["iteration"] for e in
                                                                      read_jsonl(run / "events.jsonl")]


def test_the_pace_writes_small_states_always_and_large_ones_at_a_share_of_the_time() -> None:
    now = [0.0]
    p = CheckpointPace(clock=lambda: now[0], share=0.1, above_bytes=1000)
    assert p.due()
    p.wrote(p.started(), 1000, {})  # small: the next is due at once
    assert p.due()
    start = p.started()
    now[0] += 2.0  # a large write that took 2 s: the next waits until 18 s of iterations have passed
    p.wrote(start, 10**9, {})
    now[0] += 17.9
    assert not p.due() and p.skipped == 1
    now[0] += 0.1
    assert p.due()


def test_a_paced_run_writes_its_last_iteration_when_it_ends_with_the_same_result(
        tmp_path: Path, paced: dict[str, int]) -> None:
    assert main(args(tmp_path, "paced")) == 0
    assert paced["n"] == 2  # the start's and, at the end, the last iteration's
    run = tmp_path / ENV / "paced"
    assert kept(run) == (6, [1, 2, 3, 4, 5, 6])
    pace.PACE_ABOVE_BYTES = 10**12  # (the fixture puts it back) every checkpoint written, as for a small state
    assert main(args(tmp_path, "each")) == 0
    assert paced["n"] == 2 + 7
    assert comparable(run) == comparable(tmp_path / ENV / "each")


def test_ctrl_c_in_a_paced_run_keeps_every_finished_iteration_and_resumes_to_the_same_result(
        tmp_path: Path, paced: dict[str, int], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    real = QLearningMode.iterate
    cut = {"done": False}

    def iterate(self: QLearningMode, run: Any, iteration: int) -> Any:
        if iteration == 4 and not cut["done"]:
            cut["done"] = True
            raise KeyboardInterrupt  # in the middle of iteration 4: 1-3 finished, none written yet
        return real(self, run, iteration)

    monkeypatch.setattr(QLearningMode, "iterate", iterate)
    assert main(args(tmp_path, "cut")) != 0
    run = tmp_path / ENV / "cut"
    assert "keeps iterations 1..3" in capsys.readouterr().err
    assert kept(run) == (3, [1, 2, 3])
    assert json.loads((run / "summary.json").read_text())["iterations"] == 3
    assert main(["train", "--resume", str(run), "--quiet", "--no-progress"]) == 0
    assert main(args(tmp_path, "ref")) == 0
    assert comparable(run) == comparable(tmp_path / ENV / "ref")


def test_a_failed_final_write_cuts_the_record_back_to_the_last_checkpoint_written(
        tmp_path: Path, paced: dict[str, int], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    real = checkpoint_module.save_checkpoint

    def full(path: Path, state: dict[str, Any]) -> None:
        if state["iteration"] > 0:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, state)

    monkeypatch.setattr(checkpoint_module, "save_checkpoint", full)
    assert main(args(tmp_path, "full")) != 0
    run = tmp_path / ENV / "full"
    assert "disk full" in capsys.readouterr().err
    assert kept(run) == (0, []) if (run / "events.jsonl").exists() else \
        int(load_checkpoint(run / "checkpoint.npz")["iteration"]) == 0
    assert json.loads((run / "summary.json").read_text())["iterations"] == 0
    monkeypatch.setattr(checkpoint_module, "save_checkpoint", real)
    assert main(["train", "--resume", str(run), "--quiet", "--no-progress"]) == 0
    assert main(args(tmp_path, "ref")) == 0
    assert comparable(run) == comparable(tmp_path / ENV / "ref")


@pytest.mark.slow
def test_a_paced_run_killed_outright_resumes_from_the_last_checkpoint_written_to_the_same_result(
        tmp_path: Path) -> None:
    """SIGKILL after 4 iterations are logged, none of them checkpointed: the resume starts again after iteration
    0, cuts their records and ends where an uninterrupted run ends."""
    child = subprocess.Popen([sys.executable, "-c", PACED, *args(tmp_path, "cut", iterations=12)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    events = tmp_path / ENV / "cut" / "events.jsonl"
    while child.poll() is None and (not events.exists() or len(events.read_text().splitlines()) < 4):
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    run = tmp_path / ENV / "cut"
    at, logged = kept(run)
    assert at == 0 and len(logged) >= 4, (at, logged)
    resumed = subprocess.run([sys.executable, "-c", PACED, "train", "--resume", str(run)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert main(args(tmp_path, "ref", iterations=12)) == 0
    assert kept(run) == (12, list(range(1, 13)))
    assert comparable(run) == comparable(tmp_path / ENV / "ref")


def test_a_snapshot_is_independent_of_the_state_and_reuses_only_a_spare_snapshots_arrays() -> None:
    live = np.arange(6.0).reshape(2, 3)
    state = {"q": live, "rest": [live[0], {"n": 1}], "none": None}
    first = snapshot(state)
    live += 10  # the run goes on
    assert first["q"].tolist() == [[0, 1, 2], [3, 4, 5]] and first["rest"][0].tolist() == [0, 1, 2]
    kept = first["q"]
    second = snapshot(state, into=first)  # the first is replaced unwritten: its arrays are lent
    assert second["q"] is kept and second["q"].tolist() == live.tolist()
    assert second["rest"][0] is not live and second["rest"][1] == {"n": 1} and second["none"] is None
    live += 10
    assert second["q"].tolist() == (live - 10).tolist()
    # an array of another shape or type, or the live array itself, is never written into
    other = snapshot({"q": np.zeros(3)}, into={"q": live})
    assert other["q"] is not live and other["q"].tolist() == [0, 0, 0]
    assert snapshot(state, into=state)["q"] is not live


def test_the_pace_keeps_the_waiting_copy_and_lends_only_a_replaced_ones_arrays() -> None:
    paced = CheckpointPace(clock=lambda: 0.0)
    live = {"q": np.zeros((2, 3))}
    paced.hold(live)
    first = paced.waiting
    live["q"] += 1  # the next iteration
    assert first["q"].tolist() == [[0.0] * 3] * 2
    paced.hold(live)  # a newer state replaces the waiting one: copied into its arrays
    assert paced.waiting["q"] is first["q"] and paced.waiting["q"].tolist() == [[1.0] * 3] * 2
    newer = {"q": np.full((2, 3), 2.0)}
    paced.wrote(paced.started(), 10, newer)  # written now: the waiting copy, never written, becomes the spare
    assert paced.waiting is None
    paced.hold(newer)
    assert paced.waiting["q"] is first["q"] and paced.waiting["q"].tolist() == [[2.0] * 3] * 2
    written = paced.waiting
    paced.wrote(paced.started(), 10, written)  # the waiting copy written is the committed state: never lent
    paced.hold(live)
    assert paced.waiting["q"] is not written["q"] and written["q"].tolist() == [[2.0] * 3] * 2
    paced.drop()  # a failed write drops the waiting copy
    assert paced.waiting is None
