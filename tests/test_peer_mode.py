"""``--mode peer``: a zoo-tuned Stable-Baselines3 learner as a run of the product (issue 61 item 1).

A tiny PPO run on CartPole-v1 (the zoo's entry: 8 environments of 32 steps, 256 learner steps an iteration) through
``compare``, its network reproduced by ``evaluate``, shown by ``report``, its checkpoint read without pickle, and a
``kill -9`` resumed to the uninterrupted run's files; the refusals in one line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_helpers import _without_wall, kill_and_resume
from test_lm_policy import one_line

from llm_policy_gen.cli import main
from llm_policy_gen.peers import EXTRA_MODULES
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.storage.runlog import read_jsonl

needs_peers = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in EXTRA_MODULES),
                                 reason="the peers extra is not installed")


def peer_records(run_dir: Path) -> dict[str, Any]:
    """What a peer run recorded, wall times aside: events, summary, its policy's facts and weights, the learner's
    state in its checkpoint."""
    rd = RunDir(run_dir)
    facts, weights = rd.network_policy
    learner = load_checkpoint(rd.checkpoint).get("learner")
    return {"events": _without_wall(read_jsonl(rd.events)), "summary": _without_wall(rd.load_summary()),
            "facts": json.loads(facts.read_text()), "weights": hashlib.sha256(weights.read_bytes()).hexdigest(),
            "learner": json.loads(json.dumps(learner, default=lambda a: np.asarray(a).tolist()))}


@needs_peers
@pytest.mark.slow
def test_zoo_tuned_ppo_runs_through_compare_and_evaluate_reproduces_its_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert main(["compare", "--env", "CartPole-v1", "--backends", "offline@peer", "--seeds", "0-2", "--iterations",
                 "2", "--max-steps", "512", "--heldout-episodes", "10", "--out", str(out), "--no-progress"]) == 0
    runs = sorted(p.parent for p in (out / "runs").rglob("summary.json"))
    assert len(runs) == 3
    rd = RunDir(runs[0])
    config = rd.load_config()
    assert config is not None and config["mode"] == "peer"
    assert config["peer"]["hyperparameters_source"].startswith("rl-zoo3 ")
    assert config["peer"]["tuned"] and config["peer"]["n_envs"] == 8 and config["peer"]["iteration_steps"] == 256
    events = read_jsonl(rd.events)
    assert [e["peer_steps"] for e in events] == [256, 512]
    assert all(e["episodes_total"] > 0 and e["env_steps_total"] > 0 for e in events)
    summary = rd.load_summary()
    assert summary is not None and summary["stop_reason"].startswith("budget reached")
    capsys.readouterr()
    assert main(["evaluate", str(rd.path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["seeds_are_heldout"] and got["episodes"] == 10
    assert got["mean"] == pytest.approx(summary["best_eval_mean"], abs=1e-9)
    # the checkpoint holds arrays and JSON only
    with zipfile.ZipFile(rd.checkpoint) as z:
        for name in z.namelist():
            if name.endswith(".npy"):
                np.load(z.open(name), allow_pickle=False)
    assert main(["report", str(out), "--out", str(tmp_path / "cmp.html")]) == 0
    assert "offline@peer" in (tmp_path / "cmp.html").read_text()
    assert main(["report", str(rd.path), "--out", str(tmp_path / "run.html")]) == 0
    assert "peer mode" in (tmp_path / "run.html").read_text()


@needs_peers
@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0"])  # MountainCar: the zoo's VecNormalize
def test_a_killed_peer_run_resumes_to_the_uninterrupted_result(tmp_path: Path, env_id: str) -> None:
    cut, ref = kill_and_resume(tmp_path, ["--mode", "peer", "--peer-algo", "ppo", "--max-steps", "1024",
                                          "--heldout-episodes", "20"], env_id, iterations=4, after=1,
                               records=peer_records)
    assert cut == ref
    assert [e["peer_steps"] for e in ref["events"]] == [256, 512, 768, 1024]
    assert (ref["facts"]["normalize"] is not None) == (env_id == "MountainCar-v0")


def _train(tmp_path: Path, *args: str) -> list[str]:
    return ["train", "--env", "CartPole-v1", "--mode", "peer", "--logs-dir", str(tmp_path / "logs"), "--iterations",
            "1", "--no-plots", "--quiet", *args]


@needs_peers
@pytest.mark.parametrize(("args", "says"), [
    (["--peer-algo", "sac"], "sac needs continuous actions"),
    (["--env", "FrozenLake-v1.deterministic"], "give --max-steps N"),
])
def test_a_peer_run_that_cannot_be_built_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  args: list[str], says: str) -> None:
    assert main(_train(tmp_path, *args)) == 2
    assert says in one_line(capsys.readouterr().err)
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").rglob("config.json"))


def test_evaluate_on_a_peer_run_without_the_extra_refuses_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.config.write_text("{}")
    rd.network_policy[0].write_text("{}")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "stable_baselines3" else real(name, *a))
    assert main(["evaluate", str(rd.path)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "peers extra" in line and "stable_baselines3" in line and "pip install" in line


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@needs_peers
@pytest.mark.slow
def test_a_dqn_peer_run_is_refused_on_resume_and_left_as_it_is(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_train(tmp_path, "--peer-algo", "dqn", "--max-steps", "256", "--heldout-episodes", "5",
                       "--run-id", "d")) == 0
    run = tmp_path / "logs" / "CartPole-v1" / "d"
    before = _files(run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 2
    assert "replay buffer is not in the checkpoint" in one_line(capsys.readouterr().err)
    assert _files(run) == before
