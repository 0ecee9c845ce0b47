"""The kept-table-q and random baselines: known updates, greedy tables, seeding, and whole runs through the engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_policy_gen.backends import BACKENDS, parse_backend_spec
from llm_policy_gen.collect import Episode
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import BackendConfigError, UserError
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.prompting.builder import PromptContext
from llm_policy_gen.prompting.memory import ExperienceMemory
from llm_policy_gen.proposers.kept_table_q import KeptTableQProposer
from llm_policy_gen.proposers.random import RandomProposer
from llm_policy_gen.run import train
from llm_policy_gen.storage.runlog import read_jsonl


def episode(states: list[int], actions: list[int], rewards: list[float], terminated: bool = True,
            truncated: bool = False) -> Episode:
    return Episode(0, np.array(states), np.array(actions), np.array(rewards, dtype=float), terminated, truncated)


def context(env_id: str, memory: ExperienceMemory, iteration: int = 1, table: np.ndarray | None = None,
            fmt: str = "table", fresh: list[Episode] | None = None) -> PromptContext:
    """``fresh``: the episodes counted since the last proposal (default: every episode in ``memory``)."""
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    return PromptContext(
        spec=spec, observation=obs, actions=acts, iteration=iteration,
        current_table=spec.default_table() if table is None else table, best_test_mean=0.0, test_episodes=3,
        memory=memory, evidence=memory.evidence(), fmt=make_format(fmt),
        target=Target("action", n_actions=acts.n_actions), fresh=list(memory.episodes if fresh is None else fresh),
    )


def lake_memory() -> ExperienceMemory:
    return ExperienceMemory(16, 4)


def greedy(proposer, ctx) -> tuple[np.ndarray, str]:
    (table, rationale), = proposer.tables(ctx, 1)
    return table, rationale


def test_registry_builds_both_baselines_and_says_they_are_not_llms() -> None:
    for name, cls in (("kept-table-q", KeptTableQProposer), ("random", RandomProposer)):
        assert parse_backend_spec(name) == (name, "")
        info = BACKENDS.entry(name).info
        assert info["kind"] == "proposer" and info["is_llm"] is False and "not an LLM" in info["description"]
        b = BACKENDS.load(name)(seed=3)
        assert isinstance(b, cls) and b.is_llm is False and b.name == name and b.seed == 3
        d = b.describe()
        assert "not an LLM" in d["model"] and "not an LLM" in d["note"] and d["is_llm"] is False
    with pytest.raises(BackendConfigError, match="kept-table-q takes no model"):
        parse_backend_spec("kept-table-q:big")
    with pytest.raises(BackendConfigError, match="unknown backend 'sarsa'"):
        parse_backend_spec("sarsa")
    with pytest.raises(UserError, match="alpha"):
        KeptTableQProposer(alpha=0.0)
    with pytest.raises(UserError, match="gamma"):
        KeptTableQProposer(gamma=1.0)


def test_q_learning_updates_by_hand() -> None:
    """Q(0,right) and Q(1,right) after a two-step episode that ends at the goal, then once more."""
    mem = lake_memory()
    q = KeptTableQProposer(alpha=0.5, gamma=0.9, q_init=0.0)
    mem.add([episode([0, 1], [2, 2], [0.0, 1.0])])
    table, _ = greedy(q, context("FrozenLake-v1", mem))
    assert q.q is not None
    assert q.q[0, 2] == 0.0  # 0 + 0.9 * max Q(1) = 0 at the time of the update
    assert q.q[1, 2] == 0.5  # terminal: 0.5 * (1 - 0)
    assert table[1] == 2 and table[0] == 0  # ties keep the current action
    # No episode counted since the last call: nothing new to learn.
    greedy(q, context("FrozenLake-v1", mem, 2, fresh=[]))
    assert q.updates == 2
    new = episode([0, 1], [2, 2], [0.0, 1.0])
    mem.add([new])
    table, rationale = greedy(q, context("FrozenLake-v1", mem, 3, fresh=[new]))
    assert q.q[0, 2] == pytest.approx(0.5 * 0.9 * 0.5)
    assert q.q[1, 2] == pytest.approx(0.75)
    assert table[0] == 2 and q.updates == 4
    assert "2 updates from 1 new episodes" in rationale


def test_time_limit_step_is_not_bootstrapped() -> None:
    mem = lake_memory()
    q = KeptTableQProposer(alpha=1.0, gamma=0.9, q_init=0.0)
    mem.add([episode([0, 4, 8], [1, 1, 1], [0.0, 0.0, 5.0], terminated=False, truncated=True)])
    greedy(q, context("FrozenLake-v1", mem))
    assert q.updates == 2 and q.q is not None and q.q[8, 1] == 0.0


@pytest.mark.parametrize(("rewards", "expected"), [([1.0, 1.0, 1.0], 100.0), ([0.0, 0.0], 0.0)])
def test_optimistic_init_from_the_first_batch(rewards: list[float], expected: float) -> None:
    mem = lake_memory()
    mem.add([episode(list(range(len(rewards))), [0] * len(rewards), rewards)])
    q = KeptTableQProposer()
    greedy(q, context("FrozenLake-v1", mem))
    assert q.q_init == pytest.approx(expected)
    assert "q_init" in q.describe()


def test_answers_parse_to_the_greedy_table() -> None:
    mem = lake_memory()
    mem.add([episode([0, 1, 2], [2, 2, 1], [0.0, 0.0, 1.0])])
    ctx = context("FrozenLake-v1", mem)
    q = KeptTableQProposer(alpha=0.5, gamma=0.9, q_init=0.0)
    (a,) = q.propose(ctx, [], 1)
    assert a.ok and a.errors == [] and a.candidate == 1
    np.testing.assert_array_equal(a.parsed.value, q.greedy(ctx.current_table))
    assert a.usage.calls == 1 and a.usage.input_tokens == a.usage.output_tokens == 0 and a.usage.cost_usd == 0
    assert json.loads(a.text)["rows"][0] == {"state": 0, "action": int(a.parsed.value[0])}


def test_k_q_learning_candidates_are_the_greedy_table_then_boltzmann_samples() -> None:
    mem = lake_memory()
    mem.add([episode([0, 1, 2, 6], [2, 2, 1, 1], [0.0, 0.0, 0.0, 1.0])])
    q = KeptTableQProposer(seed=4, alpha=0.5, gamma=0.9, q_init=0.5)
    answers = q.propose(context("FrozenLake-v1", mem, 2), [], 3)
    assert [a.candidate for a in answers] == [1, 2, 3] and all(a.ok for a in answers)
    np.testing.assert_array_equal(answers[0].parsed.value, q.greedy(get_spec("FrozenLake-v1").default_table()))
    again = KeptTableQProposer(seed=4, alpha=0.5, gamma=0.9, q_init=0.5)
    for a, b in zip(answers, again.propose(context("FrozenLake-v1", mem, 2), [], 3), strict=True):
        np.testing.assert_array_equal(a.parsed.value, b.parsed.value)
    assert "Boltzmann sample 2" in json.loads(answers[1].text)["rationale"]


def test_q_learning_state_round_trip() -> None:
    mem = lake_memory()
    first = episode([0, 1, 2], [2, 2, 1], [0.0, 0.0, 1.0])
    mem.add([first])
    a = KeptTableQProposer(alpha=0.5, gamma=0.9)
    greedy(a, context("FrozenLake-v1", mem, 1, fresh=[first]))
    b = KeptTableQProposer(alpha=0.5, gamma=0.9)
    b.load_state_dict(a.state_dict())
    more = episode([0, 4, 8], [1, 1, 2], [0.0, 0.0, 0.0])
    ta, _ = greedy(a, context("FrozenLake-v1", mem, 2, fresh=[more]))
    tb, _ = greedy(b, context("FrozenLake-v1", mem, 2, fresh=[more]))
    np.testing.assert_array_equal(ta, tb)
    assert a.q is not None and b.q is not None and np.array_equal(a.q, b.q) and a.updates == b.updates == 6
    fresh = KeptTableQProposer()
    fresh.load_state_dict({})
    assert fresh.q is None and fresh.updates == 0


def test_edits_format_round_trips() -> None:
    ctx = context("CartPole-v1", ExperienceMemory(324, 2), iteration=4, fmt="edits")
    r = RandomProposer(seed=5)
    (a,) = r.propose(ctx, [], 1)
    assert "edits" in json.loads(a.text)
    np.testing.assert_array_equal(a.parsed.value, r.tables(ctx, 1)[0][0])


def test_random_tables_are_seeded_by_seed_iteration_and_candidate() -> None:
    mem = ExperienceMemory(324, 2)
    a = RandomProposer(seed=1).tables(context("CartPole-v1", mem, 2), 2)
    b = RandomProposer(seed=1).tables(context("CartPole-v1", mem, 2), 2)
    c = RandomProposer(seed=1).tables(context("CartPole-v1", mem, 3), 1)[0][0]
    d = RandomProposer(seed=2).tables(context("CartPole-v1", mem, 2), 1)[0][0]
    np.testing.assert_array_equal(a[0][0], b[0][0])
    np.testing.assert_array_equal(a[1][0], b[1][0])
    assert (a[0][0] != a[1][0]).any() and (a[0][0] != c).any() and (a[0][0] != d).any()
    assert set(np.unique(a[0][0])) == {0, 1} and 0.4 < a[0][0].mean() < 0.6
    lake = RandomProposer(seed=1).tables(context("FrozenLake-v1", lake_memory()), 1)[0][0]
    assert lake.shape == (16,) and lake.min() >= 0 and lake.max() <= 3


@pytest.mark.parametrize("name", ["kept-table-q", "random"])
def test_whole_runs_count_episodes_like_any_backend(tmp_path, name: str) -> None:
    cfg = TrainConfig(env_id="FrozenLake-v1", backend=name, iterations=4, logs_dir=str(tmp_path), progress=False,
                      plots=False, heldout_episodes=5, seed=1, candidates=3)
    res = train(cfg, log=lambda _m: None)
    s = res.summary
    assert s["backend"] == name and s["is_llm"] is False and s["iterations"] == 4 and s["candidates"] == 3
    assert s["llm_calls"] == 4 * 3 and s["input_tokens"] == 0 and s["cost_usd"] == 0
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert events[-1]["episodes_total"] == s["episodes_total"]
    assert all(e["valid"] and e["candidates"] == 3 and len(e["candidate_means"]) == 3 for e in events)
    lines = read_jsonl(res.run_dir / "transcripts.jsonl")
    assert [(t["iteration"], t["candidate"]) for t in lines] == [(i, c) for i in range(1, 5) for c in (1, 2, 3)]
    assert all(t["valid"] and "not an LLM" in t["model"] for t in lines)
    config = json.loads((res.run_dir / "config.json").read_text())
    assert config["backend"]["is_llm"] is False and "not an LLM" in config["backend"]["note"]
    again = train(cfg, log=lambda _m: None).summary
    assert (again["best_eval_mean"], again["episodes_total"]) == (s["best_eval_mean"], s["episodes_total"])


@pytest.mark.slow
def test_q_learning_solves_the_deterministic_lake(tmp_path) -> None:
    cfg = TrainConfig(env_id="FrozenLake-v1.deterministic", backend="kept-table-q", iterations=30,
                      logs_dir=str(tmp_path), progress=False, plots=False, heldout_episodes=10)
    assert train(cfg, log=lambda _m: None).summary["best_eval_mean"] == 1.0
