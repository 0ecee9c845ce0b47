import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llm_policy_gen.collect import Collector, default_workers, fresh_env_per_episode
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.discretize import BoxActions, action_discretizer_from_spec
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.spec import EnvSpec
from llm_policy_gen.errors import SpecError
from llm_policy_gen.formats import AUTO_EDITS_ABOVE, resolve_format_name
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.prompting.memory import ExperienceMemory, SparseTransitions, expected_next, transition_totals
from llm_policy_gen.run import train

ROOT = Path(__file__).resolve().parent.parent


def test_hopper_spec_is_the_seed_projects_table():
    spec = get_spec("Hopper-v5")
    assert (spec.n_states, spec.n_actions) == (384, 27)
    assert [d.bins for d in spec.dims] == [6, 4, 4, 4]
    assert spec.reward_threshold == 3800.0 and spec.max_episode_steps == 1000
    acts = spec.action_discretizer()
    assert acts.to_env(np.array([spec.default_action]))[0].tolist() == [0.0, 0.0, 0.0]  # do nothing
    prior = spec.prior_table()
    assert prior is not None and set(np.unique(prior)) == {spec.prior.negative_action, spec.prior.positive_action}
    assert (Path(ROOT) / "llm_policy_gen" / "prompting" / "prompts" / "hints" / spec.hints).is_file()


def test_bipedal_walker_spec_is_the_seed_projects_table():
    spec = get_spec("BipedalWalker-v3")
    assert (spec.n_states, spec.n_actions) == (10_000, 81)
    assert [d.bins for d in spec.dims] == [10, 10, 10, 10]
    assert spec.reward_wrappers == ("remove_fall_penalty",) and spec.reward_threshold == 300.0
    assert spec.action_discretizer().to_env(np.array([spec.default_action]))[0].tolist() == [0.0] * 4
    assert TrainConfig(env_id="BipedalWalker-v3").output_format == "auto"
    assert resolve_format_name("auto", spec.n_states) == "edits"
    assert resolve_format_name("auto", AUTO_EDITS_ABOVE) == "table" and resolve_format_name("table", 10_000) == "table"


def test_box_action_discretization_round_trip():
    acts = BoxActions([-1.0, -2.0, 0.0], [1.0, 2.0, 4.0], levels=3, names=["a", "b", "c"])
    assert acts.n_actions == 27
    values = acts.to_env(np.arange(27))
    assert values[0].tolist() == [-1.0, -2.0, 0.0] and values[26].tolist() == [1.0, 2.0, 4.0]
    assert values[13].tolist() == [0.0, 0.0, 2.0]  # the middle level of each dimension
    # back from values to levels to the flat index (row-major, the last dimension fastest)
    levels = np.rint((values - acts.low) / (acts.high - acts.low) * (acts.levels - 1)).astype(int)
    assert np.ravel_multi_index(levels.T, tuple(acts.levels)).tolist() == list(range(27))
    assert acts.describe(5) == "a=-1, b=0, c=4"
    again = action_discretizer_from_spec(json.loads(json.dumps(acts.to_spec())))
    assert np.array_equal(again.to_env(np.arange(27)), values)


def test_actions_given_as_levels_in_a_spec_file():
    base = {"env_id": "Pendulum-v1", "dims": [{"name": "x", "low": -1, "high": 1, "bins": 2}],
            "actions": {"kind": "box", "levels": 3, "low": [-2.0], "high": [2.0]}}
    assert EnvSpec.from_dict({**base, "default_action": [1]}).default_action == 1
    assert EnvSpec.from_dict({**base, "default_action": 2}).default_action == 2
    with pytest.raises(SpecError, match=r"default_action \[3\] does not fit action levels \[3\]"):
        EnvSpec.from_dict({**base, "default_action": [3]})


