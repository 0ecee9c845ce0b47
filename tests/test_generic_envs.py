import json

import gymnasium as gym
import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.generic import MAX_DEFAULT_STATES, default_bins, generic_spec, sample_observations
from llm_policy_gen.envs.gymdoc import parse_gym_doc
from llm_policy_gen.errors import SpecError
from llm_policy_gen.run import resolve_spec, train
from llm_policy_gen.storage.runlog import read_jsonl

GENERIC = ["MountainCar-v0", "Acrobot-v1", "LunarLander-v3", "CliffWalking-v1", "Taxi-v4"]


@pytest.mark.parametrize("env_id", GENERIC)
def test_generic_env_trains_three_offline_iterations(tmp_path, env_id):
    res = train(TrainConfig(env_id=env_id, backend="offline", iterations=3, logs_dir=str(tmp_path), progress=False,
                            plots=False, heldout_episodes=5), log=lambda _m: None)
    assert res.summary["iterations"] == 3 and res.summary["stop_reason"] == "iterations done"
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3]
    assert all(e["valid"] for e in events)
    config = json.loads((res.run_dir / "config.json").read_text())
    assert config["env_spec"]["env_id"] == env_id and not config["env_spec"]["refusal"]
    assert np.isfinite(res.summary["best_eval_mean"])


def test_spaces_become_tables():
    mc = get_spec("MountainCar-v0")
    assert [(d.low, d.high, d.bins, d.estimated) for d in mc.dims] == [(-1.2, 0.6, 16, False), (-0.07, 0.07, 16, False)]
    assert mc.dims[0].name == "position of the car along the x-axis"  # from gymnasium's docstring table
    assert mc.action_names[2] == "Accelerate to the right" and mc.reward_threshold == -110.0
    assert "valley" in mc.description and "-1" in mc.reward
    cliff = get_spec("CliffWalking-v1")
    assert cliff.n_discrete_states == 48 and cliff.grid == (4, 12) and cliff.dims == ()
    taxi = get_spec("Taxi-v4")
    assert (taxi.n_states, taxi.n_actions, taxi.grid) == (500, 6, None)
    lunar = generic_spec("LunarLander-v3")  # derived from the space, not the shipped spec
    assert [d.bins for d in lunar.dims][-2:] == [2, 2]  # the leg contact flags only take two values
    assert lunar.n_states <= MAX_DEFAULT_STATES
    blackjack = get_spec("Blackjack-v1")  # a Tuple of Discrete: one bin per value
    assert [d.bins for d in blackjack.dims] == [32, 11, 2] and blackjack.n_actions == 2


def test_box_actions_start_at_zero_torque():
    spec = get_spec("Pendulum-v1")
    acts = spec.action_discretizer()
    assert spec.action_kind == "box" and acts.n_actions == 3
    assert acts.to_env(np.array([spec.default_action]))[0].tolist() == [0.0]
    lunar = get_spec("LunarLanderContinuous-v3")
    assert lunar.n_actions == 9 and lunar.action_discretizer().to_env(np.array([lunar.default_action])).tolist() == [
        [0.0, 0.0]]


def test_infinite_bounds_are_estimated_recorded_and_said_in_the_prompt(tmp_path):
    env_id = "InvertedPendulum-v4"  # unbounded Box, no shipped spec (v5 has one)
    spec = generic_spec(env_id)
    assert spec.bounds_estimated and all(d.estimated for d in spec.dims)
    assert all(np.isfinite(d.low) and np.isfinite(d.high) and d.low < d.high for d in spec.dims)
    assert any("estimated from 20 seeded random episodes" in n for n in spec.notes)
    samples = sample_observations(env_id)
    lo, hi = np.quantile(samples[:, 0], [0.01, 0.99])
    assert spec.dims[0].low == pytest.approx(lo, abs=1e-6) and spec.dims[0].high == pytest.approx(hi, abs=1e-6)
    assert generic_spec(env_id) == spec  # seeded: the same spec every time
    res = train(TrainConfig(env_id=env_id, backend="offline", iterations=1, logs_dir=str(tmp_path),
                            progress=False, plots=False, heldout_episodes=3), log=lambda _m: None)
    config = json.loads((res.run_dir / "config.json").read_text())
    assert config["env_spec"]["bounds_estimated"] is True and config["env_spec"]["dims"][0]["estimated"] is True
    again = train(TrainConfig(env_id=env_id, backend=f"replay:{res.run_dir}", iterations=1,
                              logs_dir=str(tmp_path / "again"), progress=False, plots=False, heldout_episodes=3),
                  log=lambda _m: None)  # the prompt a replay (a session) asks
    prompt = read_jsonl(again.run_dir / "transcripts.jsonl")[0]["messages"][-1]["content"]
    assert "(bounds estimated from sampled episodes)" in prompt


