"""The structured controls of the lm-policy mode (issue 62 item 6): each table state's coordinates
(:mod:`llm_policy_gen.lm.coordinates`) and the ``index`` and ``thermometer`` features over them
(:mod:`llm_policy_gen.lm.features`), on small discretizers: CartPole-v1's spec (bins 3, 3, 6, 6), FrozenLake's 4x4
grid and Taxi-v4's named factors."""

from __future__ import annotations

import numpy as np
import pytest

from llm_policy_gen.envs.catalog import get_spec
from llm_policy_gen.envs.spec import EnvSpec
from llm_policy_gen.errors import SpecError
from llm_policy_gen.lm.coordinates import StateCoordinates, state_coordinates
from llm_policy_gen.lm.features import features_table, structured_width


def coords_of(env_id: str) -> tuple[EnvSpec, StateCoordinates]:
    spec = get_spec(env_id)
    return spec, state_coordinates(spec, spec.observation_discretizer())


def test_cartpole_states_read_as_their_bins_in_row_major_order() -> None:
    spec, c = coords_of("CartPole-v1")
    disc = spec.observation_discretizer()
    assert c.names == ("cart position", "cart velocity", "pole angle", "pole angular velocity")
    assert c.sizes == (3, 3, 6, 6) and c.bins.shape == (324, 4)
    assert all(tuple(c.bins[s]) == disc.decode(s) for s in range(324))
    assert tuple(c.bins[323]) == (2, 2, 5, 5) and tuple(c.bins[0]) == (0, 0, 0, 0)


def test_index_features_scale_each_bin_to_minus_one_one() -> None:
    _, c = coords_of("CartPole-v1")
    x = features_table("index", 324, coords=c)
    assert x.shape == (324, 4) and x.dtype == np.float32
    assert np.allclose(x[0], [-1, -1, -1, -1]) and np.allclose(x[323], [1, 1, 1, 1])
    s = int(np.ravel_multi_index((1, 0, 2, 3), (3, 3, 6, 6)))
    assert np.allclose(x[s], [0.0, -1.0, 2 * 2 / 5 - 1, 2 * 3 / 5 - 1])
    assert structured_width("index", c) == 4


def test_thermometer_features_set_the_first_k_units_of_each_dimension() -> None:
    _, c = coords_of("CartPole-v1")
    x = features_table("thermometer", 324, coords=c)
    assert x.shape == (324, 2 + 2 + 5 + 5) == (324, structured_width("thermometer", c))
    assert set(np.unique(x)) <= {0.0, 1.0}
    s = int(np.ravel_multi_index((1, 0, 2, 5), (3, 3, 6, 6)))
    assert x[s].tolist() == [1, 0] + [0, 0] + [1, 1, 0, 0, 0] + [1, 1, 1, 1, 1]
    assert x[0].sum() == 0 and x[323].sum() == 14
    # neighbouring bins differ in one unit: the order of the bins is in the code
    assert all(np.abs(x[s] - x[s + 1]).sum() == 1 for s in range(0, 5))


def test_frozenlake_cells_read_as_row_and_column() -> None:
    _, c = coords_of("FrozenLake-v1.deterministic")
    assert c.names == ("row", "column") and c.sizes == (4, 4)
    assert tuple(c.bins[6]) == (1, 2)
    idx = features_table("index", 16, coords=c)
    assert idx.shape == (16, 2) and np.allclose(idx[6], [2 / 3 - 1, 4 / 3 - 1])
    th = features_table("thermometer", 16, coords=c)
    assert th.shape == (16, 6) and th[6].tolist() == [1, 0, 0, 1, 1, 0]


def test_taxi_states_read_as_the_specs_factors_as_gymnasium_encodes_them() -> None:
    import gymnasium as gym

    _, c = coords_of("Taxi-v4")
    assert c.names == ("taxi row", "taxi column", "passenger", "destination") and c.sizes == (5, 5, 5, 4)
    env = gym.make("Taxi-v4").unwrapped
    assert all(tuple(c.bins[s]) == tuple(env.decode(s)) for s in range(500))  # type: ignore[attr-defined]
    assert features_table("index", 500, coords=c).shape == (500, 4)
    assert features_table("thermometer", 500, coords=c).shape == (500, 4 + 4 + 4 + 3)


def test_a_discrete_state_without_coordinates_is_its_own_index() -> None:
    spec = get_spec("FrozenLake-v1.deterministic").with_overrides(grid=None)
    c = state_coordinates(spec, spec.observation_discretizer())
    assert c.names == ("state",) and c.sizes == (16,)
    assert np.allclose(features_table("index", 16, coords=c)[:, 0], np.linspace(-1, 1, 16))


def test_factors_that_do_not_hold_the_table_are_refused() -> None:
    spec = get_spec("Taxi-v4")
    bad = spec.with_overrides(meaning={**spec.meaning, "factors": [{"name": "x", "size": 7}]})
    with pytest.raises(SpecError, match="hold 7 states, the table has 500"):
        state_coordinates(bad, bad.observation_discretizer())


def test_structured_features_need_the_coordinates() -> None:
    with pytest.raises(ValueError, match="coordinates"):
        features_table("index", 16)
