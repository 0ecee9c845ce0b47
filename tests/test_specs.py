"""Shipped env specs and their variants: every one loads, says where its bounds came from, has hints, and is chosen
by id or by --spec."""

import json

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec, shipped_env_ids
from llm_policy_gen.envs.catalog import SPEC_DIR, spec_variants, variant_id
from llm_policy_gen.errors import UserError
from llm_policy_gen.prompting.builder import PromptBuilder
from llm_policy_gen.run import resolve_spec

ALL = sorted([*shipped_env_ids(), *spec_variants()])
GOAL_TASKS = ["InvertedPendulum-v5", "MountainCarContinuous-v0", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1",
              "LunarLander-v3", "Swimmer-v5", "Taxi-v4", "CliffWalking-v1", "FrozenLake-v1.8x8", "Hopper-v5.rich",
              "BipedalWalker-v3.rich"]


def test_the_goal_tasks_and_the_variants_are_shipped():
    assert set(GOAL_TASKS) <= set(ALL)
    assert spec_variants("Hopper-v5") == ["Hopper-v5.rich"] and "Hopper-v5.rich" not in shipped_env_ids()


@pytest.mark.parametrize("name", ALL)
def test_every_shipped_spec_loads_with_finite_bounds_hints_and_valid_defaults(name):
    spec = get_spec(name)
    assert spec.name == name and spec.n_states >= 1 and spec.n_actions >= 2
    assert all(np.isfinite(d.low) and np.isfinite(d.high) and not d.estimated for d in spec.dims)
    assert (PromptBuilder().dir / "hints" / spec.hints).is_file(), spec.hints
    cfg = TrainConfig(env_id=name).with_env_defaults(spec.train_defaults)  # every default is a valid setting
    assert cfg.env_id == name
    text = (SPEC_DIR / f"{name}.toml").read_text()
    assert text.startswith("#")
    if spec.dims and not all(d.bins == 2 for d in spec.dims):
        assert "Bounds" in text.split("env_id")[0], "the header comment says where the bounds came from"


def test_default_specs_stay_seed_compatible_and_variants_are_richer():
    hopper, rich = get_spec("Hopper-v5"), get_spec("Hopper-v5.rich")
    assert hopper.n_states == 384 and hopper.variant == "" and rich.variant == "rich"
    assert sorted(d.index for d in rich.dims) == list(range(11)) and rich.env_id == "Hopper-v5"
    walker, walker_rich = get_spec("BipedalWalker-v3"), get_spec("BipedalWalker-v3.rich")
    assert walker.n_states == 10_000 and len(walker_rich.dims) > len(walker.dims)
    assert walker_rich.reward_wrappers == walker.reward_wrappers
    lake = get_spec("FrozenLake-v1.8x8")
    assert (lake.n_states, lake.grid, lake.kwargs["is_slippery"], lake.max_episode_steps) == (64, (8, 8), True, 200)
    assert get_spec("FrozenLake-v1").n_states == 16


def test_a_variant_runs_the_environment_it_names():
    lake = get_spec("FrozenLake-v1.8x8")
    with Collector(lake, workers=1) as c:
        (ep,) = c.collect(lake.default_table(), [3])
    # the default table says "left" everywhere: on a 4x4 lake, or one that does not slip, it would stay in state 0;
    # here the ice slips it down into the 8x8 lake's lower rows, and the variant's 200-step limit ends the episode
    assert ep.states.max() >= 16 and ep.states.max() < 64 and ep.length == 200


def test_variants_are_chosen_by_id_or_by_spec_and_unknown_ones_name_the_known():
    assert variant_id("Hopper-v5", "rich") == "Hopper-v5.rich" and variant_id("Hopper-v5", None) == "Hopper-v5"
    assert resolve_spec(TrainConfig(env_id="Hopper-v5.rich")).variant == "rich"
    with pytest.raises(UserError, match="unknown spec variant 'big' of Hopper-v5; accepted: rich"):
        variant_id("Hopper-v5", "big")
    with pytest.raises(UserError, match="unknown spec variant 'big' of Hopper-v5"):
        get_spec("Hopper-v5.big")
    with pytest.raises(UserError, match="has only its default spec"):
        variant_id("CartPole-v1", "x")


def test_spec_option_on_the_command_line(tmp_path, capsys):
    code = main(["train", "--env", "Hopper-v5", "--spec", "huge", "--backend", "offline", "--logs-dir",
                 str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "unknown spec variant 'huge' of Hopper-v5; accepted: rich" in err
    assert len(err.strip().splitlines()) == 1
    code = main(["train", "--env", "FrozenLake-v1", "--spec", "8x8", "--backend", "offline", "--iterations", "1",
                 "--candidates", "1", "--heldout-episodes", "5", "--logs-dir", str(tmp_path), "--no-plots",
                 "--quiet"])
    assert code == 0
    (run,) = (tmp_path / "FrozenLake-v1").iterdir()
    config = json.loads((run / "config.json").read_text())
    assert config["env_spec"]["variant"] == "8x8" and config["env_spec"]["kwargs"]["map_name"] == "8x8"
    assert config["config"]["test_seeds"] == "fresh"  # the variant's train defaults
    capsys.readouterr()
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert any(x.startswith("Hopper-v5.rich") and "559872" in x for x in out.splitlines())


def test_train_defaults_give_way_to_the_users_settings():
    spec = get_spec("Swimmer-v5")
    assert spec.train_defaults["output_format"] == "rules"
    mine = TrainConfig.build(({"env_id": "Swimmer-v5", "candidates": 3}, "command line"))
    cfg = mine.with_env_defaults(spec.train_defaults)
    assert cfg.candidates == 3 and cfg.output_format == "rules"


def test_bad_search_settings_are_refused():
    from llm_policy_gen.errors import SpecError

    accepted = "accepted: positive numbers for noise, restart_after, step, top"
    with pytest.raises(SpecError, match=f"search settings .* invalid; {accepted}"):
        get_spec("Pendulum-v1").with_overrides(search={"speed": 1.0}).validate()
