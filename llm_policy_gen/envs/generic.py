"""A spec for any registered gymnasium environment, built from its spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ..discretize import DimSpec
from ..errors import SpecError
from .spec import EnvSpec

__all__ = ["generic_spec", "DEFAULT_BINS"]

DEFAULT_BINS = 6


def generic_spec(env_id: str, bins: int = DEFAULT_BINS) -> EnvSpec:
    """Spec from the observation and action spaces; refuses spaces a table cannot hold."""
    env = gym.make(env_id)
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    kw: dict[str, object] = {}
    if isinstance(obs, gym.spaces.Discrete):
        kw["n_discrete_states"] = int(obs.n)
    elif isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1:
        low, high = np.asarray(obs.low, dtype=float), np.asarray(obs.high, dtype=float)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise SpecError(
                f"{env_id}: observation bounds are infinite; give finite bounds in a spec file (--config) "
                "or choose dimensions with --dims"
            )
        kw["dims"] = tuple(
            DimSpec(name=f"obs[{i}]", low=float(low[i]), high=float(high[i]), bins=bins, index=i)
            for i in range(low.size)
        )
    else:
        raise SpecError(
            f"{env_id}: observation space {obs} cannot be tabulated; supported: Discrete or a 1-D Box "
            "(choose dimensions with --dims and bins with --bins)"
        )
    if isinstance(act, gym.spaces.Discrete):
        kw["action_kind"] = "discrete"
        kw["n_actions_discrete"] = int(act.n)
    else:
        raise SpecError(f"{env_id}: action space {act} is not supported yet; supported: Discrete")
    return EnvSpec(env_id=env_id, title=env_id, **kw)  # type: ignore[arg-type]