def test_default_bins_share_the_budget():
    assert default_bins(2) == [10, 10]
    assert default_bins(4) == [6, 6, 6, 6]
    assert default_bins(6) == [4, 4, 3, 3, 3, 3]
    assert default_bins(8, [False] * 6 + [True] * 2) == [3, 3, 3, 3, 2, 2, 2, 2]
    assert default_bins(11) is None
    for n in range(1, 11):
        b = default_bins(n)
        assert b is not None and int(np.prod(b)) <= MAX_DEFAULT_STATES and min(b) >= 2


class _ImageEnv(gym.Env):  # type: ignore[type-arg]
    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)


class _DictEnv(gym.Env):  # type: ignore[type-arg]
    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "goal": gym.spaces.Discrete(3)})
    action_space = gym.spaces.Discrete(2)


@pytest.fixture
def odd_envs():
    gym.register("LPGTestImage-v0", entry_point=_ImageEnv)
    gym.register("LPGTestDict-v0", entry_point=_DictEnv)
    yield
    gym.registry.pop("LPGTestImage-v0")
    gym.registry.pop("LPGTestDict-v0")


def test_untabulable_spaces_are_refused_with_reasons(odd_envs, tmp_path, capsys):
    with pytest.raises(SpecError, match=r"cannot be tabulated: a Box of shape \(8, 8, 3\).*--dims"):
        get_spec("LPGTestImage-v0")
    with pytest.raises(SpecError, match="a Dict space .*pos.*no single vector"):
        get_spec("LPGTestDict-v0")
    code = main(["train", "--env", "LPGTestImage-v0", "--backend", "offline", "--logs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be tabulated" in err and len(err.strip().splitlines()) == 1


def test_too_many_dimensions_are_refused_unless_chosen(tmp_path):
    with pytest.raises(SpecError, match=r"17 observation dimensions are too many.*--dims"):
        resolve_spec(TrainConfig(env_id="HalfCheetah-v5"))  # no shipped spec
    spec = resolve_spec(TrainConfig(env_id="HalfCheetah-v5", dims=[0, 1, 2], bins=[4]))
    assert spec.n_states == 64 and spec.dims[1].name == "angle of the front tip" and spec.bounds_estimated
    assert spec.n_actions == 729  # 6 torques at 3 levels


def test_gym_doc_parsing_is_best_effort():
    doc = parse_gym_doc("""
    Intro line.

    ## Description
    A `cart` moves. See [the paper](http://x.org).

    ## Action Space
    - 0: Push left
    - 1: Push right

    ## Observation Space
    | Num | Observation | Min | Max |
    |-----|-------------|-----|-----|
    | 0   | Cart Position | -4.8 | 4.8 |
    | 1   | Cart Velocity | -Inf | Inf |

    ## Rewards
    +1 per step.

    ## Episode End
    Pole falls.
    """)
    assert doc.description == "A cart moves. See the paper."
    assert doc.action_names == {0: "Push left", 1: "Push right"}
    assert doc.observation_names == {0: "Cart Position", 1: "Cart Velocity"}
    assert doc.reward == "+1 per step. Episode end: Pole falls."
    assert parse_gym_doc(None).observation_names == {}
