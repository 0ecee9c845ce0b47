"""The features experiment as a suite (``llm_policy_gen/suites/data/features.toml``, issue 62 item 6; it replaced
``bench/lm_features.py``): it loads, every method entry parses and applies to every task, its tasks and update counts
are the script's, its models are named portably, and its goals are gymnasium's thresholds; a method of the user's
runs on its tasks at its own budget, each task's runs in the task's own folder."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
from test_lm_policy import needs_extra

from llm_policy_gen.cli import main
from llm_policy_gen.envs.catalog import get_spec, gym_id
from llm_policy_gen.lm.meaning import check_meaning
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import read_records
from llm_policy_gen.sweep.methods import check_options, parse_method, parse_methods

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")


def test_the_suite_loads_with_the_five_tasks_their_update_counts_and_ten_seeds() -> None:
    suite = load_suite("features")
    assert [(t.key, t.env_id, t.settings["iterations"]) for t in suite.tasks] == [
        ("frozenlake", "FrozenLake-v1.deterministic", 40), ("frozenlake8x8", "FrozenLake-v1.8x8", 120),
        ("cartpole", "CartPole-v1", 80), ("taxi", "Taxi-v4", 200), ("mountaincar", "MountainCar-v0", 120)]
    assert all(t.seeds == tuple(range(10)) and t.settings["heldout_episodes"] == 100 for t in suite.tasks)


def test_every_method_parses_applies_to_every_task_and_counts_its_own_updates() -> None:
    suite = load_suite("features")
    methods = parse_methods(",".join(m.entry for m in suite.methods))
    assert [m.label for m in methods] == [m.label for m in suite.methods]
    for spec, m in zip(suite.methods, methods, strict=True):
        assert spec.budget == "own" and parse_method(spec.entry) == m and m.mode == "lm-policy"
        for task in suite.tasks:
            check_options(m, {**task.settings, "env_id": task.env_id})
    options = {m.label: m.options for m in methods}
    assert {o.get("lm_features", "lm") for o in options.values()} == {"lm", "onehot", "random", "index", "thermometer"}
    # each model with both texts, and random features at each model's width
    for model in ("models:smollm2", "models:qwen2.5-coder-0.5b"):
        assert {(o.get("lm_features", "lm"), o.get("lm_state_text", "plain")) for o in options.values()
                if o.get("lm_model") == model} == {("lm", "plain"), ("lm", "meaning"), ("random", "plain")}
    assert all(str(o.get("lm_model", "models:")).startswith("models:") for o in options.values())  # no paths


def test_the_goals_are_gymnasiums_thresholds_and_every_task_has_a_meaning_text() -> None:
    for task in load_suite("features").tasks:
        spec = get_spec(task.env_id)
        threshold = spec.reward_threshold or gymnasium.spec(gym_id(task.env_id)).reward_threshold
        assert task.goal == task.threshold == threshold, task.key
        check_meaning(spec, spec.observation_discretizer())


@needs_extra
@pytest.mark.slow
def test_a_method_of_the_users_runs_on_the_tasks_without_an_episode_budget_at_its_own(tmp_path: Path) -> None:
    """The features tasks give no episode budget (0): a method given to ``--methods`` (the ``task`` budget) runs at
    its own, here TRPO over one-hot states for 2 updates (what ``bench/lm_features.py --learner trpo --iterations 2
    --features onehot`` ran); FrozenLake-v1.deterministic and its 8x8 variant each run in their task's folder."""
    out = tmp_path / "out"
    entry = ("tiny=@lm-policy[lm_features=onehot;lm_learner=trpo;iterations=2;lm_n_steps=32;lm_batch_size=32;"
             "lm_epochs=1;lm_net_arch=8;heldout_episodes=5]")
    assert main(["bench", "features", "--tasks", "frozenlake,frozenlake8x8", "--seeds", "0", "--methods", entry,
                 "--out", str(out), "--no-progress"]) == 0
    records = read_records(out)
    assert [(r.task, r.budget, r.result["iterations"]) for r in records] == [("frozenlake", {}, 2),
                                                                             ("frozenlake8x8", {}, 2)]
    for r, states in zip(records, (16, 64), strict=True):
        view = RunDir(out / r.task / "runs" / "FrozenLake-v1" / "tiny_s0").read()
        assert view.record["features_width"] == states and view.record["learner"]["class"] == "TRPO"
        assert view.summary["best_heldout_mean"] == r.heldout
