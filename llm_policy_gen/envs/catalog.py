"""The catalog of environment specs: shipped TOML specs, and a generic spec for any other gymnasium id.

``specs/ENV_ID.toml`` is the default spec of ``ENV_ID``; ``specs/ENV_ID.VARIANT.toml`` is a variant of it (for
example ``Hopper-v5.rich``: a table over all eleven observations next to the seed project's four), selected by the
id ``ENV_ID.VARIANT`` (``--env Hopper-v5.rich``, or ``--env Hopper-v5 --spec rich``).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import SpecError, UserError
from ..storage.config_files import read_toml
from .spec import EnvSpec

__all__ = ["SPEC_DIR", "shipped_env_ids", "spec_variants", "variant_id", "gym_id", "get_spec", "load_spec_file",
           "shipped_spec_file", "recorded_spec_id", "complete_spec", "import_env_module", "check_env_named"]

SPEC_DIR = Path(__file__).with_name("specs")


def load_spec_file(path: str | Path) -> EnvSpec:
    """Read one spec TOML file."""
    data = read_toml(path, "spec file")
    return EnvSpec.from_dict(data)


@cache
def _spec_files() -> tuple[dict[str, Path], dict[str, Path]]:
    """(default specs by env id, variants by ``ENV_ID.VARIANT``): a variant's name is its file name's last part."""
    stems = {p.stem: p for p in sorted(SPEC_DIR.glob("*.toml"))}
    defaults = {k: v for k, v in stems.items() if not any(k.startswith(d + ".") for d in stems if d != k)}
    variants = {k: v for k, v in stems.items() if k not in defaults}
    return defaults, variants


def _shipped() -> dict[str, Path]:
    return _spec_files()[0]


def shipped_env_ids() -> list[str]:
    """Ids of the environments with a shipped spec (their default specs)."""
    return list(_shipped())


def spec_variants(env_id: str | None = None) -> list[str]:
    """Ids ``ENV_ID.VARIANT`` of the shipped spec variants (of ``env_id`` only, when given)."""
    return [k for k in _spec_files()[1] if env_id is None or k.startswith(env_id + ".")]


def shipped_spec_file(name: str) -> Path | None:
    """The TOML file of the shipped spec or variant ``name`` (None for any other id)."""
    defaults, variants = _spec_files()
    return defaults.get(name) or variants.get(name)


def recorded_spec_id(env_id: str, recorded_kwargs: Mapping[str, Any], env_kwargs: Mapping[str, Any] | None) -> str:
    """The spec id that makes a recorded run's environment today: ``env_id`` while its spec still gives the run's
    keyword arguments (``recorded_kwargs``, with the run's own ``env_kwargs`` over the spec's), else the shipped spec
    of the same gymnasium id that gives them (a run of FrozenLake-v1 from before it became gymnasium's slippery lake:
    ``FrozenLake-v1.deterministic``), else ``env_id`` (an id without a shipped spec is never looked into)."""
    if shipped_spec_file(env_id) is None:
        return env_id
    extra = dict(env_kwargs or {})

    def gives(name: str) -> bool:
        path = shipped_spec_file(name)
        return path is not None and {**load_spec_file(path).kwargs, **extra} == dict(recorded_kwargs)

    base = gym_id(env_id)
    return env_id if gives(env_id) else next((n for n in [base, *spec_variants(base)] if gives(n)), env_id)


def gym_id(env_id: str) -> str:
    """The gymnasium id behind a spec id: ``ENV_ID`` of a shipped variant ``ENV_ID.VARIANT``, else ``env_id`` itself
    (the folder a run of it goes to under ``--logs-dir``)."""
    return env_id.rpartition(".")[0] if env_id in _spec_files()[1] else env_id


def variant_id(env_id: str, variant: str | None) -> str:
    """The id that selects spec ``variant`` of ``env_id`` (``env_id`` itself for None or ''); a :class:`UserError`
    naming the shipped variants when there is no such variant."""
    if not variant:
        return env_id
    name = f"{env_id}.{variant}"
    if name not in _spec_files()[1]:
        known = [v.removeprefix(env_id + ".") for v in spec_variants(env_id)]
        raise UserError(f"unknown spec variant {variant!r} of {env_id}; accepted: "
                        f"{', '.join(known) if known else 'none (this environment has only its default spec)'}")
    return name


def import_env_module(env_id: str) -> None:
    """For ``module:EnvId``, import ``module`` (as ``gymnasium.make`` would); a module that cannot be imported (not
    found, or failing while it runs) is a one-line :class:`UserError`. Other ids import nothing."""
    if ":" not in env_id:
        return
    module = env_id.partition(":")[0]
    try:
        importlib.import_module(module)
    except Exception as exc:  # a user's module may fail in any way: its failure is one line
        why = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        raise UserError(f"environment {env_id!r}: cannot import module {module!r} ({why.splitlines()[0][:200]}); "
                        "it must be importable (on PYTHONPATH) and register its environments with "
                        "gymnasium.register") from None


def check_env_named(env_id: str, named: str | None, what: str, spec_id: str | None = None) -> None:
    """Refuse to act on a file made for ``env_id`` (a run's ``--env``; ``spec_id``, its spec's gymnasium id when that
    differs) unless the command line's ``--env`` (``named``) agrees.

    A ``module:EnvId`` environment imports ``module``, which runs its code: a run directory or a policy file from
    elsewhere may only do that when the command line names the same ``--env``. Without ``:`` no ``--env`` is needed,
    but one that names another environment is refused too.
    """
    ids = {env_id, spec_id or env_id}
    module_id = next((i for i in sorted(ids) if ":" in i), None)
    if module_id is not None and named not in ids:
        module = module_id.partition(":")[0]
        raise UserError(f"{what} is for the environment {module_id!r}, which imports the Python module {module!r}: "
                        f"add --env {module_id} to the command line if you trust that module")
    if named is not None and named not in ids:
        raise UserError(f"{what} is for {env_id}, not --env {named}; give --env {env_id} or leave --env out")


def _gym_registered(env_id: str) -> bool:
    """True for a registered id; ``module:EnvId`` imports ``module`` first (as ``gymnasium.make`` does)."""
    import_env_module(env_id)
    return env_id.partition(":")[2] in gym.registry if ":" in env_id else env_id in gym.registry


def complete_spec(spec: EnvSpec) -> EnvSpec:
    """Fill what gymnasium knows (threshold, episode limit, action count, Box action bounds) into a spec."""
    from .generic import registered_id

    changes: dict[str, Any] = {}
    gspec = gym.spec(registered_id(spec.env_id))
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
    shipped, variants = _spec_files()
    if env_id in shipped:
        return complete_spec(load_spec_file(shipped[env_id])).validate()
    if env_id in variants:
        spec = load_spec_file(variants[env_id])
        base, _, name = env_id.rpartition(".")
        if spec.env_id != base:
            raise SpecError(f"spec file {variants[env_id].name} is for {spec.env_id}, not {base}")
        return complete_spec(spec.with_overrides(variant=name)).validate()
    base, dot, name = env_id.rpartition(".")
    if dot and base in shipped:
        variant_id(base, name)  # raises, naming the variants there are
    if not _gym_registered(env_id):
        names = list(dict.fromkeys([*shipped, *variants, *(k for k in gym.registry if "/" not in k)]))
        close = difflib.get_close_matches(env_id, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(
            f"unknown environment {env_id!r}{hint} (shipped specs: {', '.join(shipped)}; variants: "
            f"{', '.join(variants)}; any registered gymnasium id also works)"
        )
    from .generic import generic_spec

    try:
        spec = complete_spec(generic_spec(env_id))
        # A spec with a refusal (too many dimensions) is returned unvalidated: --dims/--bins may still fix it,
        # and validate() raises the refusal when they do not.
        return spec if spec.refusal else spec.validate()
    except gym.error.Error as exc:
        raise SpecError(f"{env_id}: gymnasium cannot make it: {exc}") from None
