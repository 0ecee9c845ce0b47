"""``llm-policy-gen compare``: every (backend, seed) pair through the same loop, then the table and the curves.

::

    llm-policy-gen compare --env CartPole-v1 --backends offline,q-learning,random --seeds 0-4 \\
        [--iterations N] [--workers N] [--executor local|ray] [--config FILE.toml] [--out DIR]

Each pair is one :func:`llm_policy_gen.loop.train` run in its own run directory ``OUT/runs/<env>/<backend>_s<seed>``
(the usual files of a run). The comparison directory gets:

* ``results.csv`` -- one row per run: its summary numbers, or ``status=failed`` and the error (a failed run never
  stops the sweep);
* ``results.md`` -- per backend: final eval mean (the best table's mean on the held-out episodes) with a 95 %
  percentile-bootstrap interval over seeds (:func:`llm_policy_gen.stats.bootstrap_ci`: 10,000 resamples, seed 0),
  median episodes to solve (unsolved runs count as never solving), solve rate, calls, tokens, cost and wall time;
* ``curves.png`` -- the best table's held-out mean against environment episodes, median and interquartile band per
  backend over seeds; ``curves.json`` holds the points it was drawn from;
* ``compare.json`` -- the sweep's parameters.

Re-running the command skips runs whose ``summary.json`` exists (and that did not fail); an unfinished or failed
run directory is removed and run again. ``--executor local`` uses a process pool of ``--workers`` processes
(default 1: runs one after the other in this process); ``--executor ray`` submits each run as a Ray task, joining the
cluster named by ``RAY_ADDRESS`` or starting a local instance with ``--workers`` CPUs (default: all). On a
multi-node cluster every node needs llm-policy-gen installed and ``--out`` must be a path every node shares.
Runs are seeded, so both executors give the same numbers (wall times excepted).

Exit codes: 0 when every run finished, 1 when some failed (the files are written all the same), 2 for bad input.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .errors import UserError
from .runlog import read_jsonl, slug, write_bytes_atomic, write_json_atomic
from .stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_ci, median_censored, quartile_band, step_curves

__all__ = [
    "RunTask",
    "CSV_COLUMNS",
    "split_entry",
    "parse_seeds",
    "parse_backends",
    "plan",
    "run_one",
    "run_compare",
    "backend_stats",
    "results_markdown",
    "plot_curves",
    "read_results",
    "add_parser",
]

#: Columns of ``results.csv``, in order.
CSV_COLUMNS = (
    "backend", "mode", "seed", "status", "error", "is_llm", "model", "best_eval_mean", "best_eval_std", "solved",
    "episodes_to_solve", "iterations", "episodes_total", "env_steps_total", "llm_calls", "cached_calls",
    "input_tokens", "output_tokens", "cost_usd", "stop_reason", "wall_s", "run_dir",
)
#: Columns that measure time, not results (they differ between two runs of the same sweep).
TIME_COLUMNS = ("wall_s",)
ERROR_MARKER = "compare_error.json"


@dataclass(frozen=True)
class RunTask:
    """One (backend, seed) run of a sweep; picklable, so it can go to a process pool or a Ray task."""

    env_id: str
    backend: str
    seed: int
    out: str
    """The comparison directory (absolute)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Other TrainConfig settings (from --config and --iterations)."""

    @property
    def run_id(self) -> str:
        return f"{slug(self.backend)}_s{self.seed}"

    @property
    def backend_spec(self) -> str:
        """The backend spec without its ``@MODE``."""
        return split_entry(self.backend)[0]

    @property
    def mode(self) -> str:
        """The entry's mode (``BACKEND@MODE``), else the sweep's (table by default)."""
        return split_entry(self.backend)[1] or str(self.settings.get("mode", "table"))

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / "runs" / slug(self.env_id) / self.run_id


# ---------------------------------------------------------------------------------------------------- parsing
def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,7"`` and mixes (``"0-2,9"``) too. Bad input is a UserError."""
    accepted = "A-B with 0 <= A <= B, or comma-separated integers >= 0 (e.g. 0-4 or 0,2,7)"
    seeds: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UserError(f"bad --seeds {text!r}: accepted {accepted}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise UserError(f"bad --seeds {text!r}: range {lo}-{hi} is empty; accepted {accepted}")
        seeds.extend(s for s in range(lo, hi + 1) if s not in seeds)
    return seeds


def split_entry(entry: str) -> tuple[str, str | None]:
    """``"offline@reward"`` -> ``("offline", "reward")``; ``"gemini"`` -> ``("gemini", None)``."""
    spec, sep, mode = entry.rpartition("@")
    return (spec, mode) if sep and spec else (entry, None)


def parse_backends(text: str) -> list[str]:
    """Comma-separated ``BACKEND`` or ``BACKEND@MODE`` entries, each checked by the backend and mode registries."""
    from .backends import parse_backend_spec
    from .modes import MODES

    out: list[str] = []
    for part in str(text).split(","):
        entry = part.strip()
        if not entry:
            continue
        spec, mode = split_entry(entry)
        parse_backend_spec(spec)
        if mode is not None and mode not in MODES:
            raise MODES.unknown(mode)
        if entry not in out:
            out.append(entry)
    if not out:
        raise UserError(f"bad --backends {text!r}: give comma-separated backend specs, e.g. offline,q-learning,random")
    return out


# ---------------------------------------------------------------------------------------------------- runs
def _row_from_summary(task: RunTask, summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {c: summary.get(c) for c in CSV_COLUMNS}
    row.update(backend=task.backend, mode=task.mode, seed=task.seed, status="ok", error="",
               run_dir=str(task.run_dir.relative_to(task.out)))
    return row


def _curve_from_events(events: Iterable[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(episodes_total, best table's held-out mean -- or best_eval_mean where no held-out mean was logged)."""
    xs, ys = [], []
    for e in events:
        y = e.get("heldout_mean", e.get("best_eval_mean"))
        if y is None or e.get("episodes_total") is None:
            continue
        xs.append(float(e["episodes_total"]))
        ys.append(float(y))
    return xs, ys


def _error_text(exc: BaseException) -> str:
    from .clients.keys import redact

    lines = redact(str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def failed_result(task: RunTask, error: str) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in CSV_COLUMNS}
    row.update(backend=task.backend, mode=task.mode, seed=task.seed, status="failed", error=error,
               run_dir=str(task.run_dir.relative_to(task.out)) if task.run_dir.exists() else "")
    return {"row": row, "curve": ([], []), "log": []}


def run_one(task: RunTask) -> dict[str, Any]:
    """Run one task; never raises for a failed run. Returns ``{"row", "curve", "log"}``."""
    from .config import TrainConfig
    from .engine import train

    logs: list[str] = []
    try:
        cfg = TrainConfig.build((task.settings, "compare settings"), (
            {"env_id": task.env_id, "backend": task.backend_spec, "mode": task.mode, "seed": task.seed,
             "logs_dir": str(Path(task.out) / "runs"), "run_id": task.run_id, "progress": False},
            "compare",
        ))
        result = train(cfg, log=logs.append)
        if Path(result.run_dir) != task.run_dir:  # pragma: no cover - plan() removes stale directories first
            raise RuntimeError(f"run went to {result.run_dir}, expected {task.run_dir}")
        out: dict[str, Any] = {"row": _row_from_summary(task, result.summary),
               "curve": _curve_from_events(read_jsonl(task.run_dir / "events.jsonl")), "log": logs}
    except Exception as exc:  # a failed run is a row of the table, never the end of the sweep
        out = failed_result(task, _error_text(exc))
        out["log"] = logs
        if task.run_dir.is_dir():
            write_json_atomic(task.run_dir / ERROR_MARKER, {"error": out["row"]["error"]})
    if task.run_dir.is_dir() and logs:
        write_bytes_atomic(task.run_dir / "compare.log", ("\n".join(logs) + "\n").encode("utf-8"))
    return out


def finished_result(task: RunTask) -> dict[str, Any] | None:
    """The result of a run finished by an earlier invocation, or None (then any stale directory is removed)."""
    d = task.run_dir
    summary = d / "summary.json"
    if summary.is_file() and not (d / ERROR_MARKER).exists():
        try:
            data = json.loads(summary.read_text(encoding="utf-8"))
            events = read_jsonl(d / "events.jsonl") if (d / "events.jsonl").is_file() else []
            return {"row": _row_from_summary(task, data), "curve": _curve_from_events(events), "log": []}
        except (OSError, ValueError):
            pass
    if d.exists():
        shutil.rmtree(d)
    return None


def plan(env_id: str, backends: Sequence[str], seeds: Sequence[int], out: Path,
         settings: dict[str, Any]) -> list[RunTask]:
    """Every (backend, seed) task of the sweep, backend-major."""
    out = Path(out).resolve()
    return [RunTask(env_id, b, s, str(out), dict(settings)) for b in backends for s in seeds]


# ---------------------------------------------------------------------------------------------------- executors
Done = Callable[[RunTask, dict[str, Any]], None]


def execute_local(tasks: Sequence[RunTask], workers: int, on_done: Done) -> None:
    """Run tasks in this process (``workers`` 1) or in a pool of ``workers`` spawned processes."""
    if workers <= 1:
        for t in tasks:
            on_done(t, run_one(t))
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_one, t): t for t in tasks}
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # the worker process died
                res = failed_result(t, _error_text(exc))
            on_done(t, res)


def execute_ray(tasks: Sequence[RunTask], workers: int | None, on_done: Done) -> None:
    """Run tasks as Ray tasks; join ``RAY_ADDRESS`` or start a local instance (shut down at the end)."""
    address = os.environ.get("RAY_ADDRESS") or None
    if address is None:
        # A local instance stays on the loopback interface: Ray would otherwise bind the machine's routable
        # address (found by "connecting" to a public one). The switch is read when ray is first imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs ray: pip install 'llm-policy-gen[ray]'") from None
    import logging

    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address is None:
            kwargs.update(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                          _node_ip_address="127.0.0.1")
        ray.init(address=address, **kwargs)
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_one)
        refs = {remote.remote(t): t for t in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                t = refs[ref]
                try:
                    res = ray.get(ref)
                except Exception as exc:  # the task or its worker died
                    res = failed_result(t, _error_text(exc))
                on_done(t, res)
    finally:
        if started:
            ray.shutdown()


# ---------------------------------------------------------------------------------------------------- outputs
def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    return v


def write_results_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _csv_value(r.get(c)) for c in CSV_COLUMNS})
    write_bytes_atomic(Path(path), buf.getvalue().encode("utf-8"))


def _parse_cell(column: str, text: str) -> Any:
    if text == "":
        return None
    if column in ("is_llm", "solved"):
        return text == "true"
    if column in ("seed", "episodes_to_solve", "iterations", "episodes_total", "env_steps_total", "llm_calls",
                  "cached_calls", "input_tokens", "output_tokens"):
        return int(float(text))
    if column in ("best_eval_mean", "best_eval_std", "cost_usd", "wall_s"):
        return float(text)
    return text


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``results.csv`` with typed values (None for empty cells)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p} does not exist; run `llm-policy-gen compare ... --out {p.parent}` first")
    with open(p, encoding="utf-8", newline="") as fh:
        return [{k: _parse_cell(k, v) for k, v in r.items()} for r in csv.DictReader(fh)]


