"""The files a sweep leaves when its runs are done (or it was stopped): the normalised score's zero, then the table,
the curves and the record, each written whole.

:func:`close_sweep` is the last step of :func:`llm_policy_gen.commands.compare.run_compare`: the uniform random
policy's held-out means (:mod:`.random_baseline`; measured unless the sweep was stopped, when only those measured
before are used), then ``compare.json`` with its end, ``results.csv``, ``curves.json``, ``results.md`` and
``curves.png`` from the runs' results, a run with none written as ``interrupted``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..config import TrainConfig
from ..storage.locks import HeldInterrupts
from ..storage.runlog import write_bytes_atomic
from .figures import plot_curves
from .markdown import results_markdown
from .random_baseline import folder_random_means
from .results import ResultRow, SweepRecord, write_curves, write_results
from .task import RunTask, TaskResult, failed_result

__all__ = ["close_sweep"]


def close_sweep(out: Path, record: SweepRecord, tasks: Sequence[RunTask],
                results: Mapping[tuple[str, int], TaskResult], cfg: TrainConfig, t0: float,
                stopped: KeyboardInterrupt | None) -> tuple[list[ResultRow], KeyboardInterrupt | None]:
    """Write the comparison's closing files in ``out`` (see the module doc); return the rows in ``tasks``' order and
    the interrupt that stopped the sweep (``stopped``, or one that came while the baseline was measured)."""
    try:
        random = folder_random_means(out, cfg, record.seeds, measure=stopped is None)
    except KeyboardInterrupt as exc:
        stopped, random = exc, folder_random_means(out, cfg, record.seeds, measure=False)
    with HeldInterrupts(raise_after=False):  # the closing files are written whole, whatever comes
        ordered = [results.get((t.backend, t.seed)) or failed_result(
            t, "interrupted before it finished; run the same command again to resume it", "interrupted")
            for t in tasks]
        rows = [r.row for r in ordered]
        record.finished = datetime.now(UTC).isoformat(timespec="seconds")
        record.sweep_wall_s = round(time.perf_counter() - t0, 3)
        record.interrupted = stopped is not None
        record.write(out)
        write_results(out / "results.csv", rows)
        curves = [r.curve for r in ordered if r.row.ok]
        write_curves(out, record.env_id, curves)
        write_bytes_atomic(out / "results.md", results_markdown(record, rows, random).encode("utf-8"))
        plot_curves(curves, out / "curves.png", f"{record.env_id}: kept table over seeds", record.backends,
                    record.reward_threshold, names={t.backend: t.label for t in tasks})
    return rows, stopped
