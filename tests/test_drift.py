"""The keeper's drift is counted from events alone: every adoption logs the held-out returns of the new best and of
the table it replaced, on the same seeds (bench/drift.py reads them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from run_helpers import ROOT, cfg

from llm_policy_gen.run import train
from llm_policy_gen.storage.runlog import read_jsonl


def _drift(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "drift.py"), *args, "--json"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_adoptions_log_both_held_out_measurements_and_drift_counts_a_planted_drop(tmp_path: Path) -> None:
    run = train(cfg(tmp_path, env_id="CartPole-v1", iterations=4, heldout_episodes=20, seed=3)).run_dir
    events = read_jsonl(run / "events.jsonl")
    adopted = [e for e in events if e["accepted"]]
    assert adopted, "the offline search adopted nothing in 4 iterations"
    for e in adopted:
        assert len(e["heldout_returns"]) == len(e["heldout_returns_before"]) == 20
        assert np.isclose(np.mean(e["heldout_returns"]), e["heldout_mean"], rtol=1e-5)
    honest = _drift(str(tmp_path))
    assert honest["totals"]["runs"] == 1 and honest["totals"]["measurable_adoptions"] == len(adopted)

    # The same run with its first adoption made to look like a clear loss: counted once, in that run.
    planted = tmp_path / "planted"
    planted.mkdir()
    first = adopted[0]
    first["heldout_returns"] = [x - 50.0 - (i % 3) for i, x in enumerate(first["heldout_returns_before"])]
    (planted / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [first]))
    drift = _drift(str(planted))
    assert drift["totals"]["drifted_down"] == 1 and drift["totals"]["runs_with_any"] == 1
    assert drift["runs"][0]["drops"][0]["iteration"] == first["iteration"]


def test_drift_refuses_a_folder_without_runs(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "drift.py"), str(tmp_path)], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "no run directory" in out.stderr