@dataclass
class BackendStats:
    """One line of ``results.md``."""

    backend: str
    is_llm: bool
    runs: int
    ok: int
    score: Any
    median_episodes_to_solve: float | None
    solve_rate: float
    calls: float
    tokens: float
    cost_usd: float
    wall_s: float


def backend_stats(rows: Sequence[dict[str, Any]], backends: Sequence[str] | None = None) -> list[BackendStats]:
    """Per-backend aggregates of result rows (in ``backends`` order, else first appearance)."""
    order = list(backends) if backends else list(dict.fromkeys(r["backend"] for r in rows))
    out = []
    for b in order:
        mine = [r for r in rows if r["backend"] == b]
        ok = [r for r in mine if r["status"] == "ok"]

        def mean_of(key: str, rs: list[dict[str, Any]] = ok) -> float:
            vals = [float(r[key] or 0) for r in rs]
            return float(np.mean(vals)) if vals else float("nan")

        out.append(BackendStats(
            backend=b,
            is_llm=any(bool(r.get("is_llm")) for r in ok),
            runs=len(mine),
            ok=len(ok),
            score=bootstrap_ci([r["best_eval_mean"] for r in ok if r["best_eval_mean"] is not None]),
            median_episodes_to_solve=median_censored([r["episodes_to_solve"] if r["solved"] else None for r in ok]),
            solve_rate=(sum(bool(r["solved"]) for r in ok) / len(ok)) if ok else float("nan"),
            calls=mean_of("llm_calls"),
            tokens=float(np.mean([float((r["input_tokens"] or 0) + (r["output_tokens"] or 0)) for r in ok]))
            if ok else float("nan"),
            cost_usd=float(sum(float(r["cost_usd"] or 0) for r in ok)),
            wall_s=mean_of("wall_s"),
        ))
    return out


