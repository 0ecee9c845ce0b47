import numpy as np
import pytest

from llm_policy_gen.discretize import (
    BoxActions,
    BoxDiscretizer,
    DimSpec,
    DiscreteActions,
    DiscreteDiscretizer,
    MultiDiscreteActions,
    action_discretizer_from_spec,
    observation_discretizer_from_spec,
)
from llm_policy_gen.errors import SpecError

CARTPOLE_DIMS = [
    DimSpec("cart position", -2.4, 2.4, 3, 0, "m"),
    DimSpec("cart velocity", -3.0, 3.0, 3, 1, "m/s"),
    DimSpec("pole angle", -0.2095, 0.2095, 6, 2, "rad"),
    DimSpec("pole angular velocity", -3.0, 3.0, 6, 3, "rad/s"),
]


def test_cartpole_has_324_states_and_row_major_index():
    d = BoxDiscretizer(CARTPOLE_DIMS)
    assert d.n_states == 324
    obs = np.array([[-2.4, -3.0, -0.2095, -3.0], [2.4, 3.0, 0.2095, 3.0], [0.0, 0.0, 0.0, 0.0]])
    s = d.encode(obs)
    assert s.tolist() == [0, 323, ((1 * 3 + 1) * 6 + 3) * 6 + 3]
    assert d.decode(int(s[2])) == (1, 1, 3, 3)


def test_values_outside_bounds_are_clipped_into_edge_bins():
    d = BoxDiscretizer(CARTPOLE_DIMS)
    assert d.encode(np.array([[-99.0, 99.0, -5.0, 5.0]])).tolist() == [d.encode(np.array([[-2.4, 3, -0.2, 3]]))[0]]


def test_uniform_bins_have_equal_width_and_seed_binning_has_half_width_edges():
    dims = [DimSpec("x", 0.0, 1.0, 5)]
    uni = BoxDiscretizer(dims)
    widths = np.diff(uni.boundaries[0])
    assert np.allclose(widths, 0.2)
    seed = BoxDiscretizer(dims, binning="seed")
    w = np.diff(seed.boundaries[0])
    assert np.isclose(w[0], w[1] / 2) and np.isclose(w[-1], w[1] / 2)
    # round((n-1)*ratio): 0.1 -> round(0.4) = 0, 0.2 -> round(0.8) = 1
    assert seed.encode(np.array([[0.1], [0.2], [0.99]])).tolist() == [0, 1, 4]


def test_decode_encode_round_trip_through_centres():
    d = BoxDiscretizer(CARTPOLE_DIMS)
    centres = d.centers()
    assert np.array_equal(d.encode(centres), np.arange(d.n_states))


def test_readable_descriptions():
    d = BoxDiscretizer(CARTPOLE_DIMS)
    text = d.describe_state(0)
    assert "pole angle in [-0.209, -0.14) rad" in text
    assert "cart position" in text
    assert len(d.describe_dims()) == 4 and "6 bins" in d.describe_dims()[2]


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"bins": 0}, "bins must be an integer >= 1"),
        ({"low": 1.0, "high": 1.0}, "low must be < high"),
        ({"low": -np.inf}, "bounds must be finite"),
    ],
)
def test_invalid_dims_raise_clear_errors(kwargs, msg):
    base = {"name": "x", "low": 0.0, "high": 1.0, "bins": 3}
    with pytest.raises(SpecError, match=msg):
        DimSpec(**{**base, **kwargs})


def test_wrong_number_of_dimensions_is_refused():
    with pytest.raises(SpecError, match="out of range"):
        BoxDiscretizer([DimSpec("x", 0, 1, 2, index=5)], obs_dim=4)
    with pytest.raises(SpecError, match="at least one"):
        BoxDiscretizer([])


def test_discrete_observations_pass_through_and_grid_names_cells():
    d = DiscreteDiscretizer(16, grid=(4, 4))
    assert d.encode(np.array([0, 5, 15])).tolist() == [0, 5, 15]
    assert d.describe_state(6) == "row 1, col 2"
    with pytest.raises(SpecError):
        d.encode(np.array([16]))


def test_specs_round_trip():
    for disc in (BoxDiscretizer(CARTPOLE_DIMS), DiscreteDiscretizer(16, (4, 4))):
        again = observation_discretizer_from_spec(disc.to_spec())
        assert again.to_spec() == disc.to_spec()
    for acts in (DiscreteActions(2, ["l", "r"]), BoxActions([-1, -1], [1, 1], 3), MultiDiscreteActions([2, 3])):
        assert action_discretizer_from_spec(acts.to_spec()).to_spec() == acts.to_spec()


def test_box_actions_levels_and_flat_index():
    a = BoxActions([-1.0, -2.0, -1.0], [1.0, 2.0, 1.0], 3, ["hip", "knee", "foot"])
    assert a.n_actions == 27
    assert a.to_env(np.array([0]))[0].tolist() == [-1.0, -2.0, -1.0]
    assert a.to_env(np.array([13]))[0].tolist() == [0.0, 0.0, 0.0]
    assert a.to_env(np.array([26]))[0].tolist() == [1.0, 2.0, 1.0]
    assert a.describe(13) == "hip=0, knee=0, foot=0"
    with pytest.raises(SpecError):
        BoxActions([-1.0], [1.0], 1)
