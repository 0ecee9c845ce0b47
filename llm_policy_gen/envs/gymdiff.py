"""What a shipped spec changes from gymnasium's own registration of its environment, for ``envs`` to show.

A spec runs ``gymnasium.make(env_id, **kwargs)`` with its own ``[kwargs]``, may add a step limit gymnasium does not
set (CliffWalking-v1: 500) and may declare its own solved threshold. :func:`gym_differences` compares a spec with
gymnasium's registration: the keyword arguments whose value differs from what gymnasium would use (its registered
kwargs over the constructor's defaults), the step limit, the reward wrappers, and where the threshold comes from:

* ``gymnasium ID``: the reward_threshold gymnasium registers for this very configuration (same entry point,
  keyword arguments and step limit), under the spec's own id or another one (FrozenLake-v1.8x8 is gymnasium's
  FrozenLake8x8-v1);
* ``gymnasium ID (for its own kwargs)``: gymnasium's threshold of the id, taken for a spec that changes its
  kwargs or limit (FrozenLake-v1.deterministic takes FrozenLake-v1's 0.7, which gymnasium sets for the slippery lake);
* ``ours``: the spec's own, where gymnasium registers none for this configuration;
* ``ours (gymnasium ID: X)``: a spec that contradicts gymnasium; no shipped spec does (``tests/test_gym_defaults.py``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from .spec import EnvSpec

__all__ = ["GymDifferences", "gym_differences", "gym_counterpart"]

_MISSING = object()


@dataclass(frozen=True)
class GymDifferences:
    """A spec against gymnasium's registration of its environment."""

    kwargs: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Keyword arguments whose value differs: name -> (the spec's, gymnasium's; None where gymnasium has none)."""
    step_limit: tuple[int | None, int | None] | None = None
    """(the spec's, gymnasium's) episode step limit when they differ (None: no limit), else None."""
    reward_wrappers: tuple[str, ...] = ()
    """Reward wrappers the spec adds (the score changes from gymnasium's)."""
    threshold: float | None = None
    threshold_source: str = ""
    """Where :attr:`threshold` comes from (see the module docstring); '' without a threshold."""

    def lines(self) -> list[str]:
        """One phrase per difference, for a console line."""
        out = [f"{k}={ours!r} (gymnasium: {theirs!r})" for k, (ours, theirs) in sorted(self.kwargs.items())]
        if self.step_limit is not None:
            ours, theirs = self.step_limit
            out.append(f"step limit {ours or 'none'} (gymnasium: {theirs or 'none'})")
        out.extend(f"reward wrapper {w}" for w in self.reward_wrappers)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kwargs": {k: {"spec": a, "gymnasium": b} for k, (a, b) in sorted(self.kwargs.items())},
                "step_limit": None if self.step_limit is None else
                {"spec": self.step_limit[0], "gymnasium": self.step_limit[1]},
                "reward_wrappers": list(self.reward_wrappers), "threshold_source": self.threshold_source}


def _constructor_defaults(entry_point: Any) -> dict[str, Any]:
    """The keyword defaults of an environment's constructor ({} where it cannot be read, as for a missing extra)."""
    try:
        from gymnasium.envs.registration import load_env_creator

        creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        params = inspect.signature(creator).parameters.values()
    except Exception:  # an extra that is not installed (mujoco, box2d): compare registered kwargs only
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in params if p.kind in kinds and p.default is not inspect.Parameter.empty}


def _effective(gspec: Any, defaults: dict[str, Any], kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**defaults, **(gspec.kwargs or {}), **(kwargs or {})}


def gym_counterpart(spec: EnvSpec) -> str | None:
    """The gymnasium id registered for the spec's configuration: the same entry point, the same effective keyword
    arguments and the same step limit (the spec's own id first); None when gymnasium registers none."""
    from .generic import registered_id

    own = registered_id(spec.env_id)
    if own not in gym.registry:
        return None
    base = gym.registry[own]
    defaults = _constructor_defaults(base.entry_point)
    mine = _effective(base, defaults, spec.kwargs)
    steps = spec.max_episode_steps
    for gid in [own, *sorted(k for k in gym.registry if k != own)]:
        g = gym.registry[gid]
        if g.entry_point == base.entry_point and g.max_episode_steps == steps and _effective(g, defaults) == mine:
            return gid
    return None


def gym_differences(spec: EnvSpec, declared_threshold: float | None) -> GymDifferences:
    """``spec`` (completed, as ``get_spec`` returns it) against gymnasium's registration of its id;
    ``declared_threshold``: the threshold the spec's own file sets (None when it takes gymnasium's)."""
    from .generic import registered_id

    own = registered_id(spec.env_id)
    base = gym.registry.get(own)
    if base is None:
        return GymDifferences(reward_wrappers=spec.reward_wrappers, threshold=spec.reward_threshold,
                              threshold_source="ours" if spec.reward_threshold is not None else "")
    theirs = _effective(base, _constructor_defaults(base.entry_point))
    kwargs = {k: (v, theirs.get(k)) for k, v in spec.kwargs.items() if theirs.get(k, _MISSING) != v}
    limit = None if spec.max_episode_steps == base.max_episode_steps else (spec.max_episode_steps,
                                                                            base.max_episode_steps)
    return GymDifferences(kwargs, limit, spec.reward_wrappers, spec.reward_threshold,
                          _threshold_source(spec, declared_threshold, own, base.reward_threshold))


def _threshold_source(spec: EnvSpec, declared: float | None, own: str, registered: float | None) -> str:
    if spec.reward_threshold is None:
        return ""
    twin = gym_counterpart(spec)
    known = None if twin is None else gym.registry[twin].reward_threshold
    if twin is not None and known is not None:
        return f"gymnasium {twin}" if float(known) == spec.reward_threshold else f"ours (gymnasium {twin}: {known:g})"
    if declared is None and registered is not None:
        return f"gymnasium {own} (for its own kwargs)"
    return "ours"
