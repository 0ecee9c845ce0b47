"""The q-learning and random baselines: known updates, greedy tables, seeding, and whole runs through the loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_policy_gen.backends import BackendOptions, make_backend, parse_backend_spec
from llm_policy_gen.backends.base import OutputFormat
from llm_policy_gen.backends.baselines import QLearningBackend, RandomTableBackend, make_baseline
from llm_policy_gen.collect import Episode
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import BackendConfigError, BackendError, UserError
from llm_policy_gen.loop import train
from llm_policy_gen.memory import ExperienceMemory
from llm_policy_gen.prompt import PromptContext
from llm_policy_gen.runlog import read_jsonl
from llm_policy_gen.schema import json_schema_for, parse_proposal

TABLE = OutputFormat("policy_table", json_schema_for("table"))


def episode(states: list[int], actions: list[int], rewards: list[float], terminated: bool = True,
            truncated: bool = False) -> Episode:
    return Episode(0, np.array(states), np.array(actions), np.array(rewards, dtype=float), terminated, truncated)


def context(env_id: str, memory: ExperienceMemory, iteration: int = 1, table: np.ndarray | None = None,
            fmt: str = "table") -> PromptContext:
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    return PromptContext(
        spec=spec, observation=obs, actions=acts, iteration=iteration,
        current_table=spec.default_table() if table is None else table, best_eval_mean=0.0, eval_episodes=3,
        memory=memory, evidence=memory.evidence(), output_format=fmt,
    )


def lake_memory() -> ExperienceMemory:
    return ExperienceMemory(16, 4)


def test_registry_builds_both_baselines_and_says_they_are_not_llms() -> None:
    for name, cls in (("q-learning", QLearningBackend), ("random", RandomTableBackend)):
        b = make_backend(name, BackendOptions(seed=3))
        assert isinstance(b, cls) and b.is_llm is False and b.name == name and b.seed == 3
        d = b.describe()
        assert "not an LLM" in d["model"] and "not an LLM" in d["note"] and d["is_llm"] is False
    with pytest.raises(BackendConfigError):
        parse_backend_spec("q-learning:big")
    with pytest.raises(UserError):
        make_baseline("sarsa")
    with pytest.raises(UserError):
        QLearningBackend(alpha=0.0)


def test_q_learning_updates_by_hand() -> None:
    """Q(0,right) and Q(1,right) after a two-step episode that ends at the goal, then once more."""
    mem = lake_memory()
    q = QLearningBackend(alpha=0.5, gamma=0.9, q_init=0.0)
    mem.add([episode([0, 1], [2, 2], [0.0, 1.0])])
    table, _ = q.propose(context("FrozenLake-v1", mem))
    assert q.q is not None
    assert q.q[0, 2] == 0.0  # 0 + 0.9 * max Q(1) = 0 at the time of the update
    assert q.q[1, 2] == 0.5  # terminal: 0.5 * (1 - 0)
    assert table[1] == 2 and table[0] == 0  # ties keep the current action
    # The same memory again: nothing new to learn.
    q.propose(context("FrozenLake-v1", mem, 2))
    assert q.updates == 2
    mem.add([episode([0, 1], [2, 2], [0.0, 1.0])])
    table, rationale = q.propose(context("FrozenLake-v1", mem, 3))
    assert q.q[0, 2] == pytest.approx(0.5 * 0.9 * 0.5)
    assert q.q[1, 2] == pytest.approx(0.75)
    assert table[0] == 2 and q.updates == 4
    assert "2 updates from 1 new episodes" in rationale


def test_time_limit_step_is_not_bootstrapped() -> None:
    mem = lake_memory()
    q = QLearningBackend(alpha=1.0, gamma=0.9, q_init=0.0)
    mem.add([episode([0, 4, 8], [1, 1, 1], [0.0, 0.0, 5.0], terminated=False, truncated=True)])
    q.propose(context("FrozenLake-v1", mem))
    assert q.updates == 2 and q.q is not None and q.q[8, 1] == 0.0


@pytest.mark.parametrize(("rewards", "expected"), [([1.0, 1.0, 1.0], 100.0), ([0.0, 0.0], 0.0)])
def test_optimistic_init_from_the_first_batch(rewards: list[float], expected: float) -> None:
    mem = lake_memory()
    mem.add([episode(list(range(len(rewards))), [0] * len(rewards), rewards)])
    q = QLearningBackend()
    q.propose(context("FrozenLake-v1", mem))
    assert q.q_init == pytest.approx(expected)
    assert "q_init" in q.describe()


def test_answers_parse_to_the_greedy_table() -> None:
    mem = lake_memory()
    mem.add([episode([0, 1, 2], [2, 2, 1], [0.0, 0.0, 1.0])])
    ctx = context("FrozenLake-v1", mem)
    q = QLearningBackend(alpha=0.5, gamma=0.9, q_init=0.0)
    comp = q.complete([], TABLE, ctx)
    parsed = parse_proposal(comp.text, ctx.current_table, 4)
    np.testing.assert_array_equal(parsed.table, q.greedy(ctx.current_table))
    assert comp.input_tokens == comp.output_tokens == 0
    with pytest.raises(BackendError):
        q.complete([], TABLE, None)


def test_edits_format_round_trips() -> None:
    edits = pytest.importorskip("llm_policy_gen.edits")
    ctx = context("CartPole-v1", ExperienceMemory(324, 2), iteration=4, fmt="edits")
    r = RandomTableBackend(seed=5)
    comp = r.complete([], OutputFormat("policy_edits", None), ctx)
    parsed = edits.apply_edits_answer(comp.text, ctx.current_table, 2, ctx.observation)
    np.testing.assert_array_equal(parsed.table, r.propose(ctx)[0])


def test_random_tables_are_seeded_by_seed_and_iteration() -> None:
    mem = ExperienceMemory(324, 2)
    a = RandomTableBackend(seed=1).propose(context("CartPole-v1", mem, 2))[0]
    b = RandomTableBackend(seed=1).propose(context("CartPole-v1", mem, 2))[0]
    c = RandomTableBackend(seed=1).propose(context("CartPole-v1", mem, 3))[0]
    d = RandomTableBackend(seed=2).propose(context("CartPole-v1", mem, 2))[0]
    np.testing.assert_array_equal(a, b)
    assert (a != c).any() and (a != d).any()
    assert set(np.unique(a)) == {0, 1} and 0.4 < a.mean() < 0.6
    lake = RandomTableBackend(seed=1).propose(context("FrozenLake-v1", lake_memory()))[0]
    assert lake.shape == (16,) and lake.min() >= 0 and lake.max() <= 3


@pytest.mark.parametrize("name", ["q-learning", "random"])
def test_whole_runs_count_episodes_like_any_backend(tmp_path, name: str) -> None:
    cfg = TrainConfig(env_id="FrozenLake-v1", backend=name, iterations=4, logs_dir=str(tmp_path), progress=False,
                      plots=False, heldout_episodes=5, seed=1)
    res = train(cfg, log=lambda _m: None)
    s = res.summary
    assert s["backend"] == name and s["is_llm"] is False and s["iterations"] == 4
    assert s["llm_calls"] == 4 and s["input_tokens"] == 0 and s["cost_usd"] == 0
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert events[-1]["episodes_total"] == s["episodes_total"]
    assert all(e["valid"] for e in events)
    config = json.loads((res.run_dir / "config.json").read_text())
    assert config["backend"]["is_llm"] is False and "not an LLM" in config["backend"]["note"]
    again = train(cfg, log=lambda _m: None).summary
    assert (again["best_eval_mean"], again["episodes_total"]) == (s["best_eval_mean"], s["episodes_total"])


@pytest.mark.slow
def test_q_learning_solves_the_deterministic_lake(tmp_path) -> None:
    cfg = TrainConfig(env_id="FrozenLake-v1", backend="q-learning", iterations=30, logs_dir=str(tmp_path),
                      progress=False, plots=False, heldout_episodes=10)
    assert train(cfg, log=lambda _m: None).summary["best_eval_mean"] == 1.0