def test_box2d_episodes_do_not_depend_on_earlier_ones():
    spec = get_spec("BipedalWalker-v3")
    assert fresh_env_per_episode(spec) and not fresh_env_per_episode(get_spec("Hopper-v5"))
    table = spec.prior_table()
    with Collector(spec, workers=1) as c:
        alone = c.evaluate(table, [50064]).returns
        c.evaluate(table, [50001, 50002])
        after = c.evaluate(table, [50064]).returns
    assert alone.tolist() == after.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["Hopper-v5", "BipedalWalker-v3"])
def test_parallel_evaluation_gives_the_serial_results(env_id):
    spec = get_spec(env_id)
    assert default_workers(spec) >= 1
    table = spec.prior_table()
    seeds = list(range(10_000, 10_006))
    with Collector(spec, workers=1) as one, Collector(spec, workers=2) as two:
        assert one.evaluate(table, seeds).returns.tolist() == two.evaluate(table, seeds).returns.tolist()
        a, b = one.collect(table, seeds), two.collect(table, seeds)
        other = np.full(spec.n_states, spec.default_action)
        many_one, many_two = one.collect_many([table, other], seeds), two.collect_many([table, other], seeds)
    assert [e.seed for e in b] == seeds
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.states, y.states) and np.array_equal(x.actions, y.actions)
    for m1, m2, alone in zip(many_one, many_two, (a, None), strict=True):
        assert [e.ret for e in m1] == [e.ret for e in m2] and [e.seed for e in m2] == seeds
        if alone is not None:
            assert [e.ret for e in m1] == [e.ret for e in alone]


def test_big_tables_keep_sparse_transitions():
    mem = ExperienceMemory(10_000, 81)
    spec = get_spec("BipedalWalker-v3")
    with Collector(spec, workers=1) as c:
        mem.add(c.collect(spec.prior_table(), [1, 2]))
    ev = mem.evidence()
    assert isinstance(ev.transitions, SparseTransitions) and ev.transitions.shape == (10_000, 81, 10_001)
    steps = sum(e.length for e in mem.episodes)
    assert transition_totals(ev.transitions).sum() == steps
    assert ev.visits.sum() == steps


def test_sparse_and_dense_transitions_agree(monkeypatch):
    rng = np.random.default_rng(0)
    from llm_policy_gen.collect import Episode
    from llm_policy_gen.prompting import memory as memory_module

    eps = [Episode(i, rng.integers(0, 6, 30), rng.integers(0, 3, 30), rng.normal(size=30), bool(i % 2), False)
           for i in range(5)]
    mem = ExperienceMemory(6, 3)
    mem.add(eps)
    dense = mem.evidence()
    monkeypatch.setattr(memory_module, "DENSE_TRANSITIONS_MAX", 0)
    sparse = mem.evidence()
    assert isinstance(sparse.transitions, SparseTransitions) and isinstance(dense.transitions, np.ndarray)
    values = rng.normal(size=7)
    assert np.array_equal(transition_totals(sparse.transitions), transition_totals(dense.transitions))
    assert np.allclose(expected_next(sparse.transitions, values), expected_next(dense.transitions, values))
    s, a, n = np.argwhere(dense.transitions > 0)[0]
    assert sparse.transitions[s, a, n] == dense.transitions[s, a, n]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["Hopper-v5", "BipedalWalker-v3"])
def test_continuous_env_trains_offline(tmp_path, env_id):
    res = train(TrainConfig(env_id=env_id, backend="offline", iterations=2, logs_dir=str(tmp_path), progress=False,
                            plots=False, heldout_episodes=4), log=lambda _m: None)
    assert res.summary["iterations"] == 2
    best = TablePolicy.load(res.run_dir / "best_policy.json")
    assert best.table.shape == (get_spec(env_id).n_states,)


@pytest.mark.slow
def test_agent_scripts_run(tmp_path):
    config = tmp_path / "small.toml"
    config.write_text("heldout_episodes = 3\n")
    for script in ("hopper.py", "bipedal_walker.py"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "agents" / script), "--backend", "offline", "--iterations", "1",
             "--logs-dir", str(tmp_path), "--no-plots", "--no-progress", "--config", str(config)],
            capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "run directory:" in proc.stdout
