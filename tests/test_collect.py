import numpy as np
import pytest

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.tailor import apply_env_kwargs
from llm_policy_gen.policy import Policy, TablePolicy


def test_same_seeds_same_episodes_and_evaluate_agrees_with_collect():
    spec = get_spec("CartPole-v1")
    table = spec.prior_table()
    with Collector(spec, batch_size=4) as c:
        a = c.collect(table, [1, 2, 3, 4, 5])
        b = c.collect(table, [1, 2, 3, 4, 5])
        r = c.evaluate(table, [1, 2, 3, 4, 5])
    assert [e.ret for e in a] == [e.ret for e in b]
    assert all(np.array_equal(x.states, y.states) for x, y in zip(a, b, strict=True))
    assert r.returns.tolist() == [e.ret for e in a]
    assert r.steps == sum(e.length for e in a)


def test_episode_records_states_actions_rewards_consistent_with_table():
    spec = get_spec("CartPole-v1")
    table = spec.prior_table()
    with Collector(spec) as c:
        (ep,) = c.collect(table, [7])
    assert ep.length == ep.states.size == ep.actions.size == ep.rewards.size
    assert np.array_equal(ep.actions, table[ep.states])
    assert ep.ret == ep.length  # CartPole: +1 per step
    assert ep.terminated or ep.truncated


def test_exploration_is_seeded():
    spec = get_spec("CartPole-v1")
    table = spec.default_table()
    with Collector(spec) as c:
        a = c.collect(table, [3, 4], epsilon=0.5, rng=np.random.default_rng(1))
        b = c.collect(table, [3, 4], epsilon=0.5, rng=np.random.default_rng(1))
    assert [e.actions.tolist() for e in a] == [e.actions.tolist() for e in b]
    assert any(e.actions.any() for e in a)  # some random pushes to the right happened


def test_frozen_lake_discrete_states():
    spec = get_spec("FrozenLake-v1.deterministic")
    table = np.full(16, 2)  # always right: 0 -> 1 -> 2 -> 3 then stuck at the wall until the time limit
    with Collector(spec) as c:
        (ep,) = c.collect(table, [0])
    assert ep.states[:4].tolist() == [0, 1, 2, 3]
    assert ep.truncated and ep.ret == 0.0 and ep.length == 100


# ----------------------------------------------------------------------------- several policies, any policy
def three_tables(spec):
    rng = np.random.default_rng(4)
    n, k = spec.n_states, spec.n_actions
    first = spec.prior_table() if spec.prior_table() is not None else rng.integers(0, k, n)
    return [first, rng.integers(0, k, n), np.full(n, spec.default_action)]


@pytest.mark.parametrize(("env_id", "kwargs"), [("CartPole-v1", {}), ("FrozenLake-v1", {"is_slippery": True})])
@pytest.mark.parametrize("batch_size", [32, 5])
def test_collect_many_gives_what_separate_collects_give(env_id, kwargs, batch_size):
    spec = apply_env_kwargs(get_spec(env_id), kwargs).validate()
    tables = three_tables(spec)
    seeds = [11, 12, 13, 14, 15, 16, 17]
    with Collector(spec, batch_size=batch_size, workers=1) as c:
        many = c.collect_many(tables, seeds, iteration=3)
    with Collector(spec, workers=1) as c:
        alone = [c.collect(t, seeds, iteration=3) for t in tables]
    assert len(many) == 3
    for m, a in zip(many, alone, strict=True):
        assert [e.seed for e in m] == seeds and [e.iteration for e in m] == [3] * len(seeds)
        assert [e.ret for e in m] == [e.ret for e in a]
        for x, y in zip(m, a, strict=True):
            assert np.array_equal(x.states, y.states) and np.array_equal(x.actions, y.actions)
            assert (x.terminated, x.truncated) == (y.terminated, y.truncated)
    if kwargs.get("is_slippery"):  # on a slippery lake the seed decides: the returns are not all equal
        assert len({tuple(e.states.tolist()) for e in alone[1]}) > 1


class Lean:
    """Any policy at all: push toward the side the pole leans to, from the raw observation."""

    def __init__(self):
        self.batches = []

    def act(self, obs):
        obs = np.asarray(obs)
        self.batches.append(len(obs))
        return (obs[:, 2] > 0).astype(np.int64)


def test_any_policy_runs_beside_tables():
    spec = get_spec("CartPole-v1")
    lean = Lean()
    assert isinstance(lean, Policy)
    seeds = [1, 2, 3, 4]
    with Collector(spec, workers=1) as c:
        (mine, table_eps) = c.collect_many([lean, spec.prior_table()], seeds)
        alone = c.collect(lean, seeds)
        rollouts = c.evaluate(lean, seeds)
        as_policy = c.evaluate(TablePolicy("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer(),
                                           spec.prior_table()), seeds)
    assert [e.ret for e in mine] == [e.ret for e in alone] == rollouts.returns.tolist()
    assert rollouts.mean > 20 and max(lean.batches) == len(seeds)  # the policy acts on a batch at once
    assert as_policy.returns.tolist() == [e.ret for e in table_eps]
    assert rollouts.steps == sum(e.length for e in alone) and rollouts.seeds.tolist() == seeds
