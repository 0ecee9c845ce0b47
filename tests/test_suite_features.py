"""The features experiment as a suite (``llm_policy_gen/suites/data/features.toml``, issue 62 item 6): it loads, every
method entry parses and applies to every task, its tasks and update counts are ``bench/lm_features.py``'s defaults,
its models are named portably, and its goals are gymnasium's thresholds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
from run_helpers import load_script

from llm_policy_gen.envs.catalog import get_spec, gym_id
from llm_policy_gen.lm.meaning import check_meaning
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.sweep.methods import check_options, parse_method, parse_methods

ROOT = Path(__file__).resolve().parents[1]


def bench_script() -> Any:
    return load_script(ROOT / "bench" / "lm_features.py", "lm_features")


def test_the_suite_loads_with_the_five_tasks_their_update_counts_and_ten_seeds() -> None:
    suite = load_suite("features")
    bench = bench_script()
    assert [(t.key, t.env_id, t.settings["iterations"]) for t in suite.tasks] == \
        [(t.key, t.env_id, t.iterations) for t in bench.TASKS]
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
