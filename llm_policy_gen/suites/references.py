"""A suite's reference scores beside its records: ``references.json``, with a schema version.

Two per task and seed, on the run seed's held-out episodes: the **uniform random policy**'s mean (the normaliser:
a score is ``(return - R) / (threshold - R)``, :func:`llm_policy_gen.plotting.stats.normalized`; never the ``random``
backend, which is a random search) and the spec's **prior** scored with zero episodes (the table of its prior rule,
or the default action everywhere for a spec without one)::

    {"schema_version": 1, "heldout_episodes": 100, "source": "...",
     "random_policy": {"cartpole": {"env_id": "CartPole-v1", "what": "uniform random actions ...",
                                    "by_seed": {"0": 22.46, ...}}, ...},
     "prior": {"cartpole": {"env_id": "CartPole-v1", "what": "prior rule", "by_seed": {...}}, ...}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["REFERENCES", "REFERENCES_SCHEMA_VERSION", "References", "read_references", "write_references",
           "add_random_policy"]

REFERENCES = "references.json"
REFERENCES_SCHEMA_VERSION = 1

Scores = dict[str, dict[int, float]]
"""``{task: {seed: value}}``."""


@dataclass(frozen=True)
class References:
    random_policy: Scores = field(default_factory=dict)
    prior: Scores = field(default_factory=dict)
    prior_what: dict[str, str] = field(default_factory=dict)
    """Per task: what the prior's table is (``prior rule``, ``no prior: default action 1 everywhere``)."""
    heldout_episodes: int = 100


def _section(old: Mapping[str, Any], what_key: str) -> dict[str, Any]:
    return {task: {"env_id": v["env_id"], "what": v.get(what_key, ""),
                   "by_seed": {str(s): float(x) for s, x in sorted(v["by_seed"].items(), key=lambda kv: int(kv[0]))}}
            for task, v in sorted(old.get("tasks", {}).items())}


def write_references(path: Path, random_policy: Mapping[str, Any], priors: Mapping[str, Any], source: str) -> None:
    """Write ``references.json`` from the old bench files' layout (``{"tasks": {task: {"by_seed": ...}}}``)."""
    doc = {"schema_version": REFERENCES_SCHEMA_VERSION,
           "heldout_episodes": int(random_policy.get("heldout_episodes", 100)), "source": source,
           "random_policy": _section(random_policy, "policy"), "prior": _section(priors, "table")}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def read_references(path: Path) -> References:
    """The references of a store (a folder holding ``references.json``, or the file); empty when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / REFERENCES
    if not path.is_file():
        return References()
    doc = json.loads(path.read_text(encoding="utf-8"))
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > REFERENCES_SCHEMA_VERSION:
        raise UserError(f"{path}: references of schema_version {version!r}; this package reads "
                        f"{REFERENCES_SCHEMA_VERSION} (upgrade llm-policy-gen)")

    def scores(section: str) -> Scores:
        return {t: {int(s): float(x) for s, x in v["by_seed"].items()} for t, v in doc.get(section, {}).items()}

    return References(random_policy=scores("random_policy"), prior=scores("prior"),
                      prior_what={t: str(v.get("what", "")) for t, v in doc.get("prior", {}).items()},
                      heldout_episodes=int(doc.get("heldout_episodes", 100)))


def add_random_policy(path: Path, env_ids: Mapping[str, str], wanted: Iterable[tuple[str, int]]) -> int:
    """Measure the uniform random policy's held-out mean for every ``(task, seed)`` of ``wanted`` that
    ``references.json`` at ``path`` (a store folder or the file) lacks (``env_ids``: task key -> env id), on the run
    seed's held-out seeds as every run measures its own; write them in; return how many were added."""
    from ..envs import get_spec
    from ..storage.runlog import write_json_atomic
    from ..sweep.random_baseline import heldout_random_means

    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / REFERENCES
    doc: dict[str, Any] = (json.loads(path.read_text(encoding="utf-8")) if path.is_file() else
                           {"schema_version": REFERENCES_SCHEMA_VERSION, "heldout_episodes": 100, "source": "",
                            "random_policy": {}, "prior": {}})
    episodes = int(doc.get("heldout_episodes", 100))
    section = doc.setdefault("random_policy", {})
    added = 0
    for task, seed in sorted(set(wanted)):
        entry = section.setdefault(task, {"env_id": env_ids[task], "what": "uniform random actions", "by_seed": {}})
        if str(seed) in entry["by_seed"]:
            continue
        value = heldout_random_means(get_spec(env_ids[task]), [seed], episodes)[seed]
        entry["by_seed"][str(seed)] = round(float(value), 2)
        entry["by_seed"] = dict(sorted(entry["by_seed"].items(), key=lambda kv: int(kv[0])))
        added += 1
    if added:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, doc, indent=1)
    return added