def _f(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}"


def results_markdown(meta: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    """The text of ``results.md``."""
    stats = backend_stats(rows, meta.get("backends"))
    heldout = meta.get("settings", {}).get("heldout_episodes", 100)
    lines = [
        f"# Comparison on {meta['env_id']}",
        "",
        f"Seeds {meta['seeds_text']} ({len(meta['seeds'])} runs per backend), {meta['iterations']} iterations per "
        f"run. Command: `{meta['command']}`",
        "",
        "| backend | LLM | runs ok | final eval mean [95% CI] | median episodes to solve | solve rate | "
        "calls / run | tokens / run | cost USD (total) | wall s / run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in stats:
        med = "not reached" if s.median_episodes_to_solve is None else f"{s.median_episodes_to_solve:,.0f}"
        rate = "n/a" if not np.isfinite(s.solve_rate) else f"{100 * s.solve_rate:.0f}%"
        lines.append(
            f"| {s.backend} | {'yes' if s.is_llm else 'no'} | {s.ok}/{s.runs} | {s.score.format(1)} | {med} | "
            f"{rate} | {_f(s.calls, 1)} | {_f(s.tokens, 0)} | {s.cost_usd:.4f} | {_f(s.wall_s, 1)} |"
        )
    lines += [
        "",
        f"- Final eval mean: the kept table's mean return on {heldout} held-out episodes (`best_eval_mean` of each "
        f"run's summary), averaged over seeds; the interval is a percentile bootstrap over seeds "
        f"({DEFAULT_RESAMPLES:,} resamples, seed {DEFAULT_SEED}). With few seeds it is optimistic (narrow).",
        "- Median episodes to solve: environment episodes (training + test, held-out excluded) until the kept "
        "table's held-out mean first reached the reward threshold; runs that never solved count as never "
        "solving, so the median is \"not reached\" when half the runs or more did not solve.",
        "- Calls: calls to the backend. Backends with LLM = no (offline optimiser, q-learning, random) are not "
        "language models; their calls cost nothing.",
        "- Curves: `curves.png` (median and interquartile band over seeds of the kept table's held-out mean "
        "against environment episodes).",
    ]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {r['backend']} seed {r['seed']}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def plot_curves(curves: Sequence[dict[str, Any]], out: Path, title: str, backends: Sequence[str] | None = None,
                threshold: float | None = None, points: int = 300) -> Path:
    """Median and interquartile band per backend of step curves ``{"backend", "x", "y"}``; returns ``out``."""
    from .figures import plt, save_figure

    order = list(backends) if backends else list(dict.fromkeys(c["backend"] for c in curves))
    xmax = max((max(c["x"]) for c in curves if c["x"]), default=1.0)
    grid = np.linspace(0.0, xmax, points)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for b in order:
        mine = [(c["x"], c["y"]) for c in curves if c["backend"] == b and c["x"]]
        if not mine:
            continue
        med, q1, q3 = quartile_band(step_curves(mine, grid))
        line = ax.plot(grid, med, linewidth=2, label=f"{b} (median of {len(mine)})")[0]
        ax.fill_between(grid, q1, q3, color=line.get_color(), alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"solved ({threshold:g})")
    ax.set_xlabel("environment episodes (training + test)")
    ax.set_ylabel("kept table: held-out mean return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return save_figure(fig, Path(out))


def load_curves(out: Path) -> list[dict[str, Any]]:
    """The curve points of a comparison directory (``curves.json``)."""
    p = Path(out) / "curves.json"
    if not p.is_file():
        raise UserError(f"{p} does not exist; run `llm-policy-gen compare ... --out {Path(out)}` first")
    data = json.loads(p.read_text(encoding="utf-8"))
    return list(data["runs"])


# ---------------------------------------------------------------------------------------------------- the sweep
class _Display:
    """Progress over runs: a bar on a terminal, one line per finished run otherwise."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.total, self.count = total, 0
        self.bar: Any = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)
        self.enabled = enabled

    def done(self, task: RunTask, row: dict[str, Any], note: str = "") -> None:
        self.count += 1
        if row["status"] == "ok":
            what = f"best {row['best_eval_mean']:.2f}, {'solved' if row['solved'] else 'not solved'}"
        else:
            what = f"FAILED: {row['error']}"
        msg = f"[{self.count}/{self.total}] {task.backend} seed {task.seed}: {what}{note}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{task.backend} s{task.seed}")
            self.bar.update(1)
            self.bar.write(msg, file=sys.stderr)
        elif self.enabled:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_compare(
    env_id: str,
    backends: Sequence[str],
    seeds: Sequence[int],
    out: Path,
    settings: dict[str, Any] | None = None,
    executor: str = "local",
    workers: int | None = None,
    progress: bool = True,
    command: str = "",
    seeds_text: str = "",
) -> list[dict[str, Any]]:
    """Run the sweep (skipping finished runs) and write the comparison files; return the result rows."""
    from .config import TrainConfig
    from .envs import get_spec

    settings = dict(settings or {})
    if executor not in ("local", "ray"):
        raise UserError(f"bad --executor {executor!r}: accepted local or ray")
    if workers is not None and workers < 1:
        raise UserError(f"bad --workers {workers}: accepted an integer >= 1")
    spec = get_spec(env_id)
    cfg = TrainConfig.build((settings, "compare settings"), ({"env_id": env_id}, "compare"))
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tasks = plan(env_id, backends, seeds, out, settings)
    meta = {
        "package": "llm-policy-gen", "version": __version__, "env_id": env_id, "backends": list(backends),
        "seeds": list(seeds), "seeds_text": seeds_text or ",".join(map(str, seeds)), "iterations": cfg.iterations,
        "settings": {**settings, "heldout_episodes": cfg.heldout_episodes}, "executor": executor,
        "workers": workers, "command": command, "reward_threshold": spec.reward_threshold,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json_atomic(out / "compare.json", meta)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    display = _Display(len(tasks), f"compare {env_id}", progress)
    todo = []
    for t in tasks:
        prev = finished_result(t)
        if prev is None:
            todo.append(t)
        else:
            results[(t.backend, t.seed)] = prev
            display.done(t, prev["row"], " (finished earlier, skipped)")

    if len(todo) < len(tasks):
        print(f"{len(tasks) - len(todo)} of {len(tasks)} runs finished earlier: skipped", file=sys.stderr)

    def on_done(t: RunTask, res: dict[str, Any]) -> None:
        results[(t.backend, t.seed)] = res
        display.done(t, res["row"])

    t0 = time.perf_counter()
    try:
        if executor == "ray":
            execute_ray(todo, workers, on_done)
        else:
            execute_local(todo, workers or 1, on_done)
    finally:
        display.close()
    ordered = [results[(t.backend, t.seed)] for t in tasks if (t.backend, t.seed) in results]
    rows = [r["row"] for r in ordered]
    curves = [{"backend": r["row"]["backend"], "seed": r["row"]["seed"], "x": list(r["curve"][0]),
               "y": list(r["curve"][1])} for r in ordered]
    meta["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    meta["sweep_wall_s"] = round(time.perf_counter() - t0, 3)
    write_json_atomic(out / "compare.json", meta)
    write_results_csv(out / "results.csv", rows)
    write_json_atomic(out / "curves.json", {"env_id": env_id, "metric": "heldout_mean", "runs": curves})
    write_bytes_atomic(out / "results.md", results_markdown(meta, rows).encode("utf-8"))
    plot_curves(curves, out / "curves.png", f"{env_id}: kept table over seeds", backends, spec.reward_threshold)
    return rows


# ---------------------------------------------------------------------------------------------------- CLI
def add_parser(subparsers: Any) -> None:
    """Register ``compare`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "compare", help="run backends x seeds through the loop; results table and curves",
        description="Run every (backend, seed) pair, each in its own run directory, and write results.csv, "
        "results.md and curves.png. Re-running skips finished runs. Exit 1 when some run failed.")
    p.add_argument("--env", dest="env_id", required=True, help="gymnasium id (see `envs`)")
    p.add_argument("--backends", required=True,
                   help="comma-separated backend specs, e.g. offline,q-learning,random,openai:gpt-4.1-mini")
    p.add_argument("--seeds", default="0-4", help="seed range A-B or list 0,1,2 (default 0-4)")
    p.add_argument("--iterations", type=int, help="proposal rounds per run (default 30)")
    p.add_argument("--workers", type=int, help="parallel runs (local default 1; ray default: all CPUs)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="local (default) or ray")
    p.add_argument("--config", help="TOML file with train settings applied to every run")
    p.add_argument("--out", help="comparison directory (default logs/compare/<env-id>)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from .clients.keys import load_env, redact
    from .config import TrainConfig, load_config_file

    load_env()
    seeds = parse_seeds(args.seeds)
    backends = parse_backends(args.backends)
    settings: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for fixed in ("env_id", "backend", "seed", "logs_dir", "run_id"):
        settings.pop(fixed, None)
    cli: dict[str, Any] = {} if args.iterations is None else {"iterations": args.iterations}
    TrainConfig.build((settings, f"config file {args.config}"), (cli, "command line"))  # every setting, checked now
    settings.update(cli)
    out = Path(args.out) if args.out else Path("logs") / "compare" / slug(args.env_id)
    command = f"llm-policy-gen compare --env {args.env_id} --backends {','.join(backends)} --seeds {args.seeds}"
    for flag, value in (("--iterations", args.iterations), ("--workers", args.workers),
                        ("--config", args.config), ("--out", args.out)):
        if value is not None:
            command += f" {flag} {redact(str(value))}"
    if args.executor != "local":
        command += f" --executor {args.executor}"
    rows = run_compare(args.env_id, backends, seeds, out, settings, args.executor, args.workers,
                       progress=not args.no_progress, command=command, seeds_text=args.seeds)
    print((out / "results.md").read_text(encoding="utf-8"))
    print(f"comparison directory: {out}")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} of {len(rows)} runs failed (see results.md)", file=sys.stderr)
        return 1
    return 0
