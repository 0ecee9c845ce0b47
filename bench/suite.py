"""The goal table of issue 20 (:mod:`suite_goals`), measured: offline, q-learning and random on the standard tasks,
seeds 0-9 (0-4 for the three long tasks).

    python bench/suite.py [--tasks cartpole,taxi,...] [--backends offline,q-learning,random,offline-neutral]
                          [--seeds 0-9]
                          [--workers N] [--out ~/llm-policy-gen-bench/suite] [--list]
    python bench/suite.py --out OUT --merge OTHER   # move OTHER's finished runs into OUT (a part run elsewhere)
    python bench/suite.py --out OUT --report NOTE   # only rewrite suite.md and its figures from OUT's results

Every (task, backend, seed) is one ``train`` run with ``--max-episodes`` at the task's budget (and the spec's own
training defaults: answer format, candidates, test seeds), in its own run directory under ``OUT/runs``; a run whose
``summary.json`` exists is not run again and one with only a checkpoint is resumed, so an interrupted suite continues
where it stopped. Runs go to ``--workers``
processes (each run in one process: ``LLM_POLICY_GEN_WORKERS=1``), which is where parallelism pays on a small
machine: the episodes of one run are short batches, whole runs are independent.

``OUT`` defaults to a folder outside the work tree (``~/llm-policy-gen-bench/suite``), so that the suite, longer
than a session, goes on across sessions and work trees.

Written to ``OUT``: ``results.json`` (one record per run, with its episodes, environment steps and curve) and
``suite.md`` (:mod:`suite_report`): per task and backend rliable's interquartile mean over seeds of the final
held-out mean (100 episodes) and of the normalised score, each with its 95% stratified bootstrap interval, the worst
seed and the count of seeds that meet the goal, the median within the budget (as of the last iteration that ended
within it: the run may pass the budget in its last iteration, by at most one iteration's episodes), the episodes and
steps used, wall and CPU seconds, the goal and anchor numbers, and beside ``offline`` the spec's prior scored with
zero episodes and the ``offline-neutral`` ablation; then every method per task. ``bench/peers.py`` adds its methods
(Stable-Baselines3's PPO, DQN, SAC with the zoo's hyperparameters) through :func:`write_report`, which keeps them
(``report.json``) when the suite rewrites ``suite.md``. Beside it: ``curves.csv``, ``img/curves_TASK.png``,
``img/profiles.png``, ``profiles.csv`` (:mod:`suite_curves`), ``random_policy.json`` and ``priors.json``
(:mod:`suite_scores`).

``OUT``'s top-level files are the record; ``OUT/runs`` is needed only to resume or to replay a run. A run's record
keeps its curve, so ``--report`` redraws every figure from the top-level files alone: copy them (not ``runs/``)
somewhere that outlives the machine. ``bench/data/`` in the repository holds the copies the docs' figures come from
(a suite folder is lost with the machine it ran on; the machine of 2026-11-27 took the first fourteen tasks' records
with it, and their figures in the docs are from its last report).

``--backends`` also takes ``offline-neutral``: ``offline`` with ``--prior neutral`` (issue 32 item 4), and
``offline-from-prior``: ``offline`` with ``--prior start`` (the kept table starts at the prior rule's table).

Runs of tables over 100,000 states lose their per-iteration policy files afterwards (``policies/iter_*.json``, several
MB each, one per iteration; ``--keep-policies`` keeps them); ``best_policy.json`` stays.

Not a test: it prints figures. The big tasks take long (Hopper rich and BipedalWalker rich: 10,000 episodes per run).
The ``random`` search is not run on tables of more than ``--baseline-max-states`` states: a random table of 65,536
states is about 1.4 MB of answer text per candidate, written to the transcript every iteration. ``q-learning`` (the
standard learner: it writes no answers) runs on every task.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import sys
import time
from collections.abc import Iterable
from concurrent.futures import as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_args import out_dir, read_json, run_main, workers_ok
from bench_pool import worker_pool
from suite_goals import BY_KEY, GOALS, Goal, fmt, list_tasks, meets, tasks_and_seeds
from suite_peers import PeerCell, offline_budget, stale

DEFAULT_OUT = Path.home() / "llm-policy-gen-bench" / "suite"
"""Outside the work tree: the suite is longer than a session and resumes from here."""


BACKENDS = ("offline", "q-learning", "random")
ABLATIONS: dict[str, tuple[str, tuple[tuple[str, Any], ...]]] = {
    "offline-neutral": ("offline", (("prior", "neutral"),)),
    "offline-from-prior": ("offline", (("prior", "start"),)),
}
"""Suite backends that are another backend with settings: ``offline-neutral`` is ``offline`` from the neutral prior
(no prior rule, every state at the spec's default action; issue 32 item 4); ``offline-from-prior`` is ``offline``
whose kept table starts at the prior rule's table (``--prior start``: the prior is the run's floor). On a spec
without a prior the settings change nothing, and the run is the plain backend's own (the same run id, never run
twice)."""
SUITE_BACKENDS = (*BACKENDS, *ABLATIONS)


def backend_settings(goal: Goal, backend: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The backend a suite backend runs and the settings it adds to the task's (none that change nothing)."""
    base, extra = ABLATIONS.get(backend, (backend, ()))
    if extra and dict(extra).get("prior") in ("neutral", "start"):
        from llm_policy_gen.envs import get_spec

        if get_spec(goal.env_id).prior is None:
            extra = ()
    return base, extra


