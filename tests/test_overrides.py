import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.tailor import MAX_BINS, apply_dims_bins, apply_env_kwargs
from llm_policy_gen.errors import SpecError
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.run import resolve_spec, train


def test_bins_override_keeps_names_bounds_and_prior():
    spec = apply_dims_bins(get_spec("CartPole-v1"), None, [4, 4, 8, 8])
    assert [d.bins for d in spec.dims] == [4, 4, 8, 8] and spec.n_states == 1024
    assert [(d.name, d.low, d.high) for d in spec.dims] == [
        (d.name, d.low, d.high) for d in get_spec("CartPole-v1").dims]
    assert spec.prior is not None and spec.prior_table() is not None
    assert apply_dims_bins(get_spec("CartPole-v1"), None, [5]).n_states == 5**4  # one value for every dimension


def test_dims_override_picks_and_orders_dimensions():
    cart = get_spec("CartPole-v1")
    spec = apply_dims_bins(cart, [3, 2], None)
    assert [d.index for d in spec.dims] == [3, 2] and [d.bins for d in spec.dims] == [6, 6]
    assert spec.prior is not None  # the prior only uses the pole's dimensions
    spec = apply_dims_bins(cart, [0, 1], [2])
    assert spec.prior is None and any("prior rule dropped" in n for n in spec.notes)
    assert spec.validate().n_states == 4


def test_new_dimensions_get_bounds_from_the_space_or_estimated():
    hopper = get_spec("Hopper-v5")
    spec = apply_dims_bins(hopper, [1, 5], [6, 3])
    speed = spec.dims[1]
    assert speed.index == 5 and speed.estimated and speed.name == "velocity of the x-coordinate of the torso"
    assert spec.dims[0].name == "torso angle" and not spec.dims[0].estimated and spec.bounds_estimated
    mc = apply_dims_bins(get_spec("MountainCar-v0"), [1], [20])
    assert (mc.dims[0].low, mc.dims[0].high, mc.dims[0].estimated) == (-0.07, 0.07, False)


@pytest.mark.parametrize(
    ("env_id", "dims", "bins", "message"),
    [
        ("CartPole-v1", [0, 9], None, r"bad --dims \[0, 9\]: index 9 out of range; accepted 0..3"),
        ("CartPole-v1", [-1], None, "index -1 out of range"),
        ("CartPole-v1", [0, 0], None, "an index repeats"),
        ("CartPole-v1", [], None, "non-empty"),
        ("CartPole-v1", None, [3, 3], r"give 1 value or 4 \(one per dimension: cart position, cart velocity"),
        ("CartPole-v1", None, [0], rf"0 is out of range; accepted 1..{MAX_BINS}"),
        ("CartPole-v1", None, [MAX_BINS + 1], "out of range"),
        ("CartPole-v1", None, [100, 100, 100, 100], r"give 100000000 states, over the cap of 1000000"),
        ("CartPole-v1", None, ["3"], "integers only"),
        ("FrozenLake-v1", [0], None, r"the observation is Discrete \(16 states"),
        ("Taxi-v4", None, [4], "apply to vector \\(Box\\) observations only"),
    ],
)
def test_bad_overrides_are_refused_with_clear_messages(env_id, dims, bins, message):
    with pytest.raises(SpecError, match=message):
        apply_dims_bins(get_spec(env_id), dims, bins)


def test_overrides_through_the_config_and_the_command_line(tmp_path, capsys):
    spec = resolve_spec(TrainConfig(env_id="CartPole-v1", bins=[2, 2, 4, 4], env_kwargs={"sutton_barto_reward": True}))
    assert spec.n_states == 64 and spec.kwargs == {"sutton_barto_reward": True}
    code = main(["train", "--env", "CartPole-v1", "--backend", "offline", "--bins", "3,3", "--logs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "bad --bins [3, 3]: give 1 value or 4" in err
    code = main(["train", "--env", "Hopper-v5", "--dims", "0,11", "--backend", "offline", "--logs-dir", str(tmp_path)])
    assert code == 2 and "accepted 0..10" in capsys.readouterr().err


def test_env_kwargs_that_change_the_spaces_update_the_spec():
    lake = apply_env_kwargs(get_spec("FrozenLake-v1.deterministic"), {"map_name": "8x8"}).validate()
    assert (lake.n_states, lake.grid) == (64, (8, 8)) and lake.kwargs["is_slippery"] is False
    with Collector(lake, workers=1) as c:  # observations up to 63 now fit the table
        (ep,) = c.collect(lake.default_table(), [0])
    assert ep.states.max() < 64
    car = apply_env_kwargs(get_spec("MountainCar-v0"), {"goal_velocity": 0.01})
    assert car.kwargs == {"goal_velocity": 0.01} and car.n_states == 256
    assert apply_env_kwargs(get_spec("CartPole-v1"), {}) == get_spec("CartPole-v1")


def test_env_kwargs_reach_the_policy_file_and_a_mismatch_is_refused(tmp_path, capsys):
    cfg = TrainConfig(env_id="FrozenLake-v1", backend="offline", iterations=1, candidates=1, logs_dir=str(tmp_path),
                      progress=False, plots=False, heldout_episodes=3, env_kwargs={"is_slippery": True})
    res = train(cfg, log=lambda _m: None)
    policy = TablePolicy.load(res.run_dir / "best_policy.json")
    assert policy.env_kwargs == {"is_slippery": True, "map_name": "4x4"}
    assert main(["evaluate", str(res.run_dir), "--episodes", "2"]) == 0
    capsys.readouterr()
    code = main(["evaluate", str(res.run_dir), "--episodes", "2", "--env-kwargs", '{"is_slippery": false}'])
    err = capsys.readouterr().err
    assert code == 2 and "is_slippery=True in the policy, False here" in err and len(err.strip().splitlines()) == 1
