"""``llm-policy-gen compare``: every (backend, seed) pair through the same engine, then the table and the curves.

::

    llm-policy-gen compare --env CartPole-v1 --backends offline,q-learning,random --seeds 0-4 \\
        [--iterations N] [--workers N] [--executor local|ray] [--config FILE.toml] [--out DIR] \\
        [--max-concurrent-calls N] [--rpm N] [--budget-usd X]

Each pair is one run of :mod:`llm_policy_gen.engine` in its own run directory ``OUT/runs/<env>/<entry>_s<seed>``
(the usual files of a run; ``<entry>`` is the ``--backends`` entry made a file name: ``offline_s0``,
``offline-reward_s0``). The comparison directory gets:

* ``results.csv`` -- one row per run: its summary numbers with ``status=ok``, or ``status=failed`` (or
  ``interrupted``) with the error and no numbers (a failed run never stops the sweep);
* ``results.md`` -- the settings every run shared, then per backend: final eval mean (the best table's mean on the
  held-out episodes) with a 95 % percentile-bootstrap interval over seeds (:func:`llm_policy_gen.stats.bootstrap_ci`:
  10,000 resamples, seed 0), median episodes to solve (unsolved runs count as never solving), solve rate, calls,
  tokens, cost and wall time; the budget and the runs it stopped;
* ``curves.png`` -- the best table's held-out mean against environment episodes, median and interquartile band per
  backend over seeds; ``curves.json`` holds the points it was drawn from;
* ``compare.json`` -- the sweep's parameters, the settings that decide its results, and its limits' report;
* ``sweep.jsonl`` -- one line per attempt of a run: started (and on which node), lost, resumed, done.

**Before the first run** every argument is checked -- each entry's settings, environment, mode and backend, its key
included (each entry's run is built, not started) -- so a bad input ends the command at once with exit 2.

**Re-running the same command** keeps what is done: a run that finished (all its iterations, or a legitimate stop:
patience, ``--max-episodes``, the budget, a replay that ran out) is skipped; an interrupted or failed run resumes from
its checkpoint (:func:`llm_policy_gen.engine.resume`), never from scratch; a directory without a run's
``config.json`` (killed before it started) is replaced. Settings that decide results cannot change under the same
``--out``: another environment, ``--iterations`` or training setting is refused with exit 2 naming the settings that
differ. How a sweep runs may change: ``--workers``, ``--executor``, the provider limits, timeouts and retries.

**Provider limits and the budget** are the sweep's, shared by all its runs (:mod:`llm_policy_gen.sweep_limits`): at
most ``--max-concurrent-calls`` calls in flight per provider (default 8), at most ``--rpm`` call starts a minute per
provider (default: no limit), and ``--budget-usd`` for the sweep's total cost: once the next call could pass it, no
call starts and every LLM run ends cleanly with ``stop_reason`` "budget reached". Costs of earlier invocations count.

``--executor local`` runs one run after another in this process (``--workers`` 1, the default) or in a pool of
``--workers`` spawned processes; ``--executor ray`` submits each run as a Ray task (:mod:`llm_policy_gen.ray_executor`:
joins ``RAY_ADDRESS`` or starts a local instance; no shared disk needed; a run whose node dies resumes on another
node from the last checkpoint the driver received). Runs are seeded, so both executors give the same numbers (wall
times excepted).

Exit codes: 0 when every run finished, 1 when some failed (the files are written all the same), 2 for bad input, 130
when interrupted (the files then say which runs a re-run will resume).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import __version__
from .config import OPERATIONAL_SETTINGS  # what may differ between invocations of one sweep
from .console import plural
from .errors import UserError, missing_extra
from .locks import FolderLock, die_with_parent
from .runlog import append_jsonl, slug, to_jsonable, write_bytes_atomic, write_json_atomic
from .stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_ci, median_censored, quartile_band, step_curves
from .sweep_limits import DEFAULT_MAX_CONCURRENT_CALLS
from .sweep_task import (
    CSV_COLUMNS,
    TIME_COLUMNS,
    RunTask,
    error_text,
    failed_result,
    finished,
    result_from_summary,
    run_one,
    split_entry,
)

if TYPE_CHECKING:
    from .config import TrainConfig
    from .envs.spec import EnvSpec

__all__ = [
    "RunTask",
    "CSV_COLUMNS",
    "TIME_COLUMNS",
    "split_entry",
    "parse_seeds",
    "parse_backends",
    "plan",
    "run_one",
    "finished",
    "run_compare",
    "backend_stats",
    "results_markdown",
    "plot_curves",
    "read_results",
    "add_parser",
]

# ---------------------------------------------------------------------------------------------------- parsing
def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,7"`` and mixes (``"0-2,9"``) too. Bad input is a UserError."""
    import re

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
def plan(env_id: str, backends: Sequence[str], seeds: Sequence[int], out: Path,
         settings: dict[str, Any]) -> list[RunTask]:
    """Every (backend, seed) task of the sweep, backend-major."""
    out = Path(out).resolve()
    return [RunTask(env_id, b, s, str(out), dict(settings)) for b in backends for s in seeds]


