"""``llm-policy-gen bench SUITE``: a suite's cells (task x method x seed) run through the sweep, resumably, then its
tables.

::

    llm-policy-gen bench goals [--tasks cartpole,...] [--methods offline,gemini:MODEL,...] [--seeds 0-9] \\
        [--out bench-out/goals] [--workers N] [--executor local|ray] [--publish] [--publish-from OUT] [--list] \\
        [--budget-usd X] [--max-concurrent-calls N] [--rpm N] [--no-progress]

SUITE is a shipped suite (``goals``) or a suite TOML file (:mod:`llm_policy_gen.suites.definition`). Each cell's run
goes where ``compare --out OUT/<task key>`` puts it; each finished cell's record is appended to
``OUT/records.jsonl`` as it finishes (``--publish``: to the suite's committed store too; ``--publish-from OUT``
runs nothing and publishes a finished folder's records, :mod:`llm_policy_gen.suites.publish`). A cell with a record
is done; a finished run on disk is recorded without running (adopted); a started, interrupted or failed run is
resumed. Before the first run, the plan and the projected interaction, time, calls, tokens and cost are printed;
``--list`` prints the plan and runs nothing. Exit codes: 0 when every cell to run was recorded, 1 when some run
failed, 2 for bad input, 130/143/129 when stopped (every record made is kept; the same command goes on).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loggers.console import plural, printable
from ..sweep.executors import EXECUTORS, check_executor
from ..sweep.limits import DEFAULT_MAX_CONCURRENT_CALLS
from .compare import _check_number, add_limit_options

__all__ = ["add_parser", "plan_lines", "group_lines", "projection_lines"]

_WORDS = {"recorded": "recorded", "finished": "finished on disk (adopted, not run)",
          "resumable": "resumable (resumed from its checkpoint)", "run": "to run", "waiting": "waiting",
          "skipped": "not run"}


def add_parser(subparsers: Any) -> None:
    """Register ``bench`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "bench", help="run a suite's cells (task x method x seed) resumably; its tables",
        description="Run a suite's cells through the sweep: every finished cell is recorded in OUT/records.jsonl as "
        "it finishes; cells already recorded (the committed store or OUT) are done, finished runs on disk are "
        "adopted, started ones resumed. The plan and the projected cost are printed before the first run.")
    p.add_argument("suite", help="a shipped suite (goals) or a suite TOML file")
    p.add_argument("--tasks", help="comma-separated task keys of the suite (default: all)")
    p.add_argument("--methods", help="comma-separated suite labels and/or method entries in compare's grammar "
                   "(a new entry gets the task's episode budget), e.g. offline,ppo,gemini:gemini-2.5-flash")
    p.add_argument("--seeds", help="seed range A-B or list 0,1,2 for every task (default: each task's own)")
    p.add_argument("--out", help="the bench folder (default bench-out/SUITE)")
    p.add_argument("--publish", action="store_true",
                   help="append each new record to the suite's committed store too (what the project commits)")
    p.add_argument("--publish-from", metavar="OUT",
                   help="run nothing: append the records of bench folder OUT (of --tasks, --methods, --seeds) that "
                   "the suite's committed store lacks, and their random-policy references")
    p.add_argument("--list", action="store_true", help="print the plan and the projection; run nothing")
    p.add_argument("--workers", type=int, help="parallel runs (local default 1)")
    p.add_argument("--executor", choices=list(EXECUTORS), default="local", help="local (default) or ray")
    add_limit_options(p, "the whole suite's")
    p.add_argument("--no-progress", action="store_true", help="no line per finished cell")
    p.set_defaults(func=_cmd_bench)


def _command(args: argparse.Namespace) -> str:
    """The command line as the records quote it (a password in a value redacted)."""
    from ..clients.keys import redact

    command = f"llm-policy-gen bench {shlex.quote(args.suite)}"
    for flag, value in (("--tasks", args.tasks), ("--methods", args.methods), ("--seeds", args.seeds),
                        ("--out", args.out), ("--workers", args.workers), ("--rpm", args.rpm),
                        ("--budget-usd", args.budget_usd)):
        if value is not None:
            command += f" {flag} {shlex.quote(redact(str(value)))}"
    if args.executor != "local":
        command += f" --executor {args.executor}"
    if args.max_concurrent_calls != DEFAULT_MAX_CONCURRENT_CALLS:
        command += f" --max-concurrent-calls {args.max_concurrent_calls}"
    return command + (" --publish" if args.publish else "")


def plan_lines(plan: Any, projections: dict[str, Any]) -> list[str]:
    """The plan: a head line with the count of each state, then one line per cell."""
    from ..suites.cells import counts

    n = counts(plan.cells)
    head = (f"suite {plan.config.suite.name}: {plural(len(plan.cells), 'cell')}: "
            + ", ".join(f"{n[s]} {_WORDS[s]}" for s in n))
    lines = [head]
    for c in plan.cells:
        what = _WORDS[c.state]
        if c.state == "recorded" and c.record is not None:
            v = c.record.heldout
            what += f" (held-out {'n/a' if v is None else f'{v:.2f}'}, code {c.record.code or '?'})"
        elif c.state in ("waiting", "skipped"):
            what += f": {c.why}"
        else:
            what += f": {projections[c.name].text()}" if c.name in projections else ""
        lines.append(f"  {c.name}: {what}")
    return lines


def group_lines(cells: Sequence[Any], projections: dict[str, Any]) -> list[str]:
    """One line per (task, method) with cells to run: how many, and one cell's projection (``--list`` has each)."""
    groups: dict[str, list[Any]] = {}
    for c in cells:
        if c.state in ("resumable", "run"):
            groups.setdefault(f"{c.task.key}/{c.method.label}", []).append(c)
    return [f"  {name}: {plural(len(group), 'cell')} to run (seeds {','.join(str(c.seed) for c in group)}), each "
            f"{projections[group[0].name].text()}" for name, group in groups.items() if group[0].name in projections]


def projection_lines(totals: dict[str, Any], budget_usd: float | None, spent: float) -> list[str]:
    """The projection of the cells to run, and what it means for ``--budget-usd``."""
    if not totals["cells"]:
        return ["nothing to run"]
    parts = [plural(totals["cells"], "cell")]
    for key, word in (("episodes", "episodes"), ("steps", "steps")):
        if totals[key] is not None:
            parts.append(f"{int(totals[key]):,} {word}")
    if totals["wall_s"] is not None:
        parts.append(f"~{totals['wall_s']:,.0f} s wall where a record of the method on the task exists")
    lines = ["projected for the cells to run: " + ", ".join(parts)]
    if totals["calls"]:
        cost = totals["cost_usd"]
        price = "no price" if cost is None else f"${cost:.4f}"
        if totals["unpriced"] and cost is not None:
            price += f" + {plural(totals['unpriced'], 'unpriced cell')}"
        bound = " (at most, where no record of the method says how many iterations it takes)" \
            if totals["bounded"] else ""
        lines.append(f"projected model use: {int(totals['calls']):,} calls, {int(totals['tokens_in'] or 0):,} tokens "
                     f"in, {int(totals['tokens_out'] or 0):,} tokens out, {price}{bound}")
        if budget_usd is not None:
            left = budget_usd - spent
            if cost is not None and cost > left:
                lines.append(f"the projected ${cost:.4f} is over --budget-usd {budget_usd:g} (${max(left, 0):.4f} "
                             "left): no call starts once it could pass it; those runs end with stop_reason \"budget "
                             "reached\"")
            else:
                lines.append(f"--budget-usd {budget_usd:g}: ${max(left, 0):.4f} left for the whole suite")
    return lines


def _cmd_bench(args: argparse.Namespace) -> int:
    from ..clients.keys import load_env_noted
    from ..suites.cells import select
    from ..suites.definition import load_suite
    from ..suites.projection import project, total
    from ..suites.runner import BenchConfig, make_plan, run_plan, spent_so_far

    load_env_noted()
    check_executor(args.executor)
    _check_number("--workers", args.workers, "an integer >= 1", lambda v: v >= 1)
    _check_number("--max-concurrent-calls", args.max_concurrent_calls, "an integer >= 1", lambda v: v >= 1)
    _check_number("--rpm", args.rpm, "a number > 0", lambda v: v > 0)
    _check_number("--budget-usd", args.budget_usd, "a number >= 0", lambda v: v >= 0)
    suite = load_suite(args.suite)
    selection = select(suite, args.tasks, args.methods, args.seeds)
    if args.publish_from is not None:
        return _publish_from(args, suite, selection)
    out = Path(args.out) if args.out else Path("bench-out") / suite.name
    config = BenchConfig(suite=suite, source=args.suite, selection=selection, out=out, publish=args.publish,
                         executor=args.executor, workers=args.workers, progress=not args.no_progress,
                         command=_command(args), max_concurrent_calls=args.max_concurrent_calls, rpm=args.rpm,
                         budget_usd=args.budget_usd)
    plan = make_plan(config)
    todo = [c for c in plan.cells if c.state in ("resumable", "run", "waiting")]
    rates = []
    if suite.costs_from:  # a time per run from another shipped suite's records (a settings grid's first runs)
        from ..suites.runner import committed_store
        from ..suites.store import read_records

        rates = read_records(committed_store(suite.costs_from, load_suite(suite.costs_from)))
    projections = project(todo, plan.records(), rates)
    lines = projection_lines(total(projections), args.budget_usd, spent_so_far(plan, todo))
    if suite.choice is not None and suite.choice.stop and todo:
        lines.append(_least_line(plan, todo, projections))
    if args.list:
        print(printable("\n".join([*plan_lines(plan, projections), *lines, *_choices(plan)]), lines=True))
        return 0
    shown = plan_lines(plan, projections)
    _say([shown[0], *group_lines(plan.cells, projections),
          *(x for x in shown[1:] if ": not run" in x or ": waiting" in x), *lines])
    failed, tables = run_plan(plan, None if config.progress else (lambda s: None))
    for path in tables:
        print(f"table: {path}")
    print(f"bench folder: {plan.out} ({plural(len(plan.recorded), 'new record')})")
    for line in _choices(plan):
        print(printable(line))
    if failed:
        print(f"{plural(len(failed), 'cell')} ran and did not finish (not recorded; the same command resumes "
              "them)", file=sys.stderr)
        return 1
    return 0


def _publish_from(args: argparse.Namespace, suite: Any, selection: Any) -> int:
    from ..errors import UserError
    from ..suites.publish import publish_from
    from ..suites.runner import committed_store

    if args.publish or args.list or args.out:
        raise UserError("bad bench --publish-from: it runs nothing; drop --publish, --list and --out")
    store = committed_store(args.suite, suite)
    done = publish_from(Path(args.publish_from), store, suite, selection)
    print(f"published {plural(len(done.records), 'record')} from {args.publish_from} to {store} "
          f"({done.held} held already; {plural(done.references, 'random-policy mean')} measured)")
    return 0


def _least_line(plan: Any, todo: Sequence[Any], projections: dict[str, Any]) -> str:
    """What an adaptive grid needs at the least (:func:`~llm_policy_gen.suites.choice.least_cells`)."""
    from ..suites.choice import least_cells
    from ..suites.projection import total

    least = least_cells(plan.config.suite, todo, plan.records())
    sums = total({c.name: projections[c.name] for c in least})
    wall = "" if sums["wall_s"] is None else f", ~{sums['wall_s']:,.0f} s wall"
    return (f"the grid stops a change that can no longer beat the base: at least {plural(len(least), 'cell')} of "
            f"these (the base's, and each change's seeds until its first possible stop){wall}")


def _choices(plan: Any) -> list[str]:
    """A settings search's choice per task, from every record (none for a suite without a ``[choice]``)."""
    from ..suites.choice import choice_lines
    from ..suites.store import latest

    suite = plan.config.suite
    if suite.choice is None:
        return []
    return ["choice (the suite's rule, on its tuning seeds only):",
            *(f"  {line}" for line in choice_lines(suite, list(latest(plan.records()).values())))]


def _say(lines: Sequence[str]) -> None:
    print(printable("\n".join(lines), lines=True), file=sys.stderr, flush=True)
