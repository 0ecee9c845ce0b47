"""A Ctrl-C at any moment (issue 19, item 27): summary.json, events.jsonl, best_policy.json and the iteration files
agree about the iterations, and ``train --resume`` continues the run to its end.

Each case starts ``python -m llm_policy_gen train --env CartPole-v1 --backend offline`` and sends SIGINT at one
moment, found by watching the run directory (no sleeps as timing windows): as soon as config.json appears (start-up),
as soon as the first checkpoint appears (iteration 1 begins), or as soon as the k-th line of events.jsonl appears
(the process is then committing iteration k: its checkpoint is being written; for the last line, the run is ending:
summary and plots).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 5
WAIT_S = 300.0


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _interrupt_when(proc: subprocess.Popen[bytes], ready: Any) -> None:
    """SIGINT to ``proc`` as soon as ``ready()`` holds (checked every millisecond, for at most ``WAIT_S``), unless
    it ended first."""
    deadline = time.monotonic() + WAIT_S
    while not ready() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never reached the moment"
        time.sleep(0.001)  # a poll interval (the signal follows the moment within it), not a timing window
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)


def _agree(run: Path, iterations: int | None = None) -> int:
    """Check that the run's files tell one story; returns its number of finished iterations."""
    events = read_jsonl(run / "events.jsonl") if (run / "events.jsonl").exists() else []
    done = [e["iteration"] for e in events]
    n = len(done)
    assert done == list(range(1, n + 1)), done
    if iterations is not None:
        assert n == iterations
    iter_files = sorted(int(p.stem.split("_")[1]) for p in (run / "policies").glob("iter_*.json"))
    assert iter_files == done
    if not (run / "summary.json").exists():  # interrupted before its first checkpoint: nothing claims an iteration
        assert n == 0
        return n
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["iterations"] == n
    if n:
        assert summary["episodes_total"] == events[-1]["episodes_total"]
        assert summary["best_eval_mean"] == events[-1]["best_eval_mean"]
    best = json.loads((run / "best_policy.json").read_text(encoding="utf-8"))
    assert best["meta"]["iteration"] == summary["best_iteration"] <= n
    assert best["meta"]["heldout_mean"] == summary["best_eval_mean"]
    return n


MOMENTS = ["start-up", "checkpoint 0", *[f"line {k}" for k in range(1, ITERATIONS + 1)]]


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_ctrl_c_at_any_moment_leaves_files_that_agree_and_resume(moment: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    run = logs / "CartPole-v1" / "r"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", "train", "--env", "CartPole-v1", "--backend",
                                 "offline", "--iterations", str(ITERATIONS), "--logs-dir", str(logs), "--run-id", "r",
                                 "--no-progress"], cwd=tmp_path, env=env, stderr=err, stdout=subprocess.DEVNULL)
    try:
        if moment == "start-up":
            _interrupt_when(proc, lambda: (run / "config.json").exists())
        elif moment == "checkpoint 0":  # the run is built and its initial table scored: iteration 1 begins
            _interrupt_when(proc, lambda: (run / "checkpoint.npz").exists())
        else:
            k = int(moment.split()[1])
            _interrupt_when(proc, lambda: _lines(run / "events.jsonl") >= k)
        code = proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = (tmp_path / "err").read_text(encoding="utf-8")
    assert code in (0, 130), stderr
    assert "Traceback" not in stderr
    if not run.exists():  # interrupted while the run was being built: no directory is left behind
        assert moment == "start-up" and code == 130
        return
    done = _agree(run)
    if code == 0:  # the signal came after the run's end
        assert done == ITERATIONS
        return
    assert main(["train", "--resume", str(run), "--no-progress", "--no-plots"]) == 0, capsys.readouterr().err
    _agree(run, ITERATIONS)
