"""An environment spec: everything the tool knows about a task, as data.

A spec names the gymnasium id and keyword arguments, the observation dimensions the table uses (name, bounds, bins),
the action discretization, reward wrappers, the physics-hint file under ``prompting/prompts/hints/`` and an optional
*prior*: simple physics rules (a linear score over named dimensions) that give a starting table and that the offline
optimiser searches around. Shipped specs live as TOML files in ``llm_policy_gen/envs/specs/``: ``ENV_ID.toml`` is an
environment's default spec and ``ENV_ID.VARIANT.toml`` a variant of it (another table over the same environment,
chosen with ``--env ENV_ID.VARIANT`` or ``--spec VARIANT``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..discretize import (
    ActionDiscretizer,
    BoxActions,
    BoxDiscretizer,
    DimSpec,
    DiscreteActions,
    DiscreteDiscretizer,
    MultiDiscreteActions,
    ObservationDiscretizer,
)
from ..errors import SpecError

__all__ = ["LinearPrior", "EnvSpec", "SEARCH_SETTINGS"]

_HINTS_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A hints file name: no path separators, no leading dot (so neither ``..`` nor a hidden file)."""

SEARCH_SETTINGS = frozenset({"noise", "step", "top", "restart_after", "products"})
"""The settings a spec's ``[search]`` table may give the offline population search (``products``: pairs of dimension
names whose product features the search adds to its linear rules; ``restart_after``: iterations without an adopted
table after which the search starts again from its first rule; the others positive numbers)."""


@dataclass(frozen=True)
class LinearPrior:
    """A prior rule: ``score = bias + sum(weights[dim] * bin_centre[dim])``; ``positive_action`` if score > 0.

    For a ``Box`` action space with one action dimension per rule, ``action_dim`` names the dimension and the score
    is mapped to its levels (negative score -> lowest level, positive -> highest, ~0 -> middle).
    """

    weights: dict[str, float]
    bias: float = 0.0
    negative_action: int = 0
    positive_action: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "linear",
            "weights": dict(self.weights),
            "bias": self.bias,
            "negative_action": self.negative_action,
            "positive_action": self.positive_action,
        }