@dataclass
class _Found:
    """What an earlier invocation left of one run."""

    state: str
    """``new`` (nothing), ``finished``, ``started`` (resumable) or ``stale`` (a directory without config.json)."""
    summary: dict[str, Any] | None = None
    config: dict[str, Any] | None = None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _found(task: RunTask) -> _Found:
    d = task.run_dir
    if not d.exists():
        return _Found("new")
    record = _read_json(d / "config.json")
    if record is None or not isinstance(record.get("config"), dict):
        return _Found("stale")
    summary = _read_json(d / "summary.json")
    done = summary is not None and finished(summary)
    return _Found("finished" if done else "started", summary, record["config"])


def _committed_cost(task: RunTask, found: _Found) -> float:
    """What a run already spent, as far as its checkpoint (or its final summary) records it."""
    if found.state == "finished" and found.summary is not None:
        return float(found.summary.get("cost_usd") or 0.0)
    ckpt = task.run_dir / "checkpoint.npz"
    if found.state != "started" or not ckpt.is_file():
        return 0.0
    from .checkpoint import load_checkpoint

    try:
        return float(load_checkpoint(ckpt).get("usage", {}).get("cost_usd") or 0.0)
    except UserError:
        return 0.0


# ---------------------------------------------------------------------------------------------------- settings
def experiment(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a resolved config that decide a run's results (JSON values, as config.json holds them)."""
    return {k: v for k, v in to_jsonable(dict(config)).items() if k not in OPERATIONAL_SETTINGS}


def _resolve(cfg: TrainConfig) -> tuple[EnvSpec, TrainConfig]:
    """The run's env spec, and ``cfg`` with the spec's train defaults applied (as ``train`` does)."""
    from .engine import resolve_spec

    spec = resolve_spec(cfg)
    return spec, (cfg.with_env_defaults(spec.train_defaults) if spec.train_defaults else cfg)


def _resolved(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as the engine records it in config.json."""
    return _resolve(cfg)[1].to_dict()


def differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"iterations 5 (this command: 8)"`` for every key of both whose value differs (a setting only one side
    knows came with another version of the package; its default keeps the old behaviour)."""
    out = []
    for k in sorted(set(before) & set(now)):
        if json.dumps(before.get(k), sort_keys=True) != json.dumps(now.get(k), sort_keys=True):
            out.append(f"{k} {json.dumps(before.get(k))} (this command: {json.dumps(now.get(k))})")
    return out


def _refuse_other_settings(out: Path, what: str, diffs: Sequence[str]) -> UserError:
    return UserError(f"--out {out} holds {what} with other settings: {'; '.join(diffs)}; re-run with those settings "
                     "to continue it, or give another --out")


def check_same_sweep(out: Path, sweep: Mapping[str, Any], tasks: Sequence[RunTask],
                     found: Mapping[str, _Found]) -> None:
    """Refuse (UserError) when ``out`` holds a sweep or runs made with settings that decide results differently."""
    before = _read_json(out / "compare.json")
    if before is not None:
        recorded = before.get("experiment")
        if not isinstance(recorded, dict):  # a comparison written before the record existed
            recorded = {"env_id": before.get("env_id"), "iterations": before.get("iterations")}
            now = {k: sweep.get(k) for k in recorded}
        else:
            now = dict(sweep)
        diffs = differences(recorded, now)
        if diffs:
            raise _refuse_other_settings(out, "a comparison", diffs)
    for task in tasks:
        f = found[task.run_id]
        if f.config is not None:
            diffs = differences(experiment(f.config), experiment(_resolved(task.config())))
            if diffs:
                raise _refuse_other_settings(out, f"the run {task.run_dir.relative_to(out)}", diffs)


def preflight(tasks: Sequence[RunTask]) -> None:
    """Everything a run would refuse before its first iteration, for every task, before any run starts: the
    settings of every (entry, seed), and each entry's environment, mode and backend (its key included) by building
    its run in a scratch folder without starting it. Says, once per entry, where its calls will go and where that
    base URL and the key came from."""
    from .console import Console
    from .engine import Run
    from .modes import MODES
    from .runlog import RunDir

    built: set[str] = set()
    for task in tasks:
        cfg = task.config()
        if task.backend in built:
            continue
        built.add(task.backend)
        spec, cfg = _resolve(cfg)
        if cfg.mode not in MODES:
            raise MODES.unknown(cfg.mode)
        with tempfile.TemporaryDirectory(prefix="llm-policy-gen-check-") as tmp:
            console = Console(cfg.iterations, task.backend, enabled=False, sink=lambda s: None)
            run = Run(cfg, spec, MODES.load(cfg.mode)(), RunDir(Path(tmp)), console)
            run.logger.close()
            run.collector.close()
            if run.endpoint is not None:
                print(run.endpoint, file=sys.stderr)


# ---------------------------------------------------------------------------------------------------- executors
Done = Callable[[RunTask, dict[str, Any]], None]
Note = Callable[[dict[str, Any]], None]


def execute_local(tasks: Sequence[RunTask], workers: int, on_done: Done, limits: Mapping[str, Any],
                  note: Note) -> dict[str, Any]:
    """Run tasks in this process (``workers`` 1) or in a pool of ``workers`` spawned processes, all under one
    :class:`~llm_policy_gen.sweep_limits.SweepLimits` (a manager process serves it to a pool); returns its report."""
    from .sweep_limits import SweepLimits, managed_limits

    if workers <= 1:
        shared = SweepLimits(**limits)
        for t in tasks:
            note({"event": "started", "run": t.run_id, "attempt": 1, "node": "local"})
            res = run_one(t, shared, t.run_id)
            note({"event": "done", "run": t.run_id, "attempt": 1, "status": res["row"]["status"]})
            on_done(t, res)
        return shared.report()
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with managed_limits(**limits) as proxy, \
            ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=die_with_parent,
                                initargs=(os.getpid(),)) as pool:  # a killed sweep leaves no worker writing
        futures = {pool.submit(run_one, t, proxy, t.run_id): t for t in tasks}
        for t in tasks:
            note({"event": "submitted", "run": t.run_id, "attempt": 1, "node": "local"})
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # the worker process died
                proxy.forget(t.run_id)
                res = failed_result(t, error_text(exc))
            note({"event": "done", "run": t.run_id, "attempt": 1, "status": res["row"]["status"]})
            on_done(t, res)
        return proxy.report()


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
        f"Seeds {meta['seeds_text']} ({plural(len(meta['seeds']), 'run')} per backend), "
        f"{plural(meta['iterations'], 'iteration')} per run. Command: `{meta['command']}`",
        "",
        *_settings_lines(meta, rows),
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
        "- Median episodes to solve: environment episodes (training + test + confirmation, held-out excluded) "
        "until the kept table's held-out mean first reached the reward threshold; runs that never solved count as "
        "never solving, so the median is \"not reached\" when half the runs or more did not solve.",
        "- Calls: calls to the backend. Backends with LLM = no (offline optimiser, q-learning, random) are not "
        "language models; their calls cost nothing.",
        "- Curves: `curves.png` (median and interquartile band over seeds of the kept table's held-out mean "
        "against environment episodes).",
    ]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed runs", "",
                  "Runs without a result: their numbers are in no line above. Running the same command again resumes "
                  "them from their checkpoints.", ""]
        lines += [f"- {r['backend']} seed {r['seed']} ({r['status']}): {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def _settings_lines(meta: Mapping[str, Any], rows: Sequence[dict[str, Any]]) -> list[str]:
    """What every run shared: the settings given, the provider limits and the budget (and what it stopped)."""
    given = {k: v for k, v in meta.get("settings", {}).items() if k not in ("iterations", "budget_usd")}
    lines = []
    if given:
        lines.append("Settings of every run: " + ", ".join(f"`{k}` = {json.dumps(v)}" for k, v in sorted(given.items()))
                     + " (the rest are the defaults; `compare.json` holds them all).")
    limits = meta.get("limits") or {}
    if limits:
        rpm = f"at most {limits['rpm']:g} call starts a minute" if limits.get("rpm") else "no rate limit"
        lines.append(f"Provider limits shared by all runs: at most {limits['max_concurrent_calls']} calls in flight "
                     f"per provider, {rpm}.")
    if limits.get("budget_usd") is not None:
        stopped = [r for r in rows if r["status"] == "ok" and str(r.get("stop_reason") or "").startswith("budget")]
        cost = sum(float(r.get("cost_usd") or 0) for r in rows)
        text = (f"Budget: USD {limits['budget_usd']:.4f} for the whole sweep (`--budget-usd`); its runs cost USD "
                f"{cost:.4f} in all (USD {limits.get('spent_usd', cost):.4f} counted by the budget).")
        if stopped:
            names = ", ".join(f"{r['backend']} seed {r['seed']} after {r['iterations']}" for r in stopped)
            text += (f" {plural(len(stopped), 'run')} ended when the next call could have passed it (stop reason "
                     f"\"{stopped[0]['stop_reason']}\"): {names} iterations; their numbers come from fewer "
                     "iterations than asked for.")
        else:
            text += " No run was stopped by it."
        lines.append(text)
    return [*lines, ""] if lines else []


def plot_curves(curves: Sequence[dict[str, Any]], out: Path, title: str, backends: Sequence[str] | None = None,
                threshold: float | None = None, points: int = 300) -> Path:
    """Median and interquartile band per backend of step curves ``{"backend", "x", "y"}``; returns ``out``."""
    from .plotting.curves import figure_label, group_colours
    from .plotting.figure import plt, save_figure

    order = list(backends) if backends else list(dict.fromkeys(c["backend"] for c in curves))
    colours = dict(zip(order, group_colours(len(order)), strict=True))
    xmax = max((max(c["x"]) for c in curves if c["x"]), default=1.0)
    grid = np.linspace(0.0, xmax, points)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for b in order:
        mine = [(c["x"], c["y"]) for c in curves if c["backend"] == b and c["x"]]
        if not mine:
            continue
        med, q1, q3 = quartile_band(step_curves(mine, grid))
        ax.plot(grid, med, linewidth=2, color=colours[b], label=f"{figure_label(b)} (median of {len(mine)})")
        ax.fill_between(grid, q1, q3, color=colours[b], alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"solved ({threshold:g})")
    ax.set_xlabel("environment episodes (training + test + confirmation)")
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
            best = "n/a" if row["best_eval_mean"] is None else f"{row['best_eval_mean']:.2f}"
            what = f"best {best}, {'solved' if row['solved'] else 'not solved'}"
        else:
            what = f"{row['status'].upper()}: {row['error']}"
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


def _public(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as compare.json, results.md and the console show them: a base URL without its password."""
    from .clients.keys import without_userinfo

    out = dict(settings)
    if isinstance(out.get("base_url"), str):
        out["base_url"] = without_userinfo(out["base_url"])
    return out


def _check_number(name: str, value: float | None, accepted: str, ok: Callable[[float], bool]) -> None:
    if value is not None and not ok(value):
        raise UserError(f"bad {name} {value:g}: accepted {accepted}")


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
    *,
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
    rpm: float | None = None,
    budget_usd: float | None = None,
) -> list[dict[str, Any]]:
    """Check everything, run the sweep (skipping finished runs, resuming started ones) and write the comparison
    files; return the result rows. A Ctrl-C still writes the files (unfinished runs as ``interrupted``), then
    re-raises."""
    from .config import TrainConfig
    from .envs import get_spec

    settings = dict(settings or {})
    if executor not in ("local", "ray"):
        raise UserError(f"bad --executor {executor!r}: accepted local or ray")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise missing_extra("--executor ray needs ray", "ray")
    _check_number("--workers", workers, "an integer >= 1", lambda v: v >= 1)
    _check_number("--max-concurrent-calls", max_concurrent_calls, "an integer >= 1", lambda v: v >= 1)
    _check_number("--rpm", rpm, "a number > 0", lambda v: v > 0)
    _check_number("--budget-usd", budget_usd, "a number >= 0", lambda v: v >= 0)
    if budget_usd is not None:
        settings["budget_usd"] = float(budget_usd)
    spec = get_spec(env_id)
    cfg = TrainConfig.build((settings, "compare settings"), ({"env_id": env_id}, "compare"))
    sweep = {k: v for k, v in experiment(_resolved(cfg)).items() if k not in ("backend", "seed")}
    out = Path(out).resolve()
    tasks = plan(env_id, backends, seeds, out, settings)
    if out.is_dir():  # a sweep writing the folder now refuses this one at once, before any check or run is built
        with FolderLock(out, "the comparison folder"):
            pass
    found = {t.run_id: _found(t) for t in tasks}
    check_same_sweep(out, sweep, tasks, found)
    preflight(tasks)
    if executor == "ray" and os.environ.get("RAY_ADDRESS"):
        from .ray_executor import check_address

        check_address(os.environ["RAY_ADDRESS"])

    # Everything is checked: from here on, files are written.
    out.mkdir(parents=True, exist_ok=True)
    with FolderLock(out, "the comparison folder"):  # one compare writes it at a time
        found = {t.run_id: _found(t) for t in tasks}  # as the last writer left them
        limits: dict[str, Any] = {"max_concurrent": max_concurrent_calls, "rpm": rpm, "budget_usd": budget_usd,
                                  "spent_usd": sum(_committed_cost(t, found[t.run_id]) for t in tasks)}
        meta: dict[str, Any] = {
            "package": "llm-policy-gen", "version": __version__, "env_id": env_id, "backends": list(backends),
            "seeds": list(seeds), "seeds_text": seeds_text or ",".join(map(str, seeds)), "iterations": cfg.iterations,
            "settings": {**_public(settings), "heldout_episodes": cfg.heldout_episodes}, "experiment": sweep,
            "executor": executor, "workers": workers, "command": command, "reward_threshold": spec.reward_threshold,
            "limits": {"max_concurrent_calls": max_concurrent_calls, "rpm": rpm, "budget_usd": budget_usd},
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        write_json_atomic(out / "compare.json", meta)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        display = _Display(len(tasks), f"compare {env_id}", progress)
        todo: list[RunTask] = []
        for t in tasks:
            f = found[t.run_id]
            if f.state == "finished" and f.summary is not None:
                results[(t.backend, t.seed)] = result_from_summary(t, f.summary)
                display.done(t, results[(t.backend, t.seed)]["row"], " (finished earlier, skipped)")
                continue
            if f.state == "stale":
                shutil.rmtree(t.run_dir)
            todo.append(t)
        resumed = {t.run_id for t in todo if found[t.run_id].state == "started"}
        if len(todo) < len(tasks) or resumed:
            print(f"{len(tasks) - len(todo)} of {plural(len(tasks), 'run')} finished earlier: skipped"
                  + (f"; {len(resumed)} started earlier: resumed from their checkpoints" if resumed else ""),
                  file=sys.stderr)

        def note(event: dict[str, Any]) -> None:
            append_jsonl(out / "sweep.jsonl", {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **event})

        def on_done(t: RunTask, res: dict[str, Any]) -> None:
            results[(t.backend, t.seed)] = res
            display.done(t, res["row"], " (resumed)" if t.run_id in resumed else "")

        t0 = time.perf_counter()
        interrupted = False
        try:
            if executor == "ray":
                from .ray_executor import execute_ray

                meta["limits"] = execute_ray(todo, workers, on_done, limits, note)
            else:
                meta["limits"] = execute_local(todo, workers or 1, on_done, limits, note)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            display.close()
        ordered = [results.get((t.backend, t.seed)) or failed_result(
            t, "interrupted before it finished; run the same command again to resume it", "interrupted")
            for t in tasks]
        rows = [r["row"] for r in ordered]
        curves = [{"backend": r["row"]["backend"], "seed": r["row"]["seed"], "x": list(r["curve"][0]),
                   "y": list(r["curve"][1])} for r in ordered if r["row"]["status"] == "ok"]
        meta["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        meta["sweep_wall_s"] = round(time.perf_counter() - t0, 3)
        meta["interrupted"] = interrupted
        write_json_atomic(out / "compare.json", meta)
        write_results_csv(out / "results.csv", rows)
        write_json_atomic(out / "curves.json", {"env_id": env_id, "metric": "heldout_mean", "runs": curves})
        write_bytes_atomic(out / "results.md", results_markdown(meta, rows).encode("utf-8"))
        plot_curves(curves, out / "curves.png", f"{env_id}: kept table over seeds", backends, spec.reward_threshold)
        if interrupted:
            raise KeyboardInterrupt
        return rows


# ---------------------------------------------------------------------------------------------------- CLI
def add_parser(subparsers: Any) -> None:
    """Register ``compare`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "compare", help="run backends x seeds through the loop; results table and curves",
        description="Run every (backend, seed) pair, each in its own run directory, and write results.csv, "
        "results.md and curves.png. Every argument (keys included) is checked before the first run. Re-running "
        "the same command skips finished runs and resumes interrupted ones; other settings under the same --out "
        "are refused. Exit 1 when some run failed.")
    p.add_argument("--env", dest="env_id", required=True, help="gymnasium id (see `envs`)")
    p.add_argument("--backends", required=True,
                   help="comma-separated BACKEND or BACKEND@MODE entries, e.g. offline,q-learning,random,"
                   "openai:gpt-4.1-mini")
    p.add_argument("--seeds", default="0-4", help="seed range A-B or list 0,1,2 (default 0-4)")
    p.add_argument("--iterations", type=int, help="proposal rounds per run (default 30)")
    p.add_argument("--workers", type=int,
                   help="parallel runs (local default 1; a local Ray instance: its CPUs, default all)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local (default) or ray (joins RAY_ADDRESS, else starts a local instance)")
    p.add_argument("--config", help="TOML file with train settings applied to every run")
    p.add_argument("--out", help="comparison directory (default logs/compare/<env-id>)")
    p.add_argument("--max-concurrent-calls", type=int, default=DEFAULT_MAX_CONCURRENT_CALLS,
                   help=f"calls in flight at once per provider, over all runs (default {DEFAULT_MAX_CONCURRENT_CALLS})")
    p.add_argument("--rpm", type=float, help="call starts per minute per provider, over all runs (default: no limit)")
    p.add_argument("--budget-usd", type=float,
                   help="the sweep's spending ceiling: no call starts once it could pass it; runs end cleanly")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from .clients.keys import load_env, redact, remember_url
    from .config import TrainConfig, load_config_file

    load_env()
    seeds = parse_seeds(args.seeds)
    backends = parse_backends(args.backends)
    settings: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for fixed in ("env_id", "backend", "seed", "logs_dir", "run_id"):
        settings.pop(fixed, None)
    remember_url(settings.get("base_url") if isinstance(settings.get("base_url"), str) else None)
    cli: dict[str, Any] = {} if args.iterations is None else {"iterations": args.iterations}
    TrainConfig.build((settings, f"config file {args.config}"), (cli, "command line"))  # every setting, checked now
    settings.update(cli)
    out = Path(args.out) if args.out else Path("logs") / "compare" / slug(args.env_id)
    command = f"llm-policy-gen compare --env {args.env_id} --backends {','.join(backends)} --seeds {args.seeds}"
    for flag, value in (("--iterations", args.iterations), ("--workers", args.workers),
                        ("--config", args.config), ("--out", args.out), ("--rpm", args.rpm),
                        ("--budget-usd", args.budget_usd)):
        if value is not None:
            command += f" {flag} {redact(str(value))}"
    if args.max_concurrent_calls != DEFAULT_MAX_CONCURRENT_CALLS:
        command += f" --max-concurrent-calls {args.max_concurrent_calls}"
    if args.executor != "local":
        command += f" --executor {args.executor}"
    rows = run_compare(args.env_id, backends, seeds, out, settings, args.executor, args.workers,
                       progress=not args.no_progress, command=command, seeds_text=args.seeds,
                       max_concurrent_calls=args.max_concurrent_calls, rpm=args.rpm, budget_usd=args.budget_usd)
    print((out / "results.md").read_text(encoding="utf-8"))
    print(f"comparison directory: {out}")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} of {plural(len(rows), 'run')} failed (see results.md)", file=sys.stderr)
        return 1
    return 0