def too_big(goal: Goal, backend: str, n_states: int, max_states: int) -> str | None:
    """Why the suite backend is not run on the task's table (None: it is run): a proposer other than ``offline``
    whose answers are whole tables (``random``), on more than ``max_states`` states. A learner (``q-learning``) writes
    no answers and runs on every table."""
    from llm_policy_gen.backends import learner_mode

    base = backend_settings(goal, backend)[0]
    if base == "offline" or learner_mode(base) is not None or n_states <= max_states:
        return None
    return f"{n_states:,} states (text answers too big; --baseline-max-states {max_states})"


PRUNE_ABOVE = 100_000
"""Tables with more states than this lose their per-iteration policy files after the run (several MB each, one
per iteration); ``best_policy.json`` stays, so ``evaluate`` and the summary are unchanged."""


def _n_states(run_dir: Path) -> int:
    return int(json.loads((run_dir / "best_policy.json").read_text())["n_states"])


def _run_id(goal: Goal, backend: str, seed: int) -> str:
    """A changed budget or changed settings make a new run (the settings by a digest of them)."""
    from llm_policy_gen.backends import learner_mode

    base, extra = backend_settings(goal, backend)
    run_id = f"{goal.key}_b{goal.budget}_{backend if extra else base}_s{seed}"
    if learner_mode(base):  # the standard learner: never a reused run of the proposer that had its name before
        run_id += "_learner"
    if goal.settings:
        run_id += "_" + hashlib.sha256(json.dumps(sorted(goal.settings)).encode()).hexdigest()[:6]
    return run_id


_TAKEN = re.compile(r"-(\d+)$")
"""The suffix ``train`` gives a run folder whose id's folder is taken (``RUN_ID-2``, ...)."""


def run_id_of(folder: Path | str) -> str:
    """The run id a run folder was made for: its name less the ``-K`` that ``train`` adds when the id's folder is
    taken (until 2026-12-02 the suite trained a run again beside a folder that a kill had left before its first
    checkpoint, instead of resuming it)."""
    return _TAKEN.sub("", Path(folder).name)


def run_folders(logs: Path, run_id: str) -> list[Path]:
    """Every folder of ``run_id`` under ``logs/ENV/``, in the order ``train`` made them: ``RUN_ID``, ``RUN_ID-2``,
    ..."""
    found = [p for p in logs.glob(f"*/{run_id}*") if run_id_of(p) == run_id]
    return sorted(found, key=lambda p: int(m.group(1)) if (m := _TAKEN.search(p.name)) else 1)


