"""``llm-policy-gen compare``: every (backend, seed) pair through the same engine, then the table and the curves.

::

    llm-policy-gen compare --env CartPole-v1 --methods offline,@q-learning,random --seeds 0-4 \\
        [--iterations N] [--max-steps N] [--max-episodes N] [--workers N] [--executor local|ray] \\
        [--config FILE.toml] [--out DIR] [--max-concurrent-calls N] [--rpm N] [--budget-usd X]

``--methods`` (``--backends`` is its old spelling) takes method entries in the grammar of
:mod:`llm_policy_gen.sweep.methods`: ``[LABEL=]BACKEND[@MODE][[KEY=VALUE;...]]`` or ``[LABEL=]@MODE[...]``; a label
names the method, options are settings of that method only (one that no plug-in of its runs takes is refused before
anything runs). Each pair is one run of :mod:`llm_policy_gen.run` in its own run directory
``OUT/runs/<env>/<run id>`` (the usual files of a run; an entry without label and options keeps the id it always had,
the entry made a file name: ``offline_s0``, ``offline-reward_s0``; a label gives ``<label>_s0``). Tables, reports,
figures and the console name a method by its display name (its label, else a path shown as its stem:
``llamacpp:SmolLM2-135M-Instruct.Q4_1``). The comparison directory gets (:mod:`.results`):

* ``results.csv`` -- one row per run: its summary numbers with ``status=ok``, or ``status=failed`` (or
  ``interrupted``) with the error and no numbers (a failed run never stops the sweep);
* ``results.md`` -- the settings every run shared, then per backend: the mean counted episodes and environment steps
  per run (with a warning, printed too, when backends differ by more than 10%: :mod:`llm_policy_gen.sweep.interaction`),
  the interquartile mean over seeds of the final
  held-out return (the best table's mean on the held-out episodes) and of the normalised score (0: the uniform random
  policy, 1: the reward threshold), each with rliable's 95 % stratified bootstrap interval
  (:func:`llm_policy_gen.plotting.stats.iqm_interval`: 2,000 resamples, seed 0), median episodes to solve
  (unsolved runs count as never solving), solve rate, calls,
  tokens, cost and wall time; the budget and the runs it stopped;
* ``curves.png`` -- the best table's held-out mean against environment episodes, median and interquartile band per
  backend over seeds, ending where the backend's shortest run ended; ``curves.json`` holds the points it was drawn
  from;
* ``random_policy.json`` -- the uniform random policy's mean return on each run seed's held-out seeds
  (:mod:`llm_policy_gen.sweep.random_baseline`), where the task has a reward threshold;
* ``compare.json`` -- the sweep's parameters, the settings that decide its results, and its limits' report;
* ``sweep.jsonl`` -- one line per attempt of a run: started (and on which node), lost, resumed, done.

**Equal interaction**: every run gets the same ``--iterations``, and a method that spends more episodes per iteration
gains experience faster. ``--max-steps N`` (or ``--max-episodes N``) gives every run the same budget of counted
interaction: a run stops at the first iteration boundary at or past it (give an ``--iterations`` large enough that the
budget, not the iterations, ends the runs).

**Before the first run** every argument is checked (:mod:`.plan`) -- each entry's settings, environment, mode and
backend, its key included (each entry's run is built, not started) -- so a bad input ends the command at once with
exit 2.

**Re-running the same command** keeps what is done: a run that finished (all its iterations, or a legitimate stop:
patience, ``--max-episodes``, the budget, a replay that ran out) is skipped; an interrupted or failed run resumes from
its checkpoint (:func:`llm_policy_gen.run.resume`), never from scratch; a directory without a run's
``config.json`` (killed before it started) is replaced. Settings that decide results cannot change under the same
``--out``: another environment, ``--iterations`` or training setting is refused with exit 2 naming the settings that
differ. How a sweep runs may change: ``--workers``, ``--executor``, the provider limits, timeouts and retries.

**Provider limits and the budget** are the sweep's, shared by all its runs (:mod:`.limits`): at most
``--max-concurrent-calls`` calls in flight per provider (default 8), at most ``--rpm`` call starts a minute per
provider (default: no limit), and ``--budget-usd`` for the sweep's total cost: once the next call could pass it, no
call starts and every LLM run ends cleanly with ``stop_reason`` "budget reached". Costs of earlier invocations count.

``--executor local`` runs one run after another in this process (``--workers`` 1, the default) or in a pool of
``--workers`` spawned processes (:mod:`.local`); ``--executor ray`` submits each run as a Ray task (:mod:`.ray`:
joins ``RAY_ADDRESS`` or starts a local instance; no shared disk needed; a run whose node dies resumes on another
node from the last checkpoint the driver received). Runs are seeded, so both executors give the same numbers (wall
times excepted).

Exit codes: 0 when every run finished, 1 when some failed (the files are written all the same), 2 for bad input, 130
when interrupted, 143 or 129 for SIGTERM or SIGHUP, handled as Ctrl-C (the files then say which runs a re-run will
resume, and the last line names the folder and the command).
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SweepInterrupted, UserError, signal_of
from ..loggers.console import plural, printable
from ..schema.aliases import take_notes
from ..storage.locks import FolderLock
from ..storage.runlog import append_jsonl, slug
from ..sweep.closing import close_sweep
from ..sweep.executors import EXECUTORS, check_executor, check_reachable, execute
from ..sweep.limits import DEFAULT_MAX_CONCURRENT_CALLS
from ..sweep.plan import check_same_sweep, committed_cost, experiment, plan, preflight, resolved, survey
from ..sweep.results import ResultRow, SweepRecord
from ..sweep.task import RunTask, TaskResult, result_from_summary

__all__ = ["CompareConfig", "run_compare", "add_parser", "add_limit_options"]


@dataclass(frozen=True)
class CompareConfig:
    """One comparison: what to run and how. Checked when made (a bad value is a :class:`UserError` naming its flag)."""

    env_id: str
    """The gymnasium id (``--env``)."""
    backends: list[str]
    """``BACKEND`` or ``BACKEND@MODE`` entries (``--backends``), in the table's order."""
    seeds: list[int]
    """The seeds of every entry (``--seeds``)."""
    out: Path
    """The comparison directory (``--out``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """TrainConfig settings of every run (``--config``, ``--iterations``)."""
    executor: str = "local"
    """``local`` (this process or a process pool) or ``ray``."""
    workers: int | None = None
    """Parallel runs (local: 1 when None; Ray: a local instance's CPUs)."""
    progress: bool = True
    """A progress bar on a terminal, one line per finished run otherwise."""
    command: str = ""
    """The command line, as ``compare.json`` and ``results.md`` quote it."""
    seeds_text: str = ""
    """``--seeds`` as given (default: the seeds, comma-separated)."""
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    """Calls in flight at once per provider, over all runs."""
    rpm: float | None = None
    """Call starts per minute per provider, over all runs (None: no limit)."""
    budget_usd: float | None = None
    """The sweep's spending ceiling (None: none)."""

    def __post_init__(self) -> None:
        check_executor(self.executor)
        _check_number("--workers", self.workers, "an integer >= 1", lambda v: v >= 1)
        _check_number("--max-concurrent-calls", self.max_concurrent_calls, "an integer >= 1", lambda v: v >= 1)
        _check_number("--rpm", self.rpm, "a number > 0", lambda v: v > 0)
        _check_number("--budget-usd", self.budget_usd, "a number >= 0", lambda v: v >= 0)

    @property
    def run_settings(self) -> dict[str, Any]:
        """The settings every run gets: :attr:`settings`, and the budget."""
        extra = {} if self.budget_usd is None else {"budget_usd": float(self.budget_usd)}
        return {**self.settings, **extra}


def _check_number(name: str, value: float | None, accepted: str, ok: Callable[[float], bool]) -> None:
    """Refuse ``value`` unless it is finite (``inf``, ``1e400`` and ``nan`` parse as floats) and ``ok``."""
    if value is not None and not (math.isfinite(value) and ok(value)):
        raise UserError(f"bad {name} {value:g}: accepted {accepted} (finite)")


class _Display:
    """Progress over runs: a bar on a terminal, one line per finished run otherwise."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.total, self.count = total, 0
        self.bar: Any = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)
        self.enabled = enabled

    def done(self, task: RunTask, row: ResultRow, note: str = "") -> None:
        self.count += 1
        if row.ok:
            best = "n/a" if row.best_heldout_mean is None else f"{row.best_heldout_mean:.2f}"
            what = f"best {best}, {'solved' if row.solved else 'not solved'}"
        else:
            what = f"{row.status.upper()}: {row.error}"
        msg = printable(f"[{self.count}/{self.total}] {task.label} seed {task.seed}: {what}{note}")
        if self.bar is not None:
            self.bar.set_postfix_str(f"{task.label} s{task.seed}")
            self.bar.update(1)
            self.bar.write(msg, file=sys.stderr)
        elif self.enabled:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _public(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as compare.json, results.md and the console show them: a base URL without its password."""
    from ..clients.keys import without_userinfo

    out = dict(settings)
    if isinstance(out.get("base_url"), str):
        out["base_url"] = without_userinfo(out["base_url"])
    return out


def run_compare(config: CompareConfig) -> list[ResultRow]:
    """Check everything, run the sweep (skipping finished runs, resuming started ones) and write the comparison
    files; return the result rows. A Ctrl-C still writes the files (unfinished runs as ``interrupted``), then
    re-raises."""
    from ..config import TrainConfig
    from ..envs import get_spec

    c = config
    settings = c.run_settings
    spec = get_spec(c.env_id)
    cfg = TrainConfig.build((settings, "compare settings"), ({"env_id": c.env_id}, "compare"))
    sweep = {k: v for k, v in experiment(resolved(cfg)).items() if k not in ("backend", "seed")}
    out = Path(c.out).resolve()
    tasks = plan(c.env_id, c.backends, c.seeds, out, settings)
    if out.is_dir():  # a sweep writing the folder now refuses this one at once, before any check or run is built
        with FolderLock(out, "the comparison folder"):
            pass
    check_same_sweep(out, sweep, tasks, survey(tasks))
    preflight(tasks)
    check_reachable(c.executor)

    # Everything is checked: from here on, files are written.
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder or one above it should be, or no permission
        raise UserError(f"cannot create the comparison folder {out}: {exc.strerror}; choose --out") from None
    with FolderLock(out, "the comparison folder"):  # one compare writes it at a time
        found = survey(tasks)  # as the last writer left them
        limits: dict[str, Any] = {"max_concurrent": c.max_concurrent_calls, "rpm": c.rpm, "budget_usd": c.budget_usd,
                                  "spent_usd": sum(committed_cost(t, found[t.run_id]) for t in tasks)}
        record = SweepRecord(
            version=__version__, env_id=c.env_id, backends=list(c.backends), seeds=list(c.seeds),
            seeds_text=c.seeds_text or ",".join(map(str, c.seeds)), iterations=cfg.iterations,
            settings={**_public(settings), "heldout_episodes": cfg.heldout_episodes}, experiment=sweep,
            executor=c.executor, workers=c.workers, command=c.command, reward_threshold=spec.reward_threshold,
            limits={"max_concurrent_calls": c.max_concurrent_calls, "rpm": c.rpm, "budget_usd": c.budget_usd},
            started=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        record.write(out)
        results: dict[tuple[str, int], TaskResult] = {}
        display = _Display(len(tasks), f"compare {c.env_id}", c.progress)
        todo: list[RunTask] = []
        for t in tasks:
            f = found[t.run_id]
            if f.state == "finished" and f.summary is not None:
                results[(t.backend, t.seed)] = result_from_summary(t, f.summary)
                display.done(t, results[(t.backend, t.seed)].row, " (finished earlier, skipped)")
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

        def on_done(t: RunTask, res: TaskResult) -> None:
            results[(t.backend, t.seed)] = res
            display.done(t, res.row, " (resumed)" if t.run_id in resumed else "")

        t0 = time.perf_counter()
        stopped: KeyboardInterrupt | None = None
        try:
            record.limits = execute(c.executor, todo, c.workers, on_done, limits, note)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
            stopped = exc
        finally:
            display.close()
        rows, stopped = close_sweep(out, record, tasks, results, cfg, t0, stopped)
        if stopped is not None:
            raise SweepInterrupted(str(out), sum(r.ok for r in rows), len(rows), c.command, signal_of(stopped))
        return rows


# ---------------------------------------------------------------------------------------------------- CLI
#: Settings of every run that ``compare`` takes as options (``--max-steps``, ``--max-episodes``): equal interaction.
_BUDGETS = ("max_steps", "max_episodes")


def add_parser(subparsers: Any) -> None:
    """Register ``compare`` on the CLI's subparsers."""
    from ..config import options
    from .train import _add_setting

    p = subparsers.add_parser(
        "compare", help="run backends x seeds through the loop; results table and curves",
        description="Run every (backend, seed) pair, each in its own run directory, and write results.csv, "
        "results.md and curves.png. Every argument (keys included) is checked before the first run. Re-running "
        "the same command skips finished runs and resumes interrupted ones; other settings under the same --out "
        "are refused. Exit 1 when some run failed.")
    p.add_argument("--env", dest="env_id", required=True, help="gymnasium id (see `envs`)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--methods", help="comma-separated method entries [LABEL=]BACKEND[@MODE][[KEY=VALUE;...]] or "
                       "[LABEL=]@MODE[[...]]: a label names the method in tables and its run directories, the "
                       "options are settings of that method only, e.g. offline,@q-learning,"
                       "smol=llamacpp:/m/SmolLM2.gguf,onehot=@lm-policy[lm_features=onehot]")
    which.add_argument("--backends", help="the old spelling of --methods (BACKEND or BACKEND@MODE entries, e.g. "
                       "offline,q-learning,random,openai:gpt-4.1-mini); takes the same entries")
    p.add_argument("--seeds", default="0-4", help="seed range A-B or list 0,1,2 (default 0-4)")
    p.add_argument("--iterations", type=int, help="proposal rounds per run (default 30)")
    p.add_argument("--heldout-episodes", type=int,
                   help="held-out episodes that measure each run's kept table (as train's; default 100)")
    for name in _BUDGETS:  # declared once, on the setting: train's flag, help and parsing
        _add_setting(p, options()[name])
    p.add_argument("--workers", type=int,
                   help="parallel runs (local default 1; a local Ray instance: its CPUs, default all)")
    p.add_argument("--executor", choices=list(EXECUTORS), default="local",
                   help="local (default) or ray (joins RAY_ADDRESS, else starts a local instance)")
    p.add_argument("--config", help="TOML file with train settings applied to every run")
    p.add_argument("--out", help="comparison directory (default logs/compare/<env-id>)")
    add_limit_options(p, "the sweep's")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=_cmd_compare)


def add_limit_options(p: Any, whose: str) -> None:
    """The sweep's shared provider limits and spending ceiling (``compare``'s and ``bench``'s)."""
    p.add_argument("--max-concurrent-calls", type=int, default=DEFAULT_MAX_CONCURRENT_CALLS,
                   help=f"calls in flight at once per provider, over all runs (default {DEFAULT_MAX_CONCURRENT_CALLS})")
    p.add_argument("--rpm", type=float, help="call starts per minute per provider, over all runs (default: no limit)")
    p.add_argument("--budget-usd", type=float,
                   help=f"{whose} spending ceiling: no call starts once it could pass it; runs end cleanly")


def _command(args: argparse.Namespace, backends: list[str]) -> str:
    """The command line as the files quote it (a password in a value redacted)."""
    from ..clients.keys import redact

    flag = "--methods" if args.methods is not None else "--backends"
    command = (f"llm-policy-gen compare --env {args.env_id} {flag} {shlex.quote(','.join(backends))} "
               f"--seeds {args.seeds}")
    for flag, value in (("--iterations", args.iterations), ("--heldout-episodes", args.heldout_episodes),
                        ("--max-steps", args.max_steps), ("--max-episodes", args.max_episodes),
                        ("--workers", args.workers),
                        ("--config", args.config), ("--out", args.out), ("--rpm", args.rpm),
                        ("--budget-usd", args.budget_usd)):
        if value is not None:
            command += f" {flag} {redact(str(value))}"
    if args.max_concurrent_calls != DEFAULT_MAX_CONCURRENT_CALLS:
        command += f" --max-concurrent-calls {args.max_concurrent_calls}"
    if args.executor != "local":
        command += f" --executor {args.executor}"
    return command


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..clients.keys import load_env_noted, remember_url
    from ..config import TrainConfig
    from ..run.files import load_settings
    from ..sweep.interaction import unequal_interaction
    from ..sweep.plan import parse_backends, parse_seeds

    load_env_noted()
    seeds = parse_seeds(args.seeds)
    backends = parse_backends(*((args.methods, "--methods") if args.methods is not None else
                                (args.backends, "--backends")))
    settings: dict[str, Any] = load_settings(args.config) if args.config else {}
    for fixed in ("env_id", "backend", "seed", "logs_dir", "run_id"):
        settings.pop(fixed, None)
    remember_url(settings.get("base_url") if isinstance(settings.get("base_url"), str) else None)
    cli: dict[str, Any] = {k: v for k, v in (("iterations", args.iterations),
                                             ("heldout_episodes", args.heldout_episodes),
                                             *((name, getattr(args, name)) for name in _BUDGETS)) if v is not None}
    TrainConfig.build((settings, f"config file {args.config}"), (cli, "command line"))  # every setting, checked now
    settings.update(cli)
    out = Path(args.out) if args.out else Path("logs") / "compare" / slug(args.env_id)
    rows = run_compare(CompareConfig(
        env_id=args.env_id, backends=backends, seeds=seeds, out=out, settings=settings, executor=args.executor,
        workers=args.workers, progress=not args.no_progress, command=_command(args, backends), seeds_text=args.seeds,
        max_concurrent_calls=args.max_concurrent_calls, rpm=args.rpm, budget_usd=args.budget_usd))
    print(printable((out / "results.md").read_text(encoding="utf-8"), lines=True))
    for line in take_notes():  # an old key of the config file: it worked, and says so once (a refusal: one line)
        print(line, file=sys.stderr)
    print(f"comparison directory: {out}")
    unequal = unequal_interaction(rows, backends, settings)
    if unequal:
        print(printable(f"warning: {unequal}"), file=sys.stderr)
    failed = [r for r in rows if not r.ok]
    if failed:
        print(f"{len(failed)} of {plural(len(rows), 'run')} failed (see results.md)", file=sys.stderr)
        return 1
    return 0
