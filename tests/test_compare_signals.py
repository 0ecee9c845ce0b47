"""``compare --workers N`` stopped by a signal (issue 59, item 6): SIGTERM to the process group (systemd, Slurm) or
to the sweep's own process alone ends it as Ctrl-C does: every run in progress writes its summary as
``interrupted`` and releases its lock, no run starts after the signal, and results.csv agrees with each run's
summary; the exit code is the signal's (143, as ``train`` gives; 130 for Ctrl-C).

The signal is sent once both workers' runs have a line in their events.jsonl (a file the test waits for, not a
time window); each run has far more iterations than it can finish before that.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_command_line import child_env

from llm_policy_gen.storage.locks import HOLDER_FILE

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "to", "code"), [(signal.SIGTERM, "group", 143), (signal.SIGTERM, "parent", 143),
                                                    (signal.SIGINT, "group", 130)])
def test_a_signal_stops_a_pool_of_workers_as_ctrl_c_does(tmp_path: Path, signum: int, to: str, code: int) -> None:
    out = tmp_path / "cmp"
    (tmp_path / "s.toml").write_text("plots = false\nheldout_episodes = 5\n", encoding="utf-8")
    argv = ["compare", "--env", "CartPole-v1", "--backends", "offline", "--seeds", "0-2", "--iterations", "5000",
            "--workers", "2", "--config", str(tmp_path / "s.toml"), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, env=child_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    runs = out / "runs" / "CartPole-v1"
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a window
        while sum(_lines(runs / f"offline_s{s}" / "events.jsonl") > 0 for s in range(3)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.01)
        if to == "group":
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code and "Traceback" not in err, err
    name = signal.Signals(signum).name
    assert err.strip().splitlines()[-1].startswith(
        f"interrupted{'' if signum == signal.SIGINT else ' by ' + name}: the comparison folder {out} keeps 0 of 3 "
        "runs finished"), err
    with open(out / "results.csv", newline="", encoding="utf-8") as fh:
        rows = {int(r["seed"]): r for r in csv.DictReader(fh)}
    started = [s for s in range(3) if (runs / f"offline_s{s}" / "config.json").exists()]
    assert len(started) == 2, started  # the third run never started: it waited for a worker
    for seed in started:
        run = runs / f"offline_s{seed}"
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        assert summary["stop_reason"] == "interrupted", summary
        assert summary["iterations"] == _lines(run / "events.jsonl") >= 1
        assert rows[seed]["status"] == "interrupted" and rows[seed]["stop_reason"] == "interrupted", rows[seed]
        assert rows[seed]["error"].startswith(f"interrupted after iteration {summary['iterations']};"), rows[seed]
    (waiting,) = set(range(3)) - set(started)
    assert rows[waiting]["status"] == "interrupted" and not rows[waiting]["run_dir"], rows[waiting]
    assert not list(out.rglob(HOLDER_FILE))  # every lock's note released
    assert json.loads((out / "compare.json").read_text(encoding="utf-8"))["interrupted"] is True