def run_one(goal: Goal, backend: str, seed: int, out: Path, keep_policies: bool = False) -> dict[str, Any]:
    """One run (in a worker process); returns its record. Reuses a finished run's summary."""
    os.environ["LLM_POLICY_GEN_WORKERS"] = "1"
    from suite_curves import curve_of

    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import resume, train
    from llm_policy_gen.storage.runlog import read_jsonl

    run_id = _run_id(goal, backend, seed)
    logs = out / "runs"
    record: dict[str, Any] = {"task": goal.key, "env_id": goal.env_id, "backend": backend, "seed": seed,
                              "budget": goal.budget, "settings": dict(goal.settings)}
    folders = run_folders(logs, run_id)
    existing = [p for p in folders if (p / "summary.json").is_file()]
    # every published run folder has its config.json: resuming one that did not finish goes on from its last
    # checkpoint, or starts the run over in that folder when a kill came before the first (a new train would make
    # RUN_ID-2 beside it)
    partial = [p for p in folders if p not in existing and (p / "config.json").is_file()]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    if existing:
        run_dir = existing[0]
        summary = json.loads((run_dir / "summary.json").read_text())
        record["reused"] = True
    elif partial:  # an interrupted suite: the same result as an uninterrupted run
        try:
            result = resume(partial[-1], {}, log=lambda _m: None)  # the latest
        except Exception as exc:
            return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
        run_dir, summary = result.run_dir, result.summary
        record["resumed"] = True
    else:
        base, extra = backend_settings(goal, backend)
        cfg = TrainConfig.build(({"env_id": goal.env_id, "backend": base, "seed": seed,
                                  "max_episodes": goal.budget, "iterations": 100_000, "logs_dir": str(logs),
                                  "run_id": run_id, "progress": False, "quiet": True, "plots": False,
                                  **dict(goal.settings), **dict(extra)}, "suite"))
        try:
            result = train(cfg, log=lambda _m: None)
        except Exception as exc:  # a failed run is a row with its error
            return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
        run_dir, summary = result.run_dir, result.summary
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if not keep_policies and _n_states(run_dir) > PRUNE_ABOVE:
        pruned = list((run_dir / "policies").glob("iter_*.json"))
        for f in pruned:
            f.unlink()
        record["pruned_policies"] = len(pruned)
    events = read_jsonl(run_dir / "events.jsonl")
    within = [e for e in events if e["episodes_total"] <= goal.budget]
    record.update(
        run_dir=str(run_dir), heldout=summary["best_eval_mean"], episodes=summary["episodes_total"],
        env_steps_total=summary.get("env_steps_total"),
        iterations=summary["iterations"], wall_s=summary["wall_s"],
        cpu_s=None if existing or partial else round(usage.ru_utime + usage.ru_stime - cpu0, 1),
        heldout_within=within[-1]["best_eval_mean"] if within else None,
        episodes_within=within[-1]["episodes_total"] if within else 0,
        reached_at=next((e["episodes_total"] for e in events if meets(goal, e.get("best_eval_mean"))), None),
        stop=summary["stop_reason"], output_format=json.loads((run_dir / "config.json").read_text()).get(
            "output_format"), curve=curve_of(events))
    return record


def read_results(out: Path) -> list[dict[str, Any]]:
    """The suite's records in ``OUT/results.json`` (none yet: empty)."""
    f = out / "results.json"
    return list(read_json(f, []))


def record_key(record: dict[str, Any]) -> tuple[str, str, int]:
    """A suite record's identity: its task, backend and seed."""
    return (record["task"], record["backend"], record["seed"])


def write_results(out: Path, records: Iterable[dict[str, Any]]) -> None:
    """Put ``records`` into ``OUT/results.json``, replacing the ones with the same task, backend and seed and keeping
    every other: the file is re-read under a lock and replaced atomically (:mod:`results_file`), so two invocations on
    one ``--out`` (another task beside a long queue) keep each other's records, and a reader beside it (``--report``)
    never sees half a file. Sorted by task, backend and seed."""
    import results_file

    results_file.merge_save(out / "results.json", records, key=record_key, order=record_key)


