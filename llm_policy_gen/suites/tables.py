"""A suite's tables from its records (Markdown, CSV and LaTeX); the renderer grows here."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from .definition import Suite
from .store import SuiteRecord

__all__ = ["write_tables"]


def write_tables(suite: Suite, records: Sequence[SuiteRecord], out: Path) -> list[Path]:
    """Write the suite's tables under ``out`` from ``records``; returns the files written. For now one CSV row
    per record (task, method, seed, held-out mean, episodes, steps, code)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{suite.name}.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "method", "seed", "heldout_mean", "episodes", "env_steps", "code"])
        for r in records:
            w.writerow([r.task, r.method, r.seed, r.result.get("heldout_mean"), r.result.get("episodes"),
                        r.result.get("env_steps"), r.code])
    return [path]
