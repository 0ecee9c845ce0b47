import json

import numpy as np
import pytest

from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import PolicyFileError, SpecError
from llm_policy_gen.policy import TablePolicy


def _policy(env_id="CartPole-v1"):
    spec = get_spec(env_id)
    rng = np.random.default_rng(0)
    table = rng.integers(0, spec.n_actions, spec.n_states)
    return spec, TablePolicy(env_id, spec.observation_discretizer(), spec.action_discretizer(), table)


def test_save_load_round_trip(tmp_path):
    spec, pol = _policy()
    pol.save(tmp_path / "p.json")
    again = TablePolicy.load(tmp_path / "p.json")
    assert np.array_equal(again.table, pol.table)
    again.check_matches(spec.env_id, spec.observation_discretizer(), spec.action_discretizer())
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["env_id"] == "CartPole-v1" and len(data["observation"]["dims"]) == 4
    assert [d["bins"] for d in data["observation"]["dims"]] == [3, 3, 6, 6]


def test_act_looks_up_the_table():
    spec, pol = _policy()
    obs = np.zeros((2, 4))
    s = spec.observation_discretizer().encode(obs)
    assert pol.act(obs).tolist() == pol.table[s].tolist()


def test_mismatched_specs_are_refused(tmp_path):
    _, pol = _policy()
    lake = get_spec("FrozenLake-v1")
    with pytest.raises(PolicyFileError, match="not FrozenLake"):
        pol.check_matches("FrozenLake-v1", lake.observation_discretizer(), lake.action_discretizer())
    data = pol.to_dict()
    data["observation"]["dims"][2]["bins"] = 8
    data["table"] = [0] * (3 * 3 * 8 * 6)
    other = TablePolicy.from_dict(data)
    spec = get_spec("CartPole-v1")
    with pytest.raises(PolicyFileError, match="observation spec does not match"):
        other.check_matches("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer())


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"env_id": "CartPole-v1"}'])
def test_unreadable_files_are_refused(tmp_path, content):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(PolicyFileError):
        TablePolicy.load(p)
    with pytest.raises(PolicyFileError, match="does not exist"):
        TablePolicy.load(tmp_path / "missing.json")


def test_table_values_are_checked():
    spec = get_spec("CartPole-v1")
    with pytest.raises(SpecError, match="actions must be in 0..1"):
        TablePolicy("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer(), np.full(324, 2))
    with pytest.raises(SpecError, match="shape"):
        TablePolicy("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer(), np.zeros(10, int))