def write_report(out: Path, note: str | None = None, peers: list[PeerCell] | None = None) -> Path:
    """Write ``OUT/suite.md`` (and the README's lines, ``OUT/readme.md``) from ``results.json`` and the peers'
    ``peers.json``, with the curve data (``curves.csv``), a figure per task and the performance profiles
    (``img/``, ``profiles.csv``): :mod:`suite_report`, :mod:`suite_curves`. The note and the peer columns given are
    kept in ``OUT/report.json``; one not given is taken from there, so the suite and ``bench/peers.py`` each
    rewrite the page without dropping the other's part. The uniform random policy's and the prior's held-out
    means are measured for the seeds that have runs and kept (:mod:`suite_scores`)."""
    import numpy as np
    import suite_curves
    import suite_lines
    import suite_report
    import suite_scores

    kept_file = out / "report.json"
    kept = read_json(kept_file, {})
    if note is None:
        note = str(kept.get("note", ""))
    if peers is None:
        peers = [PeerCell.from_dict(c) for c in kept.get("peers", [])]
    records = sorted(read_results(out), key=lambda r: (r["task"], r["seed"]))
    peer_file = out / "peers.json"
    peer_records = read_json(peer_file, [])
    if peer_records:  # the peer columns from peers.json, without the cells of a re-judged offline run
        import peers as peers_module

        peer_records = [r for r in peer_records if not stale(r, r.get("kind", "episodes"),
                                                             offline_budget(records, r["task"], r["seed"]))]
        peers = peers_module.cells(peer_records)
    kept_file.write_text(json.dumps({"note": note, "peers": [asdict(c) for c in peers]}, indent=1))
    runs = [r for r in suite_curves.suite_runs(records) + suite_curves.peer_runs(peer_records) if r.task in BY_KEY]
    seeds = {t: sorted({r.seed for r in runs if r.task == t}) for t in dict.fromkeys(r.task for r in runs)}
    wanted = [(t, BY_KEY[t].env_id, s) for t, ss in seeds.items() for s in ss]
    random = suite_scores.random_policy(out, wanted)
    priors = suite_scores.priors(out, wanted)
    runs += suite_curves.prior_runs(priors, seeds)
    suite_curves.write_csv(out / "curves.csv", runs)
    figures: dict[str, str] = {}
    for goal in GOALS:
        mine = [r for r in runs if r.task == goal.key]
        if mine:
            rs = random.get(goal.key, {})
            suite_curves.task_figure(out / "img" / f"curves_{goal.key}.png", goal.env_id, mine, goal.goal,
                                     float(np.mean([rs[s] for s in seeds[goal.key] if s in rs])) if rs else None)
            figures[goal.env_id] = f"img/curves_{goal.key}.png"
    scores = {}
    for r in runs:
        got = suite_report.norm_scores(r.task, [(r.seed, r.final)], random)
        if got:
            scores[(r.task, r.method, r.seed)] = got[0]
    found = suite_curves.profiles(runs, scores, np.linspace(-0.25, 1.25, 61))
    if found:
        suite_curves.profile_figure(out / "img" / "profiles.png", found)
        suite_curves.write_profiles_csv(out / "profiles.csv", found)
        figures["performance profiles (normalised score, all tasks)"] = "img/profiles.png"
    page = out / "suite.md"
    page.write_text(suite_report.markdown(records, note, peers, runs, random, priors, figures))
    (out / "readme.md").write_text(suite_lines.readme_lines(records, peers, random))
    return page


