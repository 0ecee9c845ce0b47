"""The tabular policy: one action index per flat state index.

Rule for states the table does not set: a table is always complete. It starts as the spec's prior table (or every
state at ``default_action``); a proposal that leaves states out keeps their current action (see
:mod:`llm_policy_gen.schema`). A policy file stores the env id, the observation discretizer spec, the action spec and
the table; loading it against an environment whose specs differ is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .discretize import (
    ActionDiscretizer,
    ObservationDiscretizer,
    action_discretizer_from_spec,
    observation_discretizer_from_spec,
)
from .errors import PolicyFileError, SpecError, UserError
from .runlog import write_json_atomic

if TYPE_CHECKING:
    from .envs.spec import EnvSpec

__all__ = ["TablePolicy", "FORMAT_VERSION", "load_run_policy"]

FORMAT_VERSION = 1


@dataclass
class TablePolicy:
    """A table over flat state indices plus the specs that give the indices their meaning."""

    env_id: str
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    table: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

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

    def with_table(self, table: np.ndarray) -> TablePolicy:
        return TablePolicy(self.env_id, self.observation, self.actions, np.asarray(table), dict(self.meta))

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "env_id": self.env_id,
            "observation": self.observation.to_spec(),
            "action": self.actions.to_spec(),
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "table": self.table.tolist(),
            "meta": self.meta,
        }

    def save(self, path: str | Path) -> None:
        write_json_atomic(Path(path), self.to_dict())

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
        try:
            return cls(env_id, obs, acts, table, dict(data.get("meta", {})))
        except SpecError as exc:
            raise PolicyFileError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> TablePolicy:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PolicyFileError(f"policy file {p} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyFileError(f"cannot read policy file {p}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise PolicyFileError(f"policy file {p} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict):
            raise PolicyFileError(f"policy file {p} does not hold a JSON object")
        return cls.from_dict(data, source=str(p))

    def check_matches(self, env_id: str, observation: ObservationDiscretizer, actions: ActionDiscretizer) -> None:
        """Refuse (PolicyFileError) when this policy was made for another env or other specs."""
        if env_id != self.env_id:
            raise PolicyFileError(f"policy is for {self.env_id}, not {env_id}")
        if _norm(observation.to_spec()) != _norm(self.observation.to_spec()):
            raise PolicyFileError(
                f"policy's observation spec does not match {env_id}'s: {self.observation.to_spec()} vs "
                f"{observation.to_spec()}"
            )
        if _norm(actions.to_spec()) != _norm(self.actions.to_spec()):
            raise PolicyFileError(
                f"policy's action spec does not match {env_id}'s: {self.actions.to_spec()} vs {actions.to_spec()}"
            )


def _norm(spec: dict[str, Any]) -> str:
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("names", "unit", "name", "estimated")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, float):
            return round(x, 9)
        return x

    return json.dumps(strip(spec), sort_keys=True)


def load_run_policy(target: str | Path) -> tuple[TablePolicy, EnvSpec | None]:
    """The best table of a run directory (or a policy file) and, when known, the run's env spec."""
    path = Path(target)
    if path.is_dir():
        path = path / "best_policy.json"
        if not path.is_file():
            raise PolicyFileError(f"{target} holds no best_policy.json; give a run directory or a policy file")
    policy = TablePolicy.load(path)
    from .envs.spec import EnvSpec

    spec: EnvSpec | None = None
    cfg = path.parent / "config.json"
    if cfg.is_file():
        try:
            spec = EnvSpec.from_dict(json.loads(cfg.read_text(encoding="utf-8"))["env_spec"])
        except (KeyError, ValueError, TypeError):
            spec = None
    if spec is None:
        try:
            from .envs import get_spec  # imported here: envs is heavier than a policy file

            spec = get_spec(policy.env_id)
        except UserError:
            spec = None
    return policy, spec
