"""The keeper's drift is counted from events alone: every adoption logs the held-out returns of the new best and of
the table it replaced, on the same seeds; ``llm-policy-gen drift PATH...`` counts them over any folder of run
directories, through the run-directory reader (:mod:`llm_policy_gen.suites.drift`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import cfg

from llm_policy_gen.cli import main
from llm_policy_gen.run import train
from llm_policy_gen.run.files import RunDir


def _drift(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    assert main(["drift", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_adoptions_log_both_held_out_measurements_and_drift_counts_a_planted_drop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = train(cfg(tmp_path, env_id="CartPole-v1", iterations=4, heldout_episodes=20, seed=3)).run_dir
    events = RunDir(run).read().events
    adopted = [e for e in events if e["accepted"]]
    assert adopted, "the offline search adopted nothing in 4 iterations"
    for e in adopted:
        assert len(e["heldout_returns"]) == len(e["heldout_returns_before"]) == 20
        assert np.isclose(np.mean(e["heldout_returns"]), e["heldout_mean"], rtol=1e-5)
    honest = _drift(capsys, str(tmp_path))
    assert honest["totals"]["runs"] == 1 and honest["totals"]["measurable_adoptions"] == len(adopted)

    # The same run with its first adoption made to look like a clear loss: counted once, in that run.
    planted = tmp_path / "planted"
    planted.mkdir()
    first = adopted[0]
    first["heldout_returns"] = [x - 50.0 - (i % 3) for i, x in enumerate(first["heldout_returns_before"])]
    RunDir(planted).events.write_text(json.dumps(first) + "\n")
    drift = _drift(capsys, str(planted))
    assert drift["totals"]["drifted_down"] == 1 and drift["totals"]["runs_with_any"] == 1
    assert drift["runs"][0]["drops"][0]["iteration"] == first["iteration"]
    both = _drift(capsys, str(tmp_path))  # the folder holds both runs now, each counted once
    assert both["totals"]["runs"] == 2 and both["totals"]["drifted_down"] == 1

    assert main(["drift", str(planted)]) == 0  # the text form: the run's line, then the totals
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{planted}: 1 of 1 adoptions drifted down (it {first['iteration']}: ")
    assert out[-1].startswith("runs: 1, adoptions: 1, measurable adoptions: 1, drifted down: 1, runs with any: 1")


@pytest.mark.parametrize(("args", "says"), [([], "no run directory (a folder with an events file) at or under"),
                                            (["--z", "0"], "bad --z 0")])
def test_drift_refuses_a_folder_without_runs_or_a_bad_z_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    assert main(["drift", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and list(tmp_path.iterdir()) == []