def merge(out: Path, other: Path) -> int:
    """Move the finished runs of the suite folder ``other`` (a part run elsewhere, or beside a running suite) into
    ``out``: their run folders and records, a record of ``other`` replacing ``out``'s for the same task, backend and
    seed unless ``out`` holds that very run folder already (``results.json`` merged under its lock, so a suite
    writing ``out`` meanwhile keeps its records). Returns how many were merged. Unfinished runs stay in ``other``."""
    import shutil

    moved = []
    # folders this merge moved: two records can share one (offline-neutral is the offline run on a spec without prior)
    gone: set[Path] = set()
    for r in read_results(other):
        if "heldout" not in r:  # failed or skipped: nothing to carry over
            continue
        src = Path(r["run_dir"])
        dest = out / "runs" / src.parent.name / src.name
        if src not in gone:
            if dest.is_dir() or not src.is_dir():  # the same run in both: out's stays (a run id fixes its result)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(src), str(dest))
            gone.add(src)
        moved.append({**r, "run_dir": str(dest)})
    out.mkdir(parents=True, exist_ok=True)
    write_results(out, moved)
    return len(moved)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(BY_KEY), help="comma-separated task keys (see --list)")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--seeds", default=None, help="e.g. 0-2; default: each task's own (0-9, or 0-4 for the long ones)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="results folder (default outside the work tree)")
    ap.add_argument("--baseline-max-states", type=int, default=5000,
                    help="run the random search only on tables up to this many states (q-learning runs on all)")
    ap.add_argument("--keep-policies", action="store_true",
                    help=f"keep the per-iteration policy files of tables over {PRUNE_ABOVE:,} states")
    ap.add_argument("--list", action="store_true", help="list the tasks and exit")
    ap.add_argument("--report", metavar="NOTE", help="only rewrite suite.md, its curves and figures from --out's "
                    "results.json and peers.json, with this note (runs nothing; safe beside a running suite)")
    ap.add_argument("--merge", metavar="FOLDER", help="move the finished runs of another suite folder into --out, "
                    "rewrite the report and exit (a part run elsewhere, or beside a suite that writes --out)")
    args = ap.parse_args(argv)
    if args.list:
        list_tasks()
        return 0
    out = out_dir("suite", args.out)
    if out is None or not workers_ok("suite", args.workers):
        return 2
    from llm_policy_gen.backends import parse_backend_spec
    from llm_policy_gen.errors import UserError

    try:  # the suite's ablations, or any backend the package knows (a model backend too)
        for backend in args.backends.split(","):
            parse_backend_spec(ABLATIONS.get(backend, (backend, ()))[0])
    except UserError as exc:
        print(f"suite: --backends: {exc}", file=sys.stderr)
        return 2
    if args.merge:
        other = Path(args.merge).expanduser()
        if not (other / "results.json").is_file():
            print(f"suite: error: --merge {other}: no results.json there", file=sys.stderr)
            return 2
        n = merge(out, other)
        report = out / "report.json"
        if args.report is not None:  # --merge with --report: the note given, not the last report's
            note = args.report
        else:
            note = read_json(report, {}).get("note", "")
            note = f"{note} Runs merged from {other}.".strip()
        print(f"merged {n} runs of {other}; wrote {write_report(out, note)}")
        return 0
    if args.report is not None:
        if not (out / "results.json").is_file():
            print(f"suite: error: --out {out}: no results.json there", file=sys.stderr)
            return 2
        print(f"wrote {write_report(out, args.report)}")
        return 0
    parsed = tasks_and_seeds("suite", args.tasks, args.seeds or "0")
    if parsed is None:
        return 2
    tasks, given_seeds = parsed
    from llm_policy_gen.envs import get_spec

    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    records = {record_key(r): r for r in read_results(out)}
    mine: dict[tuple[str, str, int], dict[str, Any]] = {}  # what this invocation writes: another may write beside it
    jobs: list[tuple[Goal, str, int]] = []
    for key in tasks:
        goal = BY_KEY[key]
        n_states = get_spec(goal.env_id).n_states
        for backend in args.backends.split(","):
            why = too_big(goal, backend, n_states, args.baseline_max_states)
            for seed in (given_seeds if args.seeds else goal.seeds):
                if why is not None:
                    mine[(key, backend, seed)] = {"task": key, "env_id": goal.env_id, "backend": backend,
                                                  "seed": seed, "skipped": why}
                    continue
                done = records.get((key, backend, seed))
                if done is None or "error" in done or "skipped" in done or done.get("budget") != goal.budget \
                        or done.get("settings", {}) != dict(goal.settings):
                    jobs.append((goal, backend, seed))
    # The longest runs first, so that the pool's last minutes are not one big run alone.
    jobs.sort(key=lambda j: -j[0].budget)
    started = time.time()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with worker_pool(args.workers) as pool:
        futures = {pool.submit(run_one, g, b, s, out, args.keep_policies): (g.key, b, s) for g, b, s in jobs}
        for fut in as_completed(futures):
            job = futures[fut]
            rec = fut.result()
            mine[job] = rec
            shown = rec.get("error") or f"held-out {fmt(rec['heldout'])} after {rec['episodes']} episodes, " \
                                         f"{rec['wall_s']:.0f} s"
            print(f"{job[0]} {job[1]} seed {job[2]}: {shown}", flush=True)
            write_results(out, [rec])
    write_results(out, mine.values())  # the skipped ones too, when nothing ran
    note = (f"Measured on {os.cpu_count()} cores shared with other work (load average {load:.1f} at the start), "
            f"{args.workers} runs at a time; wall seconds are inflated by the sharing, CPU seconds much less. "
            f"This invocation took {time.time() - started:,.0f} s.")
    print(f"wrote {write_report(out, note)} and {results_file}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main("suite", main))
