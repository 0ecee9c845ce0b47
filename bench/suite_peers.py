"""What the suite's records and ``bench/peers.py`` share: a peer's column of ``suite.md`` (:class:`PeerCell`), the
interaction ``offline`` used on a task and seed (the budget of an equal-interaction peer) and whether a recorded peer
cell still matches it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PeerCell:
    """One task's figures from a method outside the suite (``bench/peers.py``), shown as a column of ``suite.md``."""

    task: str
    column: str
    """The column's header, e.g. ``"sbx PPO"``."""
    values: tuple[float | None, ...]
    """Held-out mean per seed (None: the run failed)."""
    unreached: int = 0
    """Seeds whose run did not reach its budget (out of reach of the CPU budget per run, or not finished yet)."""
    error: str | None = None
    source: str = ""
    """Where the hyperparameters come from (``"rl-zoo3 2.9.2 dqn.yml CartPole-v1"``, ``"untuned: SB3 defaults"``)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PeerCell:
        """A cell kept in ``report.json``, also one written before ``unreached`` and ``source`` (then untuned
        sbx runs: ``capped`` counted as not reached)."""
        known = {k: v for k, v in d.items() if k in ("task", "column", "values", "unreached", "error", "source")}
        unreached = int(d.get("unreached", d.get("capped", 0)))
        return cls(**{**known, "values": tuple(d["values"]), "unreached": unreached})


def offline_budget(records: list[dict[str, Any]], task: str, seed: int) -> tuple[int, int] | None:
    """(environment steps, episodes) of ``offline``'s finished run of ``task`` and ``seed`` in the suite's records,
    the steps from ``env_steps_total`` (or, for a record written before it existed, the run's ``summary.json``)."""
    for r in records:
        if r.get("task") == task and r.get("seed") == seed and r.get("backend") == "offline" and "heldout" in r:
            steps = r.get("env_steps_total")
            if steps is None and r.get("run_dir"):
                summary = Path(r["run_dir"]) / "summary.json"
                if summary.is_file():
                    steps = json.loads(summary.read_text()).get("env_steps_total")
            if steps is not None:
                return int(steps), int(r["episodes"])
    return None


def stale(record: dict[str, Any], kind: str, offline: tuple[int, int] | None) -> bool:
    """Whether a recorded equal-interaction cell no longer matches ``offline``'s run of its task and seed (that run
    was re-judged under other settings, or had not finished when the cell was recorded): it is run again, to the
    new count, in a folder of its own; the zoo's budget never goes stale."""
    if kind == "zoo" or offline is None:
        return False
    return record.get("target") != (offline[0] if kind == "steps" else offline[1])
