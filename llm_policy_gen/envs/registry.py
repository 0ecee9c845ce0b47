"""The registry of environment specs: shipped TOML specs, and a generic spec for any other gymnasium id."""

from __future__ import annotations

import difflib
import importlib
from functools import cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import read_toml
from ..errors import SpecError, UserError
from .spec import EnvSpec

__all__ = ["SPEC_DIR", "shipped_env_ids", "get_spec", "load_spec_file", "complete_spec"]

SPEC_DIR = Path(__file__).with_name("specs")


def load_spec_file(path: str | Path) -> EnvSpec:
    """Read one spec TOML file."""
    data = read_toml(path, "spec file")
    return EnvSpec.from_dict(data)


@cache
def _shipped() -> dict[str, Path]:
    out = {}
    for p in sorted(SPEC_DIR.glob("*.toml")):
        out[p.stem] = p
    return out


def shipped_env_ids() -> list[str]:
    """Ids of the environments with a shipped spec."""
    return list(_shipped())


def _gym_registered(env_id: str) -> bool:
    """True for a registered id; ``module:EnvId`` imports ``module`` first (as ``gymnasium.make`` does)."""
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UserError(f"environment {env_id!r}: cannot import module {module!r} ({exc}); it must be importable "
                            "(on PYTHONPATH) and register its environments with gymnasium.register") from None
        return name in gym.registry
    return env_id in gym.registry


def complete_spec(spec: EnvSpec) -> EnvSpec:
    """Fill what gymnasium knows (threshold, episode limit, action count, Box action bounds) into a spec."""
    changes: dict[str, Any] = {}
    gspec = gym.spec(spec.env_id)
    if spec.reward_threshold is None and gspec.reward_threshold is not None:
        changes["reward_threshold"] = float(gspec.reward_threshold)
    if spec.max_episode_steps is None and gspec.max_episode_steps is not None:
        changes["max_episode_steps"] = int(gspec.max_episode_steps)
    need_actions = spec.action_kind == "discrete" and spec.n_actions_discrete == 0 and not spec.action_names
    need_states = not spec.dims and spec.n_discrete_states == 0 and not spec.refusal
    need_bounds = spec.action_kind == "box" and not (spec.action_low and spec.action_high)
    if need_actions or need_states or need_bounds:
        from .generic import make_checked

        env = make_checked(spec.env_id, spec.kwargs)
        try:
            if need_actions and isinstance(env.action_space, gym.spaces.Discrete):
                changes["n_actions_discrete"] = int(env.action_space.n)
            if need_states and isinstance(env.observation_space, gym.spaces.Discrete):
                changes["n_discrete_states"] = int(env.observation_space.n)
            if need_bounds and isinstance(env.action_space, gym.spaces.Box):
                changes["action_low"] = tuple(float(x) for x in np.ravel(env.action_space.low))
                changes["action_high"] = tuple(float(x) for x in np.ravel(env.action_space.high))
        finally:
            env.close()
    return spec.with_overrides(**changes) if changes else spec


def get_spec(env_id: str) -> EnvSpec:
    """The spec for ``env_id``: the shipped one, else a generic spec built from the gymnasium space."""
    if not isinstance(env_id, str) or not env_id:
        raise UserError("no environment given; run `llm-policy-gen envs` for the ready ones")
    shipped = _shipped()
    if env_id in shipped:
        return complete_spec(load_spec_file(shipped[env_id])).validate()
    if not _gym_registered(env_id):
        names = list(dict.fromkeys([*shipped, *(k for k in gym.registry if "/" not in k)]))
        close = difflib.get_close_matches(env_id, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(
            f"unknown environment {env_id!r}{hint} (shipped specs: {', '.join(shipped)}; any registered "
            "gymnasium id also works)"
        )
    from .generic import generic_spec

    try:
        spec = complete_spec(generic_spec(env_id))
        # A spec with a refusal (too many dimensions) is returned unvalidated: --dims/--bins may still fix it,
        # and validate() raises the refusal when they do not.
        return spec if spec.refusal else spec.validate()
    except gym.error.Error as exc:
        raise SpecError(f"{env_id}: gymnasium cannot make it: {exc}") from None
