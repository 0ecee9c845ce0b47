"""A spec for any registered gymnasium environment, built from its spaces (and its docstring).

Observation spaces that a table can hold:

* ``Discrete(n)``: the observation is the state; a grid world (``nrow``/``ncol`` or ``shape`` on the environment,
  as in FrozenLake and CliffWalking) reads as rows and columns.
* A 1-D ``Box``: every dimension is binned. Finite bounds come from the space; infinite (or absurdly large) ones are
  estimated from seeded random episodes as the 1st and 99th percentiles of what was seen, and the spec records it
  (``DimSpec.estimated``, ``EnvSpec.bounds_estimated``, a note). A dimension that only ever took two values (a
  contact flag) gets 2 bins; the others share the default budget of :data:`MAX_DEFAULT_STATES` states, at most
  :data:`MAX_BINS_PER_DIM` bins each.
* ``MultiDiscrete`` or a ``Tuple`` of ``Discrete`` (Blackjack): one bin per value of each part.

Action spaces: ``Discrete``, ``MultiDiscrete`` and a finite 1-D ``Box`` cut into 3 levels per dimension (-1, 0, +1
scaled to the bounds; 2 levels when 3 would give more than :data:`MAX_ACTIONS` actions). The initial table of a
``Box`` task is the action closest to zero on every dimension ("do nothing").

A space no table can hold (images, dicts, text) raises :class:`~llm_policy_gen.errors.SpecError` at once. A 1-D
``Box`` with too many dimensions for the default budget gives a spec whose ``refusal`` says so; ``--dims`` (and
``--bins``) then pick what to tabulate (see :mod:`llm_policy_gen.envs.tailor`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import gymnasium as gym
import numpy as np

from ..discretize import BoxActions, DimSpec
from ..errors import SpecError
from .gymdoc import GymDoc, parse_gym_doc
from .spec import EnvSpec

__all__ = [
    "DEFAULT_BINS",
    "MAX_BINS_PER_DIM",
    "MAX_DEFAULT_STATES",
    "MAX_ACTIONS",
    "DEFAULT_MAX_STEPS",
    "SAMPLE_EPISODES",
    "SAMPLE_STEPS",
    "QUANTILES",
    "generic_spec",
    "make_checked",
    "env_spaces",
    "grid_of",
    "sample_observations",
    "box_dims",
    "default_bins",
    "tuple_part_names",
    "registered_id",
]

DEFAULT_BINS = 6
"""Bins of a dimension chosen with ``--dims`` without ``--bins``."""
MAX_BINS_PER_DIM = 10
"""Upper bound on the default bins of one dimension (a 2-D task gets 10 x 10)."""
MAX_DEFAULT_STATES = 1296
"""State budget of a default generic table (6 x 6 x 6 x 6, the size of CartPole's table times four)."""
MAX_ACTIONS = 729
"""Upper bound on the discretized actions of a generic spec (3 levels on 6 action dimensions)."""
SAMPLE_EPISODES = 20
"""Random episodes sampled to estimate infinite bounds."""
SAMPLE_STEPS = 5000
"""Upper bound on the steps of those episodes."""
QUANTILES = (0.01, 0.99)
"""Estimated bounds: these quantiles of the sampled values."""
DEFAULT_MAX_STEPS = 500
"""Episode step limit of an environment gymnasium registers without one (CliffWalking): a table that walks into a
wall forever must still end its episodes."""
HUGE = 1e6
"""A bound at least this large (e.g. float32's maximum) counts as infinite."""


def _key(kwargs: dict[str, Any] | None) -> str:
    return json.dumps(kwargs or {}, sort_keys=True, default=str)


def registered_id(env_id: str) -> str:
    """The id under which gymnasium's registry holds ``env_id``: ``module:EnvId`` (whose module ``gymnasium.make``
    imports first) is registered as ``EnvId``; ``gymnasium.spec`` takes only that form."""
    return env_id.partition(":")[2] if ":" in env_id else env_id


def make_checked(env_id: str, kwargs: dict[str, Any], **extra: Any) -> gym.Env[Any, Any]:
    """``gymnasium.make``; keyword arguments the environment refuses are a one-line :class:`SpecError`."""
    try:
        return gym.make(env_id, **kwargs, **extra)
    except (TypeError, KeyError, ValueError, AssertionError, gym.error.Error) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        if isinstance(exc, TypeError) and " was raised from the environment creator" in detail:
            detail = detail.split(" was raised from the environment creator")[0]
        shown = json.dumps(kwargs, sort_keys=True, default=str)
        raise SpecError(f"{env_id}: gymnasium cannot make it with keyword arguments {shown}: "
                        f"{type(exc).__name__}: {detail}"[:300]) from None
    except (ImportError, AttributeError, RuntimeError) as exc:
        gl = os.environ.get("MUJOCO_GL", "").strip()
        if not gl:
            raise
        # MuJoCo loads the OpenGL backend MUJOCO_GL names when it is imported; a missing one fails right there.
        detail = (str(exc).splitlines() or [""])[0][:120]
        raise SpecError(f"{env_id}: cannot be loaded with MUJOCO_GL={gl} ({type(exc).__name__}: {detail}); set "
                        "MUJOCO_GL to a backend installed here (egl: apt-get install libegl1; osmesa: apt-get "
                        "install libosmesa6) or unset it") from None


@lru_cache(maxsize=32)
def _spaces(env_id: str, kwargs_key: str) -> tuple[gym.Space[Any], gym.Space[Any], str | None, tuple[int, int] | None]:
    env = make_checked(env_id, json.loads(kwargs_key), disable_env_checker=True)
    try:
        raw = env.unwrapped
        grid = None
        rows, cols = getattr(raw, "nrow", None), getattr(raw, "ncol", None)
        shape = getattr(raw, "shape", None)
        if isinstance(rows, int) and isinstance(cols, int):
            grid = (rows, cols)
        elif isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(x, int) for x in shape):
            grid = (int(shape[0]), int(shape[1]))
        return env.observation_space, env.action_space, type(raw).__doc__, grid
    finally:
        env.close()


