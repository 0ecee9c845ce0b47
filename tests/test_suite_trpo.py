"""The founding report's experiment as a suite (issue 62 item 6; it replaced ``bench/lm_trpo_vs_ppo.py``): the
language model with TRPO, the one-hot control and the zoo's PPO at the language-model run's counted steps, all three
judged on the same seeds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import read_records
from llm_policy_gen.sweep.methods import parse_method


def test_the_trpo_suite_compares_at_equal_counted_interaction() -> None:
    suite = load_suite("trpo")
    assert [t.env_id for t in suite.tasks] == ["CartPole-v1", "Hopper-v5"]
    assert [t.settings["max_steps"] for t in suite.tasks] == [100_000, 50_000]
    assert suite.task("cartpole").seeds == tuple(range(10)) and suite.task("hopper").seeds == tuple(range(5))
    lm, control, ppo = (suite.method(x) for x in ("smollm2-trpo", "onehot-trpo", "ppo"))
    for m in (lm, control):  # no keeper: every counted step is a training step of the on-policy learner
        assert parse_method(m.entry).options["select"] == "none"
        assert parse_method(m.entry).options["lm_learner"] == "trpo"
    assert parse_method(control.entry).options["lm_features"] == "onehot"
    assert ppo.budget == "steps-of:smollm2-trpo" and parse_method(ppo.entry).options["peer_algo"] == "ppo"


@pytest.mark.slow
def test_the_peer_gets_the_counted_steps_the_trpo_run_used_on_the_same_seed(tmp_path: Path) -> None:
    """The suite's control and PPO entries (what ``bench/lm_trpo_vs_ppo.py --features onehot`` ran) on a suite file
    of 512 steps: TRPO over one-hot states with no keeper episodes, then the zoo's PPO at the steps it counted."""
    pytest.importorskip("sb3_contrib")
    if importlib.util.find_spec("rl_zoo3") is None:  # found, not imported: importing it patches gymnasium's TimeLimit
        pytest.skip("rl-zoo3 is not installed")
    suite = load_suite("trpo")
    control, ppo = suite.method("onehot-trpo"), suite.method("ppo")
    toml = tmp_path / "small.toml"
    toml.write_text(f'[suite]\nname = "small"\nseeds = "0"\n\n[[method]]\nlabel = "onehot-trpo"\n'
                    f'entry = "{control.entry}"\nbudget = "own"\n\n[[method]]\nlabel = "ppo"\nentry = "{ppo.entry}"\n'
                    f'budget = "steps-of:onehot-trpo"\niterations = 2\n\n[[task]]\nkey = "cartpole"\n'
                    f'env_id = "CartPole-v1"\nbudget = 0\ngoal = 475.0\n'
                    f"settings = {{ max_steps = 512, iterations = 100000, heldout_episodes = 5 }}\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["bench", str(toml), "--out", str(out), "--no-progress"]) == 0
    by = {r.method: r for r in read_records(out)}
    lm, peer = by["onehot-trpo"], by["ppo"]
    assert lm.settings["lm_learner"] == "trpo" and lm.result["episodes"] > 0
    assert peer.budget == {"max_steps": lm.result["env_steps"]} and peer.result["env_steps"] >= lm.result["env_steps"]
    assert peer.result["peer_source"].startswith("rl-zoo3 ")
