"""The issue-31 bench scripts (``bench/lm_features.py``, ``bench/lm_trpo_vs_ppo.py``) on tiny budgets, through
``subprocess`` as a user runs them, with the control features so that no language model is needed (about 50 s of
CPU in all, most of it importing torch and Stable-Baselines3 in each subprocess)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.lm import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in EXTRA_MODULES),
                                reason="the lm-policy extra is not installed (make test installs it)")


def bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_POLICY_GEN_WORKERS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)


@pytest.mark.slow
def test_lm_features_measures_the_controls_reports_iqm_and_skips_finished_runs(tmp_path: Path) -> None:
    """Two updates per run on FrozenLake-v1.deterministic and the 8x8 variant; a second invocation reads the finished
    runs and resumes an interrupted one. The variants' runs live in the gymnasium id's folder (``runs/FrozenLake-v1``)
    under a name that starts with the variant (they were once looked for elsewhere and failed)."""
    out = tmp_path / "out"
    args = ("--tasks", "frozenlake,frozenlake8x8", "--features", "onehot,random,qwen", "--seeds", "0",
            "--iterations", "2", "--heldout-episodes", "5", "--out", str(out))
    first = bench("lm_features.py", *args)
    assert first.returncode == 0, first.stderr
    records = json.loads((out / "results.json").read_text())
    ran = [r for r in records if "heldout" in r]
    assert sorted((r["task"], r["features"]) for r in ran) == [
        ("frozenlake", "onehot"), ("frozenlake", "random"), ("frozenlake8x8", "onehot"), ("frozenlake8x8", "random")]
    assert {r["width"] for r in ran if r["features"] == "onehot" and r["task"] == "frozenlake"} == {16}
    assert {r["width"] for r in ran if r["features"] == "random"} == {576}
    for r in ran:  # the curve is the kept table's held-out mean after each of the 2 updates, against steps
        assert len(r["curve"]["env_steps"]) == 2 and r["curve"]["lm_steps"] == [256.0, 512.0]
        assert r["curve"]["env_steps"][1] == r["env_steps_total"] and r["curve"]["heldout"][-1] == r["heldout"]
    lake8 = out / "runs" / "FrozenLake-v1" / "8x8-onehot_ppo_i2_s0"
    assert [r["run_dir"] for r in ran if r["task"] == "frozenlake8x8" and r["features"] == "onehot"] == [str(lake8)]
    # a model that is not in the (test's own, empty) models folder is a "not run" row, nothing downloaded
    missing = [r for r in records if r["features"] == "qwen"]
    assert len(missing) == 2 and all("not fetched" in r["not_run"] for r in missing)
    md = (out / "lm_features.md").read_text()
    assert "### FrozenLake-v1.deterministic" in md and "### FrozenLake-v1.8x8" in md
    assert "IQM of final held-out [95% CI]" in md
    assert "| one-hot | 1 |" in md and "| random (576) | 1 |" in md and "qwen seed 0: model" in md
    assert (out / "frozenlake.png").stat().st_size > 0
    before = {r["run_dir"]: r for r in ran}
    (lake8 / "summary.json").unlink()  # interrupted after its last checkpoint
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json")}
    assert len(mtimes) == 3
    second = bench("lm_features.py", *args)
    assert second.returncode == 0, second.stderr
    again = {r["run_dir"]: r for r in json.loads((out / "results.json").read_text()) if "heldout" in r}
    assert again.keys() == before.keys()
    assert all(r.get("reused") for d, r in again.items() if d != str(lake8)) and again[str(lake8)].get("resumed")
    for key in ("heldout", "env_steps_total", "curve"):  # resumed to the same figures
        assert again[str(lake8)][key] == before[str(lake8)][key]
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json") if p.parent != lake8} == mtimes


def test_lm_features_refuses_an_unknown_task_in_one_line(tmp_path: Path) -> None:
    done = bench("lm_features.py", "--tasks", "pong", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "'pong'" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_lm_trpo_vs_ppo_runs_both_arms_to_the_same_step_budget(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = bench("lm_trpo_vs_ppo.py", "--tasks", "cartpole", "--features", "onehot", "--seeds", "0",
                 "--steps", "512", "--heldout-episodes", "5", "--out", str(out))
    assert done.returncode == 0, done.stderr
    records = {r["arm"]: r for r in json.loads((out / "results.json").read_text())}
    lm, ppo = records["lm"], records["ppo"]
    assert lm["learner"] == "TRPO" and lm["lm_steps"] == 512 and lm["state_texts"] is None
    assert ppo["steps"] == 512 and ppo["reached"] and len(ppo["curve"]) >= 1
    assert ppo["heldout_episodes"] == 100 and "rl-zoo3" in ppo["hyperparameters"]
    md = (out / "lm_trpo_vs_ppo.md").read_text()
    assert "| CartPole-v1 | one-hot + TRPO (table) | 1 | 512 |" in md
    assert "| CartPole-v1 | PPO MLP, raw observations (zoo) | 1 | 512 |" in md
    assert (out / "cartpole_trpo_vs_ppo.png").stat().st_size > 0


def test_two_lm_features_invocations_on_one_folder_keep_each_others_records(tmp_path: Path) -> None:
    """``results.json`` is re-read under a lock and only the invocation's own records replaced: two invocations on
    one folder (Taxi-v4 beside a queue running MountainCar-v0) lose nothing of each other's, and a re-run record
    replaces its old one in place."""
    spec = importlib.util.spec_from_file_location("lm_features", ROOT / "bench" / "lm_features.py")
    assert spec is not None and spec.loader is not None
    lm_features = importlib.util.module_from_spec(spec)
    sys.modules["lm_features"] = lm_features
    spec.loader.exec_module(lm_features)
    results = tmp_path / "results.json"
    a = {"task": "taxi", "features": "onehot", "seed": 0, "heldout": -50.0}
    b = {"task": "mountaincar", "features": "onehot", "seed": 0, "heldout": -150.0}
    lm_features.save_results(results, {("taxi", "onehot", 0): a}, "features")
    lm_features.save_results(results, {("mountaincar", "onehot", 0): b}, "features")  # a writer that never saw a
    a2 = {**a, "heldout": -20.0}
    everything = lm_features.save_results(results, {("taxi", "onehot", 0): a2}, "features")
    assert list(everything.values()) == json.loads(results.read_text()) == [a2, b]


@pytest.mark.slow
def test_lm_features_puts_offline_the_prior_and_the_models_own_tables_beside_the_features(tmp_path: Path) -> None:
    """``--features offline`` runs the product's optimiser as the suite would (its run id, read back when it is
    there); the report adds, on the same held-out seeds, the spec's table before any episode, a zero-shot table from
    ``bench/lm_zero_shot.py --run-seeds``'s JSON, and the model writing tables from the transcribed measurement."""
    out = tmp_path / "out"
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"model": {"path": "/m/SmolLM2-135M-Instruct.Q4_1.gguf"}, "results": [
        {"env": "FrozenLake-v1.deterministic", "tables": {"zero-shot (word)": {"by_seed": {"0": 0.0, "1": 1.0}}}}]}))
    args = ("--tasks", "frozenlake", "--features", "offline", "--seeds", "0-1", "--out", str(out),
            "--zero-shot", str(zero))
    done = bench("lm_features.py", *args)
    assert done.returncode == 0, done.stderr
    records = json.loads((out / "results.json").read_text())
    assert [(r["features"], r["seed"], r["budget"]) for r in records] == [("offline", 0, 300), ("offline", 1, 300)]
    for r in records:  # a suite run: its id, the same curve fields as an lm-policy run (no learner steps)
        assert Path(r["run_dir"]).name == f"frozenlake_b300_offline_s{r['seed']}"
        assert r["curve"]["env_steps"][-1] == r["env_steps_total"] and "lm_steps" not in r["curve"]
    md = (out / "lm_features.md").read_text()
    assert "| offline (not an LLM: the table-writing optimiser) | 2 |" in md
    assert "`offline`: the suite's settings, 300 episodes." in md
    assert "| the spec's table before any episode | 0-1 | 0.00 [0.00, 0.00] | 0/2 | 0 | no prior: default action" in md
    assert "| zero-shot table, SmolLM2-135M-Instruct.Q4_1.gguf | 0-1 | 0.50 [0.00, 1.00] | 1/2 | 0 |" in md
    assert "| Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) writing the table, `table` answers | 0-2 | 0.00" in md
    assert json.loads((out / "priors.json").read_text())["tasks"]["frozenlake"]["by_seed"] == {"0": 0.0, "1": 0.0}
    again = bench("lm_features.py", *args)  # the finished suite runs are read back, not run again
    assert again.returncode == 0 and all(r["reused"] for r in json.loads((out / "results.json").read_text()))
    bad = bench("lm_features.py", *args[:-1], str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.json" in bad.stderr
