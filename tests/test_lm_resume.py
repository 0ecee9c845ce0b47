"""``train --resume`` of a ``--mode lm-policy`` run: a run stopped after k iterations (or interrupted inside one) and
resumed writes the same events, summary and policy files as one that ran through, and its checkpoint holds the
learner's state as arrays and JSON (nothing pickled).

The control features (``--lm-features onehot``, ``random``) need no model; the last test uses SmolLM2-135M, loaded
by each process from the safetensors cache that the shared ``gguf`` fixture (``tests/conftest.py``) fills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from run_helpers import kill_and_resume, run_records
from test_lm_policy import LM_CACHE, lake, needs_extra, one_line

from llm_policy_gen.cli import main
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint
from llm_policy_gen.storage.runlog import read_jsonl

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")

FAST = ("--lm-n-steps", "64", "--lm-batch-size", "32", "--lm-epochs", "2")


def stopped_and_resumed(tmp_path: Path, n: int, k: int, *extra: str) -> tuple[Path, Path]:
    """(a run of ``n`` iterations, a run of ``k`` resumed to ``n``) with the same settings."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(lake(whole, *extra, "--iterations", str(n))) == 0
    assert main(lake(part, *extra, "--iterations", str(k))) == 0
    rd = part / "FrozenLake-v1" / "r"
    assert main(["train", "--resume", str(rd), "--iterations", str(n)]) == 0
    return whole / "FrozenLake-v1" / "r", rd


@needs_extra
@pytest.mark.slow
def test_a_stopped_ppo_run_resumes_to_the_uninterrupted_runs_files(tmp_path: Path) -> None:
    whole, resumed = stopped_and_resumed(tmp_path, 5, 2, "--lm-features", "onehot", *FAST)
    assert run_records(resumed) == run_records(whole)
    events = read_jsonl(whole / "events.jsonl")
    assert [e["lm_steps"] for e in events] == [64, 128, 192, 256, 320]
    # the head did learn between the iterations (a resume that dropped its state would not match)
    assert len({tuple(json.loads((whole / "policies" / f"iter_{i:04d}.json").read_text())["table"])
                for i in range(1, 6)}) > 1


@needs_extra
@pytest.mark.slow
def test_a_stopped_trpo_run_over_random_features_resumes_the_same(tmp_path: Path) -> None:
    whole, resumed = stopped_and_resumed(tmp_path, 4, 3, "--lm-features", "random", "--lm-learner", "trpo", *FAST)
    assert run_records(resumed) == run_records(whole)


@needs_extra
@pytest.mark.slow
def test_a_killed_ppo_run_resumes_to_the_uninterrupted_runs_files(tmp_path: Path) -> None:
    """``kill -9`` once two iterations are logged (wherever the process then is, inside an update or writing), then
    ``train --resume``: the same summary and tables as a run that went through."""
    cut, ref = kill_and_resume(tmp_path, ["--mode", "lm-policy", "--lm-features", "onehot", *FAST,
                                          "--heldout-episodes", "20"], "FrozenLake-v1.deterministic", 6, 2)
    assert cut == ref


@needs_extra
@pytest.mark.slow
def test_the_checkpoint_holds_the_learner_as_arrays_and_json_and_nothing_pickled(tmp_path: Path) -> None:
    assert main(lake(tmp_path, "--lm-features", "onehot", *FAST, "--iterations", "2")) == 0
    rd = tmp_path / "FrozenLake-v1" / "r"
    with zipfile.ZipFile(rd / "checkpoint.npz") as z:  # every member a plain .npy, loadable without pickle
        for name in z.namelist():
            np.load(z.open(name), allow_pickle=False)
    state = load_checkpoint(rd / "checkpoint.npz")["learner"]["state"]
    assert state["settings"]["algorithm"] == "ppo" and state["settings"]["n_steps"] == 64
    assert state["updates"] == 2 and state["num_timesteps"] == 128 and state["n_updates"] == 4
    policy = state["policy"]
    assert policy and not any(name.endswith("table") for name in policy)  # the frozen features are rebuilt
    assert all(isinstance(v, np.ndarray) and np.isfinite(v).all() for v in policy.values())
    moments = state["optimizer"]["state"]
    assert len(moments) == len(policy) and all(set(m) == {"step", "exp_avg", "exp_avg_sq"} for m in moments)
    assert state["optimizer"]["groups"][0]["lr"] == 3e-4
    assert set(state["rng"]) >= {"python", "numpy", "torch"}


@needs_extra
@pytest.mark.slow
def test_a_learner_state_saved_with_other_settings_is_refused_and_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(lake(tmp_path, "--lm-features", "onehot", *FAST, "--iterations", "2")) == 0
    rd = tmp_path / "FrozenLake-v1" / "r"
    state = load_checkpoint(rd / "checkpoint.npz")
    state["learner"]["state"]["settings"]["n_steps"] = 128
    save_checkpoint(rd / "checkpoint.npz", state)
    before = {p: p.read_bytes() for p in rd.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(rd), "--iterations", "3"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "cannot load" in line and "other settings (n_steps)" in line, line
    assert before == {p: p.read_bytes() for p in rd.rglob("*") if p.is_file()}


@needs_extra
@pytest.mark.slow
def test_a_smollm2_run_stopped_and_resumed_equals_an_uninterrupted_one(gguf: Path, tmp_path: Path) -> None:  # noqa: F811
    """The real model's frozen encodings (from the shared cache), PPO, 4 iterations against 2 then a resume, each in
    its own process as a user runs them."""
    env = {**os.environ, "LLM_POLICY_GEN_WORKERS": "1"}
    model = ("--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), *FAST)

    def cli(*args: str) -> None:
        out = subprocess.run([sys.executable, "-m", "llm_policy_gen", *args], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=900)
        assert out.returncode == 0, out.stderr

    cli(*lake(tmp_path / "whole", *model, "--iterations", "4"))
    cli(*lake(tmp_path / "part", *model, "--iterations", "2"))
    rd = tmp_path / "part" / "FrozenLake-v1" / "r"
    cli("train", "--resume", str(rd), "--iterations", "4", "--lm-cache", str(LM_CACHE))  # the cache, named again
    whole = tmp_path / "whole" / "FrozenLake-v1" / "r"
    assert run_records(rd) == run_records(whole)
    from llm_policy_gen.lm.backbone import model_identity

    config = json.loads((rd / "config.json").read_text())
    assert config["lm_model"]["sha256"] == model_identity(gguf).sha256 and config["features"] == "lm"
