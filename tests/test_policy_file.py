import json

import numpy as np
import pytest

from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import PolicyFileError, SpecError
from llm_policy_gen.policy import Policy, TablePolicy


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
    with pytest.raises(PolicyFileError, match="observation bins differ from CartPole-v1's: pole angle bins 8 in the "
                       "policy, 6 here"):
        other.check_matches("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer())
    data = pol.to_dict()
    data["action"] = {**data["action"], "n": 3, "names": ["a", "b", "c"]}
    with pytest.raises(PolicyFileError, match="actions differ"):
        TablePolicy.from_dict(data).check_matches("CartPole-v1", spec.observation_discretizer(),
                                                  spec.action_discretizer())


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


def test_env_kwargs_fingerprint_and_source_are_kept(tmp_path):
    lake = get_spec("FrozenLake-v1.deterministic")
    obs, acts = lake.observation_discretizer(), lake.action_discretizer()
    table = np.arange(16) % 4
    pol = TablePolicy("FrozenLake-v1", obs, acts, table, {"iteration": 3}, dict(lake.kwargs),
                      {"rules": ["if row == 3: move right"]})
    pol.save(tmp_path / "p.json")
    again = TablePolicy.load(tmp_path / "p.json")
    assert again.env_kwargs == {"is_slippery": False, "map_name": "4x4"} and again.meta == {"iteration": 3}
    assert again.source == {"rules": ["if row == 3: move right"]} and again.fingerprint == pol.fingerprint
    assert json.loads((tmp_path / "p.json").read_text())["spec_fingerprint"] == pol.fingerprint
    again.check_matches("FrozenLake-v1", obs, acts, {"map_name": "4x4", "is_slippery": False})  # key order free
    slippery = pol.with_table(table, None)
    slippery.env_kwargs = {**lake.kwargs, "is_slippery": True}
    assert slippery.fingerprint != pol.fingerprint
    with pytest.raises(PolicyFileError, match=r"other environment kwargs: is_slippery=False in the policy, True here"):
        again.check_matches("FrozenLake-v1", obs, acts, {**lake.kwargs, "is_slippery": True})
    with pytest.raises(PolicyFileError, match=r"map_name='4x4' in the policy, '\(unset\)' here"):
        again.check_matches("FrozenLake-v1", obs, acts, {"is_slippery": False})


def test_files_without_env_kwargs_load_and_are_not_checked_against_them(tmp_path):
    spec, pol = _policy()
    data = pol.to_dict()
    del data["env_kwargs"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = TablePolicy.load(tmp_path / "old.json")
    assert old.env_kwargs is None and old.source is None
    old.check_matches("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer(), {"x": 1})
    data["env_kwargs"] = [1]
    with pytest.raises(PolicyFileError, match="env_kwargs must be a JSON object"):
        TablePolicy.from_dict(data)


def test_policy_protocol_and_state_lookup():
    spec, pol = _policy()
    assert isinstance(pol, Policy)
    states = np.array([0, 5, 323])
    assert pol.act_states(states).tolist() == pol.table[states].tolist()
    assert (pol.n_states, pol.n_actions) == (324, 2)
    with pytest.raises(SpecError, match="integers"):
        TablePolicy("CartPole-v1", spec.observation_discretizer(), spec.action_discretizer(), np.zeros(324))
