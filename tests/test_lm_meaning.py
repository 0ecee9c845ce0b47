"""The meaning text of the lm-policy mode (``--lm-state-text meaning``, :mod:`llm_policy_gen.lm.meaning`): the state
in the task's words from the spec's ``[meaning]`` table, for the five tasks of the features experiment; the spec's
maps and factors agree with gymnasium's; the plain text stays as it was."""

from __future__ import annotations

import re

import numpy as np
import pytest

from llm_policy_gen.envs.catalog import get_spec
from llm_policy_gen.errors import SpecError
from llm_policy_gen.lm.meaning import check_meaning, meaning_description
from llm_policy_gen.lm.state_text import state_text, state_texts

FIVE = ("FrozenLake-v1.deterministic", "FrozenLake-v1.8x8", "CartPole-v1", "Taxi-v4", "MountainCar-v0")


def said(env_id: str, state: int) -> str:
    spec = get_spec(env_id)
    return meaning_description(spec, spec.observation_discretizer(), state)


@pytest.mark.parametrize("env_id", FIVE)
def test_every_state_of_the_five_tasks_has_a_distinct_meaning_text(env_id: str) -> None:
    spec = get_spec(env_id)
    disc = spec.observation_discretizer()
    check_meaning(spec, disc)
    texts = state_texts(spec, disc, variant="meaning")
    assert len(texts) == disc.n_states and all(t.startswith(f"Task: {spec.title}.") for t in texts)
    assert len(set(texts)) == disc.n_states  # the meaning text keeps every state apart
    assert texts != state_texts(spec, disc)


def test_the_plain_text_is_unchanged() -> None:
    spec = get_spec("CartPole-v1")
    disc = spec.observation_discretizer()
    assert state_text(spec, disc, 0) == (
        "Task: CartPole. A pole is hinged on a cart that moves along a frictionless track. The agent pushes the cart "
        "left or right to keep the pole upright.\nState: " + disc.describe_state(0))


def test_cartpole_says_which_way_the_pole_leans_and_how_fast_it_falls() -> None:
    disc = get_spec("CartPole-v1").observation_discretizer()
    state = int(np.ravel_multi_index((1, 1, 4, 1), disc.bins))  # angle in [0.07, 0.14), angular velocity [-2, -1)
    text = said("CartPole-v1", state)
    assert "The cart is near the track's centre" in text and "The cart is almost still" in text
    assert "The pole leans right, clearly (pole angle in [0.0698, 0.14) rad)" in text
    assert "The pole is falling to the left, fast" in text
    assert "The pole leans left, slightly" in said("CartPole-v1", int(np.ravel_multi_index((1, 1, 2, 2), disc.bins)))
    assert "strongly, close to falling" in said("CartPole-v1", 0)


def test_frozenlake_says_what_lies_in_each_neighbouring_cell_and_where_the_goal_is() -> None:
    assert said("FrozenLake-v1.deterministic", 4) == (
        "You are at row 1, col 0, on frozen ice. Left: the edge of the lake (a move there stays put). Down: frozen "
        "ice. Right: a hole. Up: the start (frozen ice). The goal is 2 rows down and 3 columns right.")
    assert "Right: the goal." in said("FrozenLake-v1.deterministic", 14)
    assert said("FrozenLake-v1.8x8", 63).endswith("You are on the goal.")
    assert "Down: a hole." in said("FrozenLake-v1.8x8", 11)  # row 1, col 3 above the hole at row 2, col 3


def test_taxi_says_walls_passenger_and_destination() -> None:
    import gymnasium as gym

    env = gym.make("Taxi-v4").unwrapped
    text = said("Taxi-v4", env.encode(1, 1, 0, 3))  # type: ignore[attr-defined]
    assert "You are at row 1, col 1, on the road." in text and "East: a wall." in text
    assert "The passenger is waiting at the Red stand (row 0, col 0)." in text
    assert "The passenger wants to go to the Blue stand (row 4, col 3)." in text
    assert "The passenger is in the taxi." in said("Taxi-v4", env.encode(4, 4, 4, 3))  # type: ignore[attr-defined]


def test_mountaincar_says_which_hill_and_which_way_the_car_moves() -> None:
    assert said("MountainCar-v0", 0).startswith("The car is on the left hill, away from the flag, high up")
    assert "The car moves to the right, very fast" in said("MountainCar-v0", 255)
    disc = get_spec("MountainCar-v0").observation_discretizer()
    assert "at the bottom of the valley" in said("MountainCar-v0", int(np.ravel_multi_index((6, 7), disc.bins)))


@pytest.mark.parametrize("env_id", ["FrozenLake-v1.deterministic", "FrozenLake-v1.8x8", "FrozenLake-v1", "Taxi-v4"])
def test_the_specs_maps_are_gymnasiums(env_id: str) -> None:
    """The map a meaning text reads is the environment's own (gymnasium's ``desc``, walls included)."""
    from llm_policy_gen.envs.make import make_env

    spec = get_spec(env_id)
    desc = ["".join(ch.decode() for ch in row) for row in make_env(spec).unwrapped.desc]  # type: ignore[attr-defined]
    if env_id == "Taxi-v4":
        desc = [row[1:-1] for row in desc[1:-1]]  # inside the frame
    assert spec.meaning["map"] == desc


def test_a_spec_without_meaning_and_bad_meaning_data_are_one_line_spec_errors() -> None:
    spec = get_spec("Acrobot-v1")
    with pytest.raises(SpecError, match=re.escape("needs a [meaning] table in the spec of Acrobot-v1")):
        check_meaning(spec, spec.observation_discretizer())
    lake = get_spec("FrozenLake-v1.deterministic")
    bad = lake.with_overrides(meaning={**lake.meaning, "cells": {"S": "start"}})
    with pytest.raises(SpecError, match="cells must name every map character"):
        check_meaning(bad, bad.observation_discretizer())
    cart = get_spec("CartPole-v1")
    bad = cart.with_overrides(meaning={"dims": {"pole angle": {"below": "left"}}})
    with pytest.raises(SpecError, match="needs below and above"):
        check_meaning(bad, bad.observation_discretizer())


def test_the_meaning_table_travels_with_the_spec_and_only_where_a_spec_has_one() -> None:
    from llm_policy_gen.envs.spec import EnvSpec

    cart = get_spec("CartPole-v1")
    assert EnvSpec.from_dict(cart.to_dict()) == cart  # a resumed run rebuilds it from config.json
    assert "meaning" not in get_spec("Acrobot-v1").to_dict()