def grid_of(env_id: str, kwargs: dict[str, Any] | None = None) -> tuple[int, int] | None:
    """(rows, cols) of a grid world (``nrow``/``ncol`` or a 2-tuple ``shape`` on the environment), else None."""
    return _spaces(env_id, _key(kwargs))[3]


def env_spaces(env_id: str, kwargs: dict[str, Any] | None = None) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The observation and action spaces of ``gymnasium.make(env_id, **kwargs)`` (cached)."""
    obs, act, _, _ = _spaces(env_id, _key(kwargs))
    return obs, act


def _finite_output(env_id: str, what: str, value: Any, step: int, seed: int) -> np.ndarray:
    """``value`` as a flat float array; a non-finite one is a :class:`SpecError` naming the step and the episode."""
    x = np.asarray(value, dtype=np.float64).reshape(-1)
    if not np.isfinite(x).all():
        where = "at reset" if step == 0 else f"at step {step}"
        shown = np.array2string(x, threshold=8) if what == "observation" else repr(float(x[0]))
        raise SpecError(f"{env_id}: the environment returned a non-finite {what} ({shown}) {where} of the random "
                        f"episode with seed {seed}; rewards and observations must be finite numbers (fix the "
                        "environment, or wrap it to replace NaN and infinity)")
    return x


@lru_cache(maxsize=16)
def _samples(env_id: str, kwargs_key: str, seed: int, episodes: int, max_steps: int) -> np.ndarray:
    env = make_checked(env_id, json.loads(kwargs_key), disable_env_checker=True)
    try:
        env.action_space.seed(seed)
        out: list[np.ndarray] = []
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            out.append(_finite_output(env_id, "observation", obs, 0, seed + ep))
            done, step = False, 0
            while not done and len(out) < max_steps:
                obs, reward, term, trunc, _ = env.step(env.action_space.sample())
                step += 1
                _finite_output(env_id, "reward", reward, step, seed + ep)
                out.append(_finite_output(env_id, "observation", obs, step, seed + ep))
                done = bool(term or trunc)
            if len(out) >= max_steps:
                break
        return np.stack(out)
    finally:
        env.close()


def sample_observations(
    env_id: str,
    kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    episodes: int = SAMPLE_EPISODES,
    max_steps: int = SAMPLE_STEPS,
) -> np.ndarray:
    """(N, obs_dim) observations of seeded random episodes (cached; the same arguments give the same array)."""
    return _samples(env_id, _key(kwargs), int(seed), int(episodes), int(max_steps))


def _finite(x: float) -> bool:
    return bool(np.isfinite(x)) and abs(x) < HUGE


def _doc(env_id: str, kwargs: dict[str, Any] | None) -> GymDoc:
    return parse_gym_doc(_spaces(env_id, _key(kwargs))[2])


_TUPLE_SENTENCE = re.compile(r"(\d+)-tuple containing:?\s*(.+?)\.(?:\s|$)", re.DOTALL)


def tuple_part_names(doc: str | None, n: int) -> dict[int, str]:
    """Names of a tuple observation's ``n`` parts from a sentence such as Blackjack's "The observation consists of
    a 3-tuple containing: the player's current sum, the value of the dealer's one showing card (1-10 where 1 is
    ace), and whether the player holds a usable ace (0 or 1)." (best effort: no names when it does not parse)."""
    m = _TUPLE_SENTENCE.search(doc or "")
    if m is None or int(m.group(1)) != n:
        return {}
    text = re.sub(r"\([^)]*\)", "", " ".join(m.group(2).split()))
    parts = [p.strip() for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", text) if p.strip()]
    if len(parts) != n:
        return {}
    return {i: re.sub(r"^(?:whether\s+)?(?:the|a|an)\s+", "", p) for i, p in enumerate(parts)}


def box_dims(env_id: str, kwargs: dict[str, Any] | None, indices: Sequence[int], bins: Sequence[int]) -> list[DimSpec]:
    """Dimensions ``indices`` of a 1-D ``Box`` observation with the given bins; infinite bounds are estimated.

    Names come from the environment's docstring table where it has one, else ``obs[i]``.
    """
    names = _doc(env_id, kwargs).observation_names
    obs_space, _ = env_spaces(env_id, kwargs)
    assert isinstance(obs_space, gym.spaces.Box)
    low = np.asarray(obs_space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(obs_space.high, dtype=np.float64).reshape(-1)
    need = [i for i in indices if not (_finite(low[i]) and _finite(high[i]))]
    samples = sample_observations(env_id, kwargs)[:, need] if need else None
    out = []
    for i, b in zip(indices, bins, strict=True):
        lo, hi, est = float(low[i]), float(high[i]), False
        if i in need:
            assert samples is not None
            q_lo, q_hi = (float(q) for q in np.quantile(samples[:, need.index(i)], QUANTILES))
            if q_hi - q_lo < 1e-6:
                pad = max(1e-3, 0.1 * abs(q_lo))
                q_lo, q_hi = q_lo - pad, q_hi + pad
            lo = lo if _finite(lo) else q_lo
            hi = hi if _finite(hi) else q_hi
            if not lo < hi:  # one finite side and samples beyond it
                lo, hi = (lo, lo + abs(q_hi - q_lo) + 1e-3) if _finite(lo) else (hi - abs(q_hi - q_lo) - 1e-3, hi)
            est = True
        name = names.get(i) or f"obs[{i}]"
        out.append(DimSpec(name=name, low=round(lo, 6), high=round(hi, 6), bins=int(b), index=int(i), estimated=est))
    return out


def default_bins(n_dims: int, two_valued: Sequence[bool] = (), budget: int = MAX_DEFAULT_STATES) -> list[int] | None:
    """Bins per dimension within ``budget`` states: 2 for two-valued dims, an even share (<= 10) for the others.

    None when even 2 bins per dimension exceed the budget.
    """
    flags = list(two_valued) or [False] * n_dims
    free = [j for j in range(n_dims) if not flags[j]]
    rest = budget // (2 ** (n_dims - len(free)))
    if rest < 1 or (free and 2 ** len(free) > rest):
        return None
    if not free:
        return [2] * n_dims
    b = min(MAX_BINS_PER_DIM, int(math.floor(rest ** (1.0 / len(free)) + 1e-9)))
    while b > 2 and b ** len(free) > rest:
        b -= 1
    sizes = {j: b for j in free}
    for j in free:  # spend what is left of the budget, first dimensions first
        if b < MAX_BINS_PER_DIM and math.prod(sizes.values()) // b * (b + 1) <= rest:
            sizes[j] = b + 1
    return [2 if flags[j] else sizes[j] for j in range(n_dims)]


def _two_valued(samples: np.ndarray) -> list[bool]:
    return [len(np.unique(samples[:, j])) == 2 for j in range(samples.shape[1])]


def _discrete_parts(space: gym.Space[Any]) -> list[tuple[int, int]] | None:
    """(start, n) of each part of a MultiDiscrete or a Tuple of Discrete, else None."""
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return [(int(s), int(n)) for s, n in zip(space.start, space.nvec, strict=True)]
    if isinstance(space, gym.spaces.Tuple) and all(isinstance(s, gym.spaces.Discrete) for s in space.spaces):
        return [(int(s.start), int(s.n)) for s in space.spaces]  # type: ignore[attr-defined]
    return None


def _observation_fields(env_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any]:
    obs, _, _, grid = _spaces(env_id, _key(kwargs))
    if isinstance(obs, gym.spaces.Discrete):
        if int(obs.start) != 0:
            return {"dims": (DimSpec("state", int(obs.start), int(obs.start + obs.n), int(obs.n), index=0),)}
        fields: dict[str, Any] = {"n_discrete_states": int(obs.n)}
        if grid is not None and grid[0] * grid[1] == int(obs.n):
            fields["grid"] = grid
        return fields
    parts = _discrete_parts(obs)
    if parts is not None:
        names = _doc(env_id, kwargs).observation_names or tuple_part_names(_spaces(env_id, _key(kwargs))[2],
                                                                            len(parts))
        dims = tuple(DimSpec(names.get(i) or f"obs[{i}]", s, s + n, n, index=i) for i, (s, n) in enumerate(parts))
        return {"dims": dims}
    if isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1:
        n = int(obs.shape[0])
        samples = sample_observations(env_id, kwargs)
        bins = default_bins(n, _two_valued(samples))
        if bins is None:
            return {"refusal": (
                f"{env_id}: {n} observation dimensions are too many for a table (2 bins each would give "
                f"{2 ** n} states, over the default budget of {MAX_DEFAULT_STATES}); choose a few with --dims "
                f"(e.g. --dims 0,1,2,3, indices 0..{n - 1}) and optionally their bins with --bins"
            )}
        dims = tuple(box_dims(env_id, kwargs, range(n), bins))
        fields = {"dims": dims}
        est = [d.name for d in dims if d.estimated]
        if est:
            fields["bounds_estimated"] = True
            fields["notes"] = (
                f"bounds of {', '.join(est)} estimated from {SAMPLE_EPISODES} seeded random episodes "
                f"(at most {SAMPLE_STEPS} steps), {int(QUANTILES[0] * 100)}th to {int(QUANTILES[1] * 100)}th "
                "percentile",
            )
        return fields
    if isinstance(obs, gym.spaces.Box):
        why = f"a Box of shape {obs.shape} (an image or array) is not a flat vector"
    elif isinstance(obs, gym.spaces.Dict):
        why = f"a Dict space ({', '.join(obs.spaces)}) has no single vector to bin"
    else:
        why = f"{type(obs).__name__} spaces have no bins"
    raise SpecError(
        f"{env_id}: observation space {obs} cannot be tabulated: {why}. Supported: Discrete, MultiDiscrete, a "
        "Tuple of Discrete, or a 1-D Box (whose dimensions --dims picks and --bins bins); wrap the environment "
        "to flatten or select features first"
    )


def _action_fields(env_id: str, act: gym.Space[Any], names: dict[int, str]) -> dict[str, Any]:
    if isinstance(act, gym.spaces.Discrete):
        if int(act.start) != 0:
            raise SpecError(f"{env_id}: a Discrete action space starting at {int(act.start)} is not supported")
        n = int(act.n)
        fields: dict[str, Any] = {"action_kind": "discrete", "n_actions_discrete": n}
        if len(names) == n:
            fields["action_names"] = tuple(names[i] for i in range(n))
        return fields
    if isinstance(act, gym.spaces.MultiDiscrete) and act.nvec.ndim == 1:
        if np.any(act.start != 0):
            raise SpecError(f"{env_id}: a MultiDiscrete action space with nonzero start is not supported")
        total = math.prod(int(n) for n in act.nvec)
        if total > MAX_ACTIONS:
            raise SpecError(f"{env_id}: action space {act} has {total} joint actions, over {MAX_ACTIONS} for a table")
        return {"action_kind": "multidiscrete", "action_nvec": tuple(int(n) for n in act.nvec)}
    if isinstance(act, gym.spaces.Box) and len(act.shape) == 1:
        low = np.asarray(act.low, dtype=np.float64)
        high = np.asarray(act.high, dtype=np.float64)
        if not (all(_finite(x) for x in low) and all(_finite(x) for x in high)):
            raise SpecError(f"{env_id}: action space {act} has infinite bounds; give finite ones in a spec file")
        k = low.size
        levels = 3 if 3**k <= MAX_ACTIONS else 2
        if levels**k > MAX_ACTIONS:
            raise SpecError(
                f"{env_id}: {k} action dimensions give {2**k} actions even at 2 levels each, over {MAX_ACTIONS} "
                "for a table"
            )
        dim_names = tuple(names[i] for i in range(k)) if len(names) == k else tuple(f"a{i}" for i in range(k))
        acts = BoxActions(low, high, levels, dim_names)
        zero = int(np.argmin(np.abs(acts.to_env(np.arange(acts.n_actions))).sum(axis=1)))
        return {"action_kind": "box", "action_low": tuple(low.tolist()), "action_high": tuple(high.tolist()),
                "action_levels": levels, "action_names": dim_names, "default_action": zero}
    raise SpecError(
        f"{env_id}: action space {act} is not supported; supported: Discrete, MultiDiscrete, a 1-D finite Box"
    )


def generic_spec(env_id: str, kwargs: dict[str, Any] | None = None) -> EnvSpec:
    """Spec from the observation and action spaces; refuses spaces a table cannot hold (see the module doc)."""
    _, act = env_spaces(env_id, kwargs)
    doc = _doc(env_id, kwargs)
    fields = {**_observation_fields(env_id, kwargs),
              **_action_fields(env_id, act, doc.action_names)}
    notes = tuple(fields.pop("notes", ())) + ("generic spec built from the gymnasium spaces (no shipped spec)",)
    reward = doc.reward
    if gym.spec(registered_id(env_id)).max_episode_steps is None:
        fields["max_episode_steps"] = DEFAULT_MAX_STEPS
        notes += (f"gymnasium sets no step limit: episodes are cut after {DEFAULT_MAX_STEPS} steps",)
        reward = f"{reward} Episodes are cut after {DEFAULT_MAX_STEPS} steps here.".strip()
    return EnvSpec(
        env_id=env_id,
        title=env_id,
        description=doc.description,
        reward=reward,
        kwargs=dict(kwargs or {}),
        notes=notes,
        **fields,
    )