@dataclass(frozen=True)
class EnvSpec:
    """Everything the tool knows about one environment."""

    env_id: str
    """The gymnasium id, e.g. ``"CartPole-v1"``."""
    title: str = ""
    description: str = ""
    """What the task is, for the prompt."""
    reward: str = ""
    """How reward is given and when an episode ends, for the prompt."""
    hints: str = ""
    """File name of the physics hints under ``prompting/prompts/hints/`` ('' for none). Only a plain file name is
    accepted: a spec read from a run's config.json names no file outside the prompts."""
    hints_text: str = ""
    """Hints rendered from the environment for the keyword arguments used (see :mod:`llm_policy_gen.envs.text`);
    when set, the prompt shows them instead of the hints file."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make``."""
    dims: tuple[DimSpec, ...] = ()
    """Observation dimensions used by the table (empty for a ``Discrete`` observation)."""
    n_discrete_states: int = 0
    """For a ``Discrete`` observation: its size."""
    grid: tuple[int, int] | None = None
    """For a grid world: (rows, cols), so states read as cells."""
    binning: str = "uniform"
    action_kind: str = "discrete"
    """``discrete``, ``box`` or ``multidiscrete``."""
    action_names: tuple[str, ...] = ()
    """Names of discrete actions, or of Box action dimensions."""
    n_actions_discrete: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    action_levels: int = 3
    action_nvec: tuple[int, ...] = ()
    default_action: int = 0
    """The action of every state before anything is learned (and of a do-nothing table)."""
    prior: LinearPrior | None = None
    reward_wrappers: tuple[str, ...] = ()
    """Names of reward wrappers (see :mod:`llm_policy_gen.envs.wrappers`)."""
    reward_threshold: float | None = None
    """Mean return over 100 episodes that counts as solved (gymnasium's own when None and it has one)."""
    max_episode_steps: int | None = None
    bounds_estimated: bool = False
    """True when some bounds were estimated from sampled episodes."""
    notes: tuple[str, ...] = ()
    train_defaults: dict[str, Any] = field(default_factory=dict)
    """Training settings suited to this task (e.g. more exploration episodes); the user's settings win."""
    refusal: str = ""
    """Why the spec cannot be tabulated as it stands and which options help ('' when it can). :meth:`validate`
    raises it; choosing dimensions or bins (``--dims``, ``--bins``) builds new dims and clears it."""
    variant: str = ""
    """The name of this spec variant ('' for an environment's default spec)."""
    rules_form: str = ""
    """How linear rules of the ``rules`` answer format choose a ``Discrete`` action, for the offline search:
    ``levels`` (the actions are ordered, e.g. push left / none / right), ``scores`` (one score per action) or ''
    (``levels`` up to 2 actions, else ``scores``). Box and MultiDiscrete actions always use levels."""

    search: dict[str, Any] = field(default_factory=dict)
    """Settings of the offline population search over rules for this task (``noise``, ``step``, ``top``,
    ``restart_after``, and ``products``: pairs of dimension names, ``[["y position", "y speed"], ...]``, whose
    products its linear rules carry; see :mod:`llm_policy_gen.proposers.population`); the search's own defaults (no
    products, no restart) where absent."""
    meaning: dict[str, Any] = field(default_factory=dict)
    """What a state means in the task's words, for the lm-policy mode's meaning text (``--lm-state-text meaning``):
    a grid's map and its cells' names, a discrete state's coordinates, each Box dimension's sides; read and checked
    by :mod:`llm_policy_gen.lm.meaning` (empty: the spec has none)."""

    def __post_init__(self) -> None:
        if self.hints and not _HINTS_NAME.fullmatch(self.hints):
            raise SpecError(f"{self.env_id}: hints {self.hints!r} is not accepted: give the name of a file in "
                            "prompting/prompts/hints/ (letters, digits, '_.-', no folders, not starting with a dot)")

    @property
    def name(self) -> str:
        """The id that selects this spec: ``ENV_ID`` or ``ENV_ID.VARIANT``."""
        return f"{self.env_id}.{self.variant}" if self.variant else self.env_id

    # ------------------------------------------------------------------ builders
    def observation_discretizer(self) -> ObservationDiscretizer:
        if self.dims:
            return BoxDiscretizer(self.dims, binning=self.binning)  # type: ignore[arg-type]
        if self.n_discrete_states > 0:
            return DiscreteDiscretizer(self.n_discrete_states, self.grid)
        raise SpecError(f"{self.env_id}: the spec has neither observation dims nor a discrete state count")

    def action_discretizer(self) -> ActionDiscretizer:
        if self.action_kind == "discrete":
            n = self.n_actions_discrete or len(self.action_names)
            names = self.action_names if len(self.action_names) == n else None
            return DiscreteActions(n, names)
        if self.action_kind == "box":
            names = self.action_names if len(self.action_names) == len(self.action_low) else None
            return BoxActions(self.action_low, self.action_high, self.action_levels, names)
        if self.action_kind == "multidiscrete":
            return MultiDiscreteActions(self.action_nvec, self.action_names or None)
        raise SpecError(f"unknown action kind {self.action_kind!r}; accepted: discrete, box, multidiscrete")

    @property
    def n_states(self) -> int:
        return self.observation_discretizer().n_states

    @property
    def n_actions(self) -> int:
        return self.action_discretizer().n_actions

    def prior_table(self) -> np.ndarray | None:
        """The table the prior rules give, or None without a prior."""
        if self.prior is None or not self.dims:
            return None
        disc = self.observation_discretizer()
        assert isinstance(disc, BoxDiscretizer)
        centres = disc.centers()
        names = [d.name for d in self.dims]
        score = np.full(disc.n_states, self.prior.bias)
        for name, w in self.prior.weights.items():
            score = score + w * centres[:, names.index(name)]
        return np.where(score > 0, self.prior.positive_action, self.prior.negative_action).astype(np.int64)

    def default_table(self) -> np.ndarray:
        return np.full(self.n_states, self.default_action, dtype=np.int64)

    def with_overrides(self, **changes: Any) -> EnvSpec:
        return replace(self, **changes)

    def validate(self) -> EnvSpec:
        """Check the spec is consistent; returns self."""
        if self.refusal:
            raise SpecError(self.refusal)
        disc = self.observation_discretizer()
        acts = self.action_discretizer()
        if not 0 <= self.default_action < acts.n_actions:
            raise SpecError(f"{self.env_id}: default_action {self.default_action} not in 0..{acts.n_actions - 1}")
        if self.prior is not None:
            names = {d.name for d in self.dims}
            unknown = set(self.prior.weights) - names
            if unknown:
                raise SpecError(f"{self.env_id}: prior names unknown dims {sorted(unknown)}; dims are {sorted(names)}")
            for a in (self.prior.negative_action, self.prior.positive_action):
                if not 0 <= a < acts.n_actions:
                    raise SpecError(f"{self.env_id}: prior action {a} not in 0..{acts.n_actions - 1}")
        if disc.n_states > 1_000_000:
            raise SpecError(
                f"{self.env_id}: {disc.n_states} states is too many for a table; use fewer --bins or --dims"
            )
        if self.reward_threshold is not None and not math.isfinite(self.reward_threshold):
            raise SpecError(f"{self.env_id}: reward_threshold must be finite")
        if self.rules_form not in ("", "levels", "scores"):
            raise SpecError(f"{self.env_id}: rules_form {self.rules_form!r} unknown; accepted: levels, scores")
        numbers = {k: v for k, v in self.search.items() if k != "products"}
        bad = sorted(set(numbers) - SEARCH_SETTINGS)
        if bad or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in numbers.values()):
            raise SpecError(f"{self.env_id}: search settings {numbers} invalid; accepted: positive numbers for "
                            f"{', '.join(sorted(SEARCH_SETTINGS - {'products'}))}, and products")
        self.search_products()  # raises for a bad list
        return self

    def search_products(self) -> tuple[tuple[int, int], ...]:
        """The dimension pairs (table dimension indices) of the ``[search]`` table's ``products`` (none without)."""
        pairs = self.search.get("products", [])
        names = [d.name for d in self.dims]
        if not isinstance(pairs, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(n in names for n in p) for p in pairs):
            raise SpecError(f"{self.env_id}: search products {pairs!r} invalid; accepted: a list of pairs of "
                            f"dimension names, [[a, b], ...], from {names}")
        return tuple((names.index(a), names.index(b)) for a, b in pairs)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "title": self.title,
            "description": self.description,
            "reward": self.reward,
            "kwargs": dict(self.kwargs),
            "dims": [d.to_dict() for d in self.dims],
            "n_discrete_states": self.n_discrete_states,
            "grid": list(self.grid) if self.grid else None,
            "binning": self.binning,
            "action_kind": self.action_kind,
            "action_names": list(self.action_names),
            "n_actions_discrete": self.n_actions_discrete,
            "action_low": list(self.action_low),
            "action_high": list(self.action_high),
            "action_levels": self.action_levels,
            "action_nvec": list(self.action_nvec),
            "default_action": self.default_action,
            "prior": self.prior.to_dict() if self.prior else None,
            "reward_wrappers": list(self.reward_wrappers),
            "reward_threshold": self.reward_threshold,
            "max_episode_steps": self.max_episode_steps,
            "bounds_estimated": self.bounds_estimated,
            "hints": self.hints,
            "hints_text": self.hints_text,
            "notes": list(self.notes),
            "train_defaults": dict(self.train_defaults),
            "refusal": self.refusal,
            "variant": self.variant,
            "rules_form": self.rules_form,
            "search": dict(self.search),
            **({"meaning": dict(self.meaning)} if self.meaning else {}),  # only where a spec has one
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvSpec:
        """Build a spec from a TOML/JSON mapping (the shipped spec files use this)."""
        try:
            env_id = str(data["env_id"])
        except KeyError:
            raise SpecError("a spec needs env_id") from None
        known = set(cls.__dataclass_fields__) | {"actions"}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"{env_id}: unknown spec fields {sorted(unknown)}; accepted: {sorted(known)}")
        d = dict(data)
        actions = d.pop("actions", {}) or {}
        dims = tuple(DimSpec.from_dict({**x, "index": x.get("index", i)}) for i, x in enumerate(d.pop("dims", [])))
        prior_d = d.pop("prior", None)
        grid = d.pop("grid", None)
        for key in ("action_names", "action_low", "action_high", "action_nvec", "reward_wrappers", "notes"):
            if key in d and d[key] is not None:
                d[key] = tuple(d[key])
        if "names" in actions:
            d.setdefault("action_names", tuple(actions["names"]))
            d.setdefault("n_actions_discrete", len(actions["names"]))
        for src, dst in (("kind", "action_kind"), ("levels", "action_levels"), ("low", "action_low"),
                         ("high", "action_high"), ("nvec", "action_nvec"), ("n", "n_actions_discrete")):
            if src in actions:
                v = actions[src]
                d.setdefault(dst, tuple(v) if isinstance(v, list) else v)
        prior = None
        if prior_d:
            if prior_d.get("kind", "linear") != "linear":
                raise SpecError(f"{env_id}: prior kind {prior_d.get('kind')!r} unknown; accepted: linear")
            prior = LinearPrior(
                weights={str(k): float(v) for k, v in prior_d.get("weights", {}).items()},
                bias=float(prior_d.get("bias", 0.0)),
                negative_action=_action_index(prior_d.get("negative_action", 0), d, "prior negative_action"),
                positive_action=_action_index(prior_d.get("positive_action", 1), d, "prior positive_action"),
            )
        if "default_action" in d:
            d["default_action"] = _action_index(d["default_action"], d, "default_action")
        try:
            spec = cls(dims=dims, prior=prior, grid=tuple(grid) if grid else None, **d)
        except TypeError as exc:
            raise SpecError(f"{env_id}: invalid spec: {exc}") from None
        return spec


def _action_index(value: Any, d: dict[str, Any], what: str) -> int:
    """An action given as a flat index or, for ``box``/``multidiscrete`` actions, as one level index per action
    dimension: ``[1, 1, 1]`` is the middle of three levels on each dimension (zero torque for a symmetric box)."""
    env_id = d.get("env_id", "?")
    if not isinstance(value, (list, tuple)):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SpecError(f"{env_id}: {what} must be an action index or a list of levels, got {value!r}") from None
    kind = d.get("action_kind", "discrete")
    if kind == "box":
        shape = tuple([int(d.get("action_levels", 3))] * len(value))
    elif kind == "multidiscrete":
        shape = tuple(int(n) for n in d.get("action_nvec", ()))
    else:
        raise SpecError(f"{env_id}: {what} as a list of levels needs box or multidiscrete actions")
    levels = [int(v) for v in value]
    if len(levels) != len(shape) or any(not 0 <= v < n for v, n in zip(levels, shape, strict=False)):
        raise SpecError(f"{env_id}: {what} {levels} does not fit action levels {list(shape)}")
    return int(np.ravel_multi_index(tuple(levels), shape))
