"""A mode declares what it needs (issue 60 item 2): a mode that proposes nothing (``q-learning``, ``lm-policy``) is
built with no backend object, and its console, run directory, summary and report name the method and its model, with
the tables it judges per iteration."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from run_helpers import cfg

from llm_policy_gen.cli import main
from llm_policy_gen.commands.train import summary_line
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.lm import EXTRA_MODULES
from llm_policy_gen.modes.lm_policy import LmPolicyMode
from llm_policy_gen.run.prepare import prepare

needs_extra = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in EXTRA_MODULES),
                                 reason="the lm-policy extra is not installed (make test installs it)")


def _only_run(logs: Path) -> Path:
    (run,) = [p for p in (logs / "FrozenLake-v1").iterdir() if not p.name.startswith(".")]
    return run


def _train(logs: Path, *args: str) -> None:
    assert main(["train", "--env", "FrozenLake-v1.deterministic", "--logs-dir", str(logs), "--no-plots",
                 "--no-progress", "--heldout-episodes", "10", "--iterations", "2", *args]) == 0


@pytest.mark.parametrize("args", [["--backend", "q-learning"], ["--mode", "q-learning"]],
                         ids=["old-spelling", "mode"])
def test_q_learning_is_built_without_a_backend_and_named_by_its_method(tmp_path: Path, args: list[str],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    setting = {args[0].removeprefix("--"): args[1]}
    given = TrainConfig.build(({"env_id": "FrozenLake-v1.deterministic", **setting}, "test"))
    assert prepare(given).backend is None  # no backend object: the run builds none
    _train(tmp_path, *args)
    run = _only_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text())
    assert (summary["backend"], summary["model"], summary["is_llm"], summary["candidates"]) == \
        ("q-learning", "", False, 1)
    assert config["backend"]["method"] == "q-learning" and "offline" not in json.dumps(config["backend"])
    assert run.name.endswith("_q-learning_s0")
    err = capsys.readouterr()
    assert "method: q-learning (--mode q-learning proposes nothing, no backend is built; 1 table judged per " \
           "iteration)" in err.err
    assert "[q-learning] held-out mean" in err.out and "no model calls" in err.out


def test_an_lm_policy_run_is_named_by_its_model() -> None:
    mode = LmPolicyMode()
    smol = TrainConfig.build(({"mode": "lm-policy", "lm_model": "/m/SmolLM2-135M-Instruct.Q4_1.gguf"}, "test"))
    method = mode.method(smol)
    assert (method.name, method.model, method.is_llm) == \
        ("lm-policy(SmolLM2-135M-Instruct.Q4_1)", "/m/SmolLM2-135M-Instruct.Q4_1.gguf", True)
    assert mode.method(TrainConfig.build(({"mode": "lm-policy", "lm_features": "onehot"}, "test"))).name == \
        "lm-policy(onehot)"
    folder = TrainConfig.build(({"mode": "lm-policy", "lm_model": "/m/SmolLM2-135M/", "lm_features": "random"}, "t"))
    assert mode.method(folder).name == "lm-policy(SmolLM2-135M, random)"


def test_the_summary_line_of_a_method_names_no_backend() -> None:
    s = {"env_id": "FrozenLake-v1", "mode": "lm-policy", "backend": "lm-policy(SmolLM2-135M-Instruct.Q4_1)",
         "model": "/m/SmolLM2-135M-Instruct.Q4_1.gguf", "is_llm": True, "solved": False, "reward_threshold": 0.7,
         "best_heldout_mean": 0.5, "best_heldout_episodes": 10, "iterations": 2, "episodes_total": 20,
         "env_steps_total": 100, "llm_calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0,
         "wall_s": 1.0, "stop_reason": "iterations done", "never_accepted": False}
    line = summary_line(s)
    assert line.startswith("FrozenLake-v1 [lm-policy(SmolLM2-135M-Instruct.Q4_1)] held-out mean 0.50")
    assert "no model calls" in line and "$" not in line and ".gguf" not in line


@needs_extra
def test_an_lm_policy_run_has_no_offline_stand_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llm_policy_gen.report import write_report

    _train(tmp_path, "--mode", "lm-policy", "--lm-features", "onehot", "--lm-n-steps", "64", "--lm-batch-size", "32",
           "--lm-epochs", "1")
    run = _only_run(tmp_path)
    assert run.name.endswith("_lm-policy-onehot_s0")
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["backend"], summary["is_llm"], summary["candidates"]) == ("lm-policy(onehot)", False, 1)
    out = capsys.readouterr()
    assert "1 table judged per iteration" in out.err and "offline" not in out.err + out.out
    (page,) = write_report(run)
    header = page.read_text(encoding="utf-8").split("</header>")[0]
    assert "lm-policy(onehot)" in header and "offline" not in header


def test_a_plain_table_run_still_has_its_backend(tmp_path: Path) -> None:
    prepared = prepare(cfg(tmp_path))
    assert (prepared.backend, prepared.label) == ("offline", "offline")


def test_q_learning_runs_its_own_loop_like_lm_policy() -> None:
    from llm_policy_gen.modes.base import OwnLoop
    from llm_policy_gen.modes.qlearning import QLearningMode

    assert isinstance(QLearningMode(), OwnLoop) and isinstance(LmPolicyMode(), OwnLoop)
