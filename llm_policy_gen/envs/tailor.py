"""``--dims`` and ``--bins``: choose which observation dimensions a table uses and how finely it bins them.

* ``dims``: indices into the raw observation vector, in the order the table uses them (its row-major order). A
  dimension the spec already has keeps its name, bounds and bins; any other gets its bounds from the observation
  space, or estimated from seeded random episodes when infinite (see :mod:`llm_policy_gen.envs.generic`), and
  :data:`~llm_policy_gen.envs.generic.DEFAULT_BINS` bins.
* ``bins``: one value for every dimension, or one per dimension (after ``dims`` is applied).

Both apply to tables over a ``Box`` observation (or a generic spec that was refused for having too many
dimensions); a ``Discrete`` observation is its own table and is refused with a message. A spec prior whose rule
names a dimension that is no longer used is dropped (with a note). Every problem raises
:class:`~llm_policy_gen.errors.SpecError` naming the bad value and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from ..discretize import DimSpec
from ..errors import SpecError
from .catalog import complete_spec, shipped_env_ids
from .generic import DEFAULT_BINS, box_dims, env_spaces, generic_spec, grid_of
from .spec import EnvSpec
from .text import RENDERERS, describe_kwargs

__all__ = ["MAX_BINS", "MAX_EPISODE_STEPS", "MAX_STATES", "apply_dims_bins", "apply_env_kwargs"]

MAX_BINS = 1000
"""Upper bound on the bins of one dimension."""
MAX_STATES = 1_000_000
"""Upper bound on a table's states (the same cap as :meth:`EnvSpec.validate`)."""
MAX_EPISODE_STEPS = 1_000_000
"""Upper bound on a step limit given in ``--env-kwargs`` (an episode that long is a hang, not a task)."""


def _int_list(name: str, values: Sequence[int]) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
        raise SpecError(f"bad --{name} {values!r}: accepted a non-empty comma-separated list of integers")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"bad --{name} value {v!r}: accepted integers only")
        out.append(int(v))
    return out


def _obs_dim(spec: EnvSpec) -> int:
    obs, _ = env_spaces(spec.env_id, spec.kwargs)
    if isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1:
        return int(obs.shape[0])
    if spec.dims:  # MultiDiscrete or Tuple observations tabulated as dims
        return len(spec.dims)
    raise SpecError(
        f"{spec.env_id}: --dims and --bins apply to a vector (Box) observation; this one is {obs}"
        + (f" and is its own table of {spec.n_discrete_states} states" if spec.n_discrete_states else "")
    )


def apply_dims_bins(spec: EnvSpec, dims: Sequence[int] | None, bins: Sequence[int] | None) -> EnvSpec:
    """``spec`` with the observation dimensions ``dims`` binned with ``bins`` (None keeps each as it is)."""
    if dims is None and bins is None:
        return spec
    if spec.n_discrete_states and not spec.dims:
        raise SpecError(
            f"{spec.env_id}: the observation is Discrete ({spec.n_discrete_states} states, one per table row); "
            "--dims and --bins apply to vector (Box) observations only"
        )
    n_obs = _obs_dim(spec)
    existing = {d.index: d for d in spec.dims}
    if dims is None:
        indices = [d.index for d in spec.dims] or list(range(n_obs))
    else:
        indices = _int_list("dims", dims)
        bad = [i for i in indices if not 0 <= i < n_obs]
        if bad:
            raise SpecError(f"bad --dims {indices}: index {bad[0]} out of range; accepted 0..{n_obs - 1}")
        if len(set(indices)) != len(indices):
            raise SpecError(f"bad --dims {indices}: an index repeats; give each dimension once")
    if bins is None:
        sizes = [existing[i].bins if i in existing else DEFAULT_BINS for i in indices]
    else:
        given = _int_list("bins", bins)
        if len(given) not in (1, len(indices)):
            raise SpecError(
                f"bad --bins {given}: give 1 value or {len(indices)} (one per dimension: "
                f"{', '.join(existing[i].name if i in existing else f'obs[{i}]' for i in indices)})"
            )
        sizes = given * len(indices) if len(given) == 1 else given
        bad = [b for b in sizes if not 1 <= b <= MAX_BINS]
        if bad:
            raise SpecError(f"bad --bins {given}: {bad[0]} is out of range; accepted 1..{MAX_BINS} per dimension")
    total = math.prod(sizes)
    if total == 1:
        raise SpecError(f"bad --bins {sizes}: one bin on every dimension gives a table of one state (one action for "
                        "every observation); give at least one dimension 2 bins or more")
    if total > MAX_STATES:
        raise SpecError(
            f"{spec.env_id}: bins {sizes} give {total} states, over the cap of {MAX_STATES}; use fewer --bins or --dims"
        )
    fresh_idx = [i for i in indices if i not in existing]
    fresh = {}
    if fresh_idx:
        fresh = {d.index: d for d in box_dims(spec.env_id, spec.kwargs, fresh_idx,
                                              [sizes[indices.index(i)] for i in fresh_idx])}
    new_dims: list[DimSpec] = []
    for i, b in zip(indices, sizes, strict=True):
        base = existing.get(i) or fresh[i]
        new_dims.append(DimSpec(name=base.name, low=base.low, high=base.high, bins=b, index=i, unit=base.unit,
                                estimated=base.estimated))
    notes = list(spec.notes)
    prior = spec.prior
    if prior is not None and not set(prior.weights) <= {d.name for d in new_dims}:
        notes.append(f"prior rule dropped: it uses dimensions not tabulated ({', '.join(sorted(prior.weights))})")
        prior = None
    notes.append(f"dims {indices} with bins {sizes} chosen with --dims/--bins")
    return spec.with_overrides(
        dims=tuple(new_dims),
        prior=prior,
        refusal="",
        bounds_estimated=any(d.estimated for d in new_dims),
        notes=tuple(notes),
    )


