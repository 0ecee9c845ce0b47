"""The founding report's experiment as a suite (issue 62 item 6): the language model with TRPO, the one-hot control
and the zoo's PPO at the language-model run's counted steps, all three judged on the same seeds."""

from __future__ import annotations

from llm_policy_gen.suites.definition import load_suite
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
