"""The keeper's drift: adoptions that lowered the held-out mean, counted from a run's events alone.

Every adoption event carries the new best table's held-out returns (``heldout_returns``) and those of the table it
replaced on the same seeds (``heldout_returns_before``), so no policy file and no replay is needed. An adoption
**drifts down** when the paired mean difference new - old is below ``-z`` standard errors of that difference (z = 2
by default). An adoption whose event lacks the two lists (a run made before the events carried them, or a mode whose
held-out seeds changed) is counted, and not measurable.

:func:`drift_of` reads one run's typed events (``RunDir.read()``); :func:`find_runs` the run directories under
folders; :func:`totals` the figures over many runs: runs, adoptions, adoptions that drifted down, runs with any and
runs with more than one (issue 20's keeper goal: no run with more than one, at most one run in twenty with any). The
``noise`` suite's table shows them per task and method (:mod:`.extra_tables`); ``llm-policy-gen drift PATH...``
over any folder of run directories.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..run.files import EVENTS, RunDir, RunView

__all__ = ["Z", "Drop", "RunDrift", "paired", "drift_of", "run_drift", "find_runs", "totals"]

Z = 2.0
"""Standard errors of the paired difference an adoption must lose by to count as drifted down."""


@dataclass(frozen=True)
class Drop:
    """One adoption that drifted down."""

    iteration: int | None
    diff_mean: float
    """Mean of the paired differences new - old (rounded to 4 decimals)."""
    diff_se: float
    """Their standard error (rounded to 4 decimals)."""


@dataclass
class RunDrift:
    """One run's adoptions and those that drifted down."""

    run_dir: str
    adoptions: int = 0
    measurable: int = 0
    """Adoptions whose event carries both held-out lists on the same seeds."""
    drops: list[Drop] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def paired(new: Sequence[float], old: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the paired differences new - old."""
    diffs = [a - b for a, b in zip(new, old, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def drift_of(view: RunView, z: float = Z) -> RunDrift:
    """The drift of the run ``view`` reads (its events in the code's words)."""
    out = RunDrift(str(view.path))
    for event in view.events:
        if not event.get("accepted"):
            continue
        out.adoptions += 1
        new, old = event.get("heldout_returns"), event.get("heldout_returns_before")
        if not isinstance(new, list) or not isinstance(old, list) or len(new) != len(old) or len(new) < 2:
            continue
        out.measurable += 1
        mean, se = paired([float(x) for x in new], [float(x) for x in old])
        if mean < -z * se:
            iteration = event.get("iteration")
            out.drops.append(Drop(None if iteration is None else int(iteration), round(mean, 4), round(se, 4)))
    return out


def run_drift(path: Path, z: float = Z) -> RunDrift:
    """The drift of the run directory at ``path`` (read leniently: a torn last line of a killed run is left out)."""
    return drift_of(RunDir(Path(path)).read(check=False), z)


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """The run directories (folders with an events file) at or under ``paths``, each once, in order."""
    runs: list[Path] = []
    for p in (Path(x) for x in paths):
        if RunDir(p).events.is_file():
            runs.append(p)
        elif p.is_dir():
            runs.extend(sorted(e.parent for e in p.rglob(EVENTS)))
    return list(dict.fromkeys(runs))


def totals(results: Sequence[RunDrift], z: float = Z) -> dict[str, Any]:
    """The figures over ``results``: runs, adoptions (measurable), adoptions that drifted down, runs with any and
    with more than one, runs with adoptions none of which is measurable, and ``z``."""
    return {
        "runs": len(results),
        "adoptions": sum(r.adoptions for r in results),
        "measurable_adoptions": sum(r.measurable for r in results),
        "drifted_down": sum(len(r.drops) for r in results),
        "runs_with_any": sum(bool(r.drops) for r in results),
        "runs_with_more_than_one": sum(len(r.drops) > 1 for r in results),
        "runs_not_measurable": sum(r.adoptions > 0 and r.measurable == 0 for r in results),
        "z": z,
    }
