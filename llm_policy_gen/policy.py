"""Policies: anything that acts (:class:`Policy`), and the tabular policy with its file format.

Rule for states the table does not set: a table is always complete. A run's kept table starts with every state at
the spec's ``default_action`` (a spec's prior rule is a candidate like any other: ``offline`` proposes it first, and
the keeper adopts it only if it passes its test), or at the prior rule's table under ``prior = "start"``; an answer
that leaves states out keeps their current action (see :mod:`llm_policy_gen.formats`). A policy file stores the env
id, the environment's keyword arguments, the observation discretizer spec, the action spec, a fingerprint of them,
the table and, for a table compiled from rules, the rules (``source``). Loading it against an environment whose
settings differ is refused with one line naming what differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .discretize import (
    ActionDiscretizer,
    ObservationDiscretizer,
    action_discretizer_from_spec,
    observation_discretizer_from_spec,
)
from .errors import PolicyFileError, SpecError, UserError
from .storage.runlog import read_json, to_jsonable, write_bytes_atomic

if TYPE_CHECKING:
    from .envs.spec import EnvSpec

__all__ = ["Policy", "ActsNatively", "acts_natively", "LearnsOnline", "TablePolicy", "FORMAT_VERSION",
           "spec_fingerprint"]

FORMAT_VERSION = 2


@runtime_checkable
class Policy(Protocol):
    """Anything that acts: a batch of raw observations in, a batch of flat action indices out."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        ...


@runtime_checkable
class ActsNatively(Protocol):
    """A policy that may act in the environment's own action space (a peer's network on a continuous task): when
    ``native_actions`` is true, ``act`` gives one environment action per observation (a ``Box``'s vectors), passed to
    ``env.step`` as they are, not action indices."""

    native_actions: bool

    def act(self, obs: np.ndarray) -> np.ndarray:
        ...


def acts_natively(policy: object) -> bool:
    """``policy`` gives the environment's own actions (:class:`ActsNatively` with ``native_actions`` true)."""
    return isinstance(policy, ActsNatively) and bool(policy.native_actions)


