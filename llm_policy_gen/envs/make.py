"""Build a gymnasium environment from a spec, with the spec's reward wrappers."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from ..errors import SpecError
from .spec import EnvSpec

__all__ = ["make_env", "RemoveFallPenalty", "REWARD_WRAPPERS"]


class RemoveFallPenalty(gym.Wrapper):  # type: ignore[type-arg]
    """Adds back the -100 that BipedalWalker (and LunarLander-like tasks) give on a fall, as the seed project did."""

    def __init__(self, env: gym.Env, penalty: float = -100.0) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.penalty = penalty

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and float(reward) <= self.penalty:
            reward = float(reward) - self.penalty
        return obs, reward, terminated, truncated, info


REWARD_WRAPPERS: dict[str, type[gym.Wrapper]] = {"remove_fall_penalty": RemoveFallPenalty}  # type: ignore[type-arg]


def make_env(spec: EnvSpec, render_mode: str | None = None) -> gym.Env:  # type: ignore[type-arg]
    """``gymnasium.make`` with the spec's kwargs, then its reward wrappers in order."""
    kwargs = dict(spec.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if spec.max_episode_steps is not None:
        kwargs.setdefault("max_episode_steps", spec.max_episode_steps)
    from .catalog import import_env_module
    from .generic import make_checked

    import_env_module(spec.env_id)  # a module that cannot be imported: one line, not gymnasium's traceback
    env = make_checked(spec.env_id, kwargs, disable_env_checker=True)
    for name in spec.reward_wrappers:
        if name not in REWARD_WRAPPERS:
            raise SpecError(f"unknown reward wrapper {name!r}; accepted: {', '.join(REWARD_WRAPPERS)}")
        env = REWARD_WRAPPERS[name](env)
    return env