def _check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments that no run can use: a render mode (training never renders; ``human`` opens a
    window and slows every step down), and a step limit that is not a positive integer (gymnasium takes a negative
    one as "no limit", and an episode that never ends would hang the run)."""
    if "render_mode" in kwargs:
        raise SpecError(f"{env_id}: render_mode is not accepted in --env-kwargs: training and evaluation do not "
                        "render (use `evaluate --gif FILE.gif` for an animation)")
    if "max_episode_steps" in kwargs:
        steps = kwargs["max_episode_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_EPISODE_STEPS:
            raise SpecError(f"{env_id}: bad max_episode_steps {steps!r} in --env-kwargs: accepted an integer from 1 "
                            f"to {MAX_EPISODE_STEPS:,} (every episode needs a step limit)")


def apply_env_kwargs(spec: EnvSpec, kwargs: dict[str, Any] | None) -> EnvSpec:
    """``spec`` for ``gymnasium.make(env_id, **spec.kwargs, **kwargs)``, with what the spaces decide made to match.

    Keyword arguments can change the spaces (FrozenLake's ``map_name="8x8"`` has 64 states, not 16): a generic spec
    is rebuilt from the new spaces; a shipped spec gets the new number of discrete states, grid, discrete actions
    and Box action bounds, and a Box observation must still hold every dimension the spec uses.
    """
    if not kwargs:
        return spec
    _check_env_kwargs(spec.env_id, kwargs)
    merged = {**spec.kwargs, **kwargs}
    if spec.env_id not in shipped_env_ids():
        generic = complete_spec(generic_spec(spec.env_id, merged))
        steps = kwargs.get("max_episode_steps", generic.max_episode_steps)
        return generic.with_overrides(max_episode_steps=steps)
    obs, act = env_spaces(spec.env_id, merged)
    changes: dict[str, Any] = {"kwargs": merged}
    if isinstance(obs, gym.spaces.Discrete) and not spec.dims:
        n = int(obs.n)
        if n != spec.n_discrete_states:
            changes["n_discrete_states"] = n
            grid = grid_of(spec.env_id, merged)
            changes["grid"] = grid if grid is not None and grid[0] * grid[1] == n else None
            if spec.env_id not in RENDERERS:  # else the text is rendered for them below
                changes["notes"] = (*spec.notes, f"env kwargs {kwargs} give {n} states; the task text may describe "
                                                 f"the default ({spec.n_discrete_states} states)")
    elif isinstance(obs, gym.spaces.Box) and spec.dims:
        top = max(d.index for d in spec.dims)
        if len(obs.shape) != 1 or top >= obs.shape[0]:
            raise SpecError(f"{spec.env_id}: with env kwargs {kwargs} the observation is {obs}; the spec uses "
                            f"index {top}; choose dimensions with --dims")
    if isinstance(act, gym.spaces.Discrete) and spec.action_kind == "discrete" and int(act.n) != spec.n_actions:
        changes["n_actions_discrete"] = int(act.n)
        changes["action_names"] = ()
    if isinstance(act, gym.spaces.Box) and spec.action_kind == "box":
        changes["action_low"] = tuple(float(x) for x in act.low.reshape(-1))
        changes["action_high"] = tuple(float(x) for x in act.high.reshape(-1))
    if "max_episode_steps" in kwargs:
        changes["max_episode_steps"] = int(kwargs["max_episode_steps"])
    return describe_kwargs(spec, spec.with_overrides(**changes))