@runtime_checkable
class LearnsOnline(Protocol):
    """A policy that learns as it acts (the ``q-learning`` mode's learner): after every environment step the
    collector hands it the transitions of its share of the batch."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        ...

    def observe(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
                terminated: np.ndarray) -> None:
        """One step of each of its episodes: state, action taken (exploration included), the environment's own
        reward, the next state and whether the episode terminated there (a time-limit cut is not a termination)."""
        ...


def spec_fingerprint(env_id: str, env_kwargs: dict[str, Any], observation: dict[str, Any],
                     action: dict[str, Any]) -> str:
    """A short hash of what gives a table its meaning (names and units excluded)."""
    payload = json.dumps({"env_id": env_id, "kwargs": env_kwargs, "observation": _norm(observation),
                          "action": _norm(action)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class TablePolicy:
    """A table over flat state indices plus the specs that give the indices their meaning."""

    env_id: str
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    table: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] | None = field(default_factory=dict)
    """The ``gymnasium.make`` keyword arguments the table was made for (None: unknown, a file from before they were
    recorded)."""
    source: dict[str, Any] | None = None
    """What the table was compiled from (rules), when it was."""
    stored_fingerprint: str | None = field(default=None, repr=False, compare=False)
    """The ``spec_fingerprint`` a loaded file holds (checked by :meth:`check_matches`)."""

    def __post_init__(self) -> None:
        t = np.asarray(self.table)
        if t.shape != (self.observation.n_states,):
            raise SpecError(f"table has shape {t.shape}, expected ({self.observation.n_states},)")
        if not np.issubdtype(t.dtype, np.integer):
            raise SpecError(f"table must hold integers, got {t.dtype}")
        if t.size and (t.min() < 0 or t.max() >= self.actions.n_actions):
            raise SpecError(f"table actions must be in 0..{self.actions.n_actions - 1}")
        self.table = t.astype(np.int64, copy=True)

    @property
    def n_states(self) -> int:
        return self.observation.n_states

    @property
    def n_actions(self) -> int:
        return self.actions.n_actions

    def states(self, obs: np.ndarray) -> np.ndarray:
        return self.observation.encode(obs)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Batch of raw observations -> batch of flat action indices."""
        return self.table[self.observation.encode(obs)]

    def act_states(self, states: np.ndarray) -> np.ndarray:
        """Batch of flat state indices -> batch of flat action indices."""
        return self.table[np.asarray(states, dtype=np.int64)]

    def with_table(self, table: np.ndarray, source: dict[str, Any] | None = None) -> TablePolicy:
        kwargs = None if self.env_kwargs is None else dict(self.env_kwargs)
        return TablePolicy(self.env_id, self.observation, self.actions, np.asarray(table), dict(self.meta), kwargs,
                           source)

    @property
    def fingerprint(self) -> str:
        return spec_fingerprint(self.env_id, self.env_kwargs or {}, self.observation.to_spec(),
                                self.actions.to_spec())

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        out = {
            "format_version": FORMAT_VERSION,
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "spec_fingerprint": self.fingerprint,
            "observation": self.observation.to_spec(),
            "action": self.actions.to_spec(),
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "table": self.table.tolist(),
            "meta": self.meta,
        }
        if self.source is not None:
            out["source"] = self.source
        return out

    def save(self, path: str | Path) -> None:
        """Write the policy file: indented, with the table last on one line (one entry per line made a
        560,000-state table a 4 MB file that took 2 s to write, once per iteration)."""
        data = self.to_dict()
        table = data.pop("table")
        head = json.dumps(to_jsonable(data), indent=2, allow_nan=False)
        body = json.dumps(table, allow_nan=False, separators=(",", ":"))
        write_bytes_atomic(Path(path), f'{head[:-2]},\n  "table": {body}\n}}\n'.encode())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "policy") -> TablePolicy:
        try:
            env_id = str(data["env_id"])
            obs = observation_discretizer_from_spec(data["observation"])
            acts = action_discretizer_from_spec(data["action"])
            table = np.asarray(data["table"])
        except (KeyError, TypeError) as exc:
            raise PolicyFileError(f"{source}: not a policy file (missing {exc})") from None
        except SpecError as exc:
            raise PolicyFileError(f"{source}: {exc}") from None
        kwargs = data.get("env_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise PolicyFileError(f"{source}: env_kwargs must be a JSON object, got {kwargs!r}")
        stored = data.get("spec_fingerprint")
        try:
            return cls(env_id, obs, acts, table, dict(data.get("meta", {})), kwargs, data.get("source"),
                       None if stored is None else str(stored)[:64])
        except SpecError as exc:
            raise PolicyFileError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> TablePolicy:
        p = Path(path)
        if not p.exists():
            raise PolicyFileError(f"policy file {p} does not exist")
        try:
            data = read_json(p)
        except UserError as exc:
            raise PolicyFileError(f"policy file {exc}") from None
        if not isinstance(data, dict):
            raise PolicyFileError(f"policy file {p} does not hold a JSON object")
        return cls.from_dict(data, source=str(p))

    def check_matches(self, env_id: str, observation: ObservationDiscretizer, actions: ActionDiscretizer,
                      env_kwargs: dict[str, Any] | None = None) -> None:
        """Refuse (:class:`PolicyFileError`, one line naming what differs) a policy made for other settings."""
        if env_id != self.env_id:
            raise PolicyFileError(f"the policy is for {self.env_id}, not {env_id}")
        mine_kw = self.env_kwargs
        if env_kwargs is not None and mine_kw is not None and _canon(env_kwargs) != _canon(mine_kw):
            keys = sorted(set(env_kwargs) | set(mine_kw))
            diff = [f"{k}={mine_kw.get(k, '(unset)')!r} in the policy, {env_kwargs.get(k, '(unset)')!r} here"
                    for k in keys if _canon(env_kwargs.get(k)) != _canon(mine_kw.get(k))]
            raise PolicyFileError(f"the policy was made with other environment kwargs: {'; '.join(diff)}")
        mine, theirs = self.observation.to_spec(), observation.to_spec()
        if _norm(mine) != _norm(theirs):
            raise PolicyFileError(
                f"the policy's observation bins differ from {env_id}'s: {_describe_diff(mine, theirs)}")
        mine, theirs = self.actions.to_spec(), actions.to_spec()
        if _norm(mine) != _norm(theirs):
            raise PolicyFileError(f"the policy's actions differ from {env_id}'s: {_describe_diff(mine, theirs)}")
        if self.stored_fingerprint is not None and self.stored_fingerprint != self.fingerprint:
            raise PolicyFileError(f"the policy's spec_fingerprint {self.stored_fingerprint!r} is not the one of its "
                                  f"env_id, env_kwargs, observation and action ({self.fingerprint}): the file was "
                                  "edited after it was written; use the policy file its run wrote")


    def check_against(self, spec: EnvSpec) -> None:
        """:meth:`check_matches` with an env spec's environment, discretizers and keyword arguments."""
        self.check_matches(spec.env_id, spec.observation_discretizer(), spec.action_discretizer(), dict(spec.kwargs))


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=str)


def _describe_diff(mine: dict[str, Any], theirs: dict[str, Any]) -> str:
    """The first field that differs between two discretizer specs, in words."""
    if mine.get("kind") != theirs.get("kind"):
        return f"kind {mine.get('kind')} in the policy, {theirs.get('kind')} here"
    if mine.get("kind") == "box" and "dims" in mine:
        a, b = mine.get("dims", []), theirs.get("dims", [])
        if len(a) != len(b):
            return f"{len(a)} dimensions in the policy, {len(b)} here"
        for da, db in zip(a, b, strict=True):
            for key in ("index", "bins", "low", "high"):
                if _canon(_norm(da.get(key))) != _canon(_norm(db.get(key))):
                    return f"{da.get('name', 'dim')} {key} {da.get(key)} in the policy, {db.get(key)} here"
        if mine.get("binning") != theirs.get("binning"):
            return f"binning {mine.get('binning')} in the policy, {theirs.get('binning')} here"
    for key in sorted(set(mine) | set(theirs)):
        if key in ("names", "name", "unit", "estimated"):
            continue
        if _norm(mine.get(key)) != _norm(theirs.get(key)):
            return f"{key} {mine.get(key)} in the policy, {theirs.get(key)} here"
    return "the specs differ"


def _norm(spec: Any) -> str:
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("names", "unit", "name", "estimated")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, float):
            return round(x, 9)
        return x

    return json.dumps(strip(spec), sort_keys=True)
