#!/usr/bin/env python3
"""One-off: the goal table's records of the old bench scripts, carried into the suite's store (issue 61 item 3).

    python tools/import_bench_records.py [--data bench/data/suite] [--out llm_policy_gen/suites/data/goals]

Reads ``results.json`` (``bench/suite.py``: offline, offline-neutral, offline-from-prior, q-learning and random runs
with their settings, budget, episodes, steps, held-out means and curves) and ``peers.json`` (``bench/peers.py``: the
RL Baselines3 Zoo's tuned SB3 learners at the zoo's budget, at ``offline``'s counted steps or episodes) and writes
``records.jsonl`` (one :class:`~llm_policy_gen.suites.store.SuiteRecord` a line) with every record's cell key
computed from ``goals.toml`` as ``llm-policy-gen bench goals`` computes it, so the runner takes a matching record as
a finished cell. A record whose settings differ from its task's today (a task re-tuned since) keeps its own settings:
its key then names another cell, and the record is history. ``priors.json`` (the spec's prior scored with zero
episodes) and ``random_policy.json`` (the uniform random policy's held-out mean per seed: the normaliser) go to
``references.json`` beside it. Runs that were skipped (``random`` on tables over 5,000 states) carry no figure and
are left out. The output is the same on every run of the converter (no clock is read).

The old files are gone from the tree once imported (git keeps them: ``git show a173057:bench/data/suite/...``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_policy_gen.schema.aliases import settings_in  # noqa: E402
from llm_policy_gen.suites.cells import key_of, settings_of  # noqa: E402
from llm_policy_gen.suites.definition import (  # noqa: E402
    MethodSpec,  # noqa: E402
    Suite,
    Task,
    load_suite,
)
from llm_policy_gen.suites.references import REFERENCES, write_references  # noqa: E402
from llm_policy_gen.suites.store import RECORDS, SuiteRecord, read_records  # noqa: E402

TABLE_ENTRIES = {"offline-from-prior": "offline-from-prior=offline[prior=start]"}
"""Entries of the old suite's backends that goals.toml does not list."""
PEER_LABELS = {"zoo": "{algo}", "steps": "{algo}-at-offline", "episodes": "{algo}-at-offline-episodes"}
"""The label of a peer kind (the zoo's budget, offline's counted steps, offline's counted episodes)."""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _made(path: Path) -> str:
    """When the file's content was last committed (ISO UTC), the nearest the old files say of when a run ended."""
    return _git("log", "-1", "--date=iso-strict-local", "--format=%cd", "--", str(path.resolve()))


def _entry(suite: Suite, label: str, algo: str | None = None) -> str:
    for m in suite.methods:
        if m.label == label:
            return m.entry
    if algo is not None:
        return f"{label}=@peer[peer_algo={algo}]"
    return TABLE_ENTRIES[label]


def _settings(task: Task, own: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The settings a record is keyed with and whether they are the task's today."""
    mine = settings_in(own or {}, "a bench record")
    today = settings_in(task.settings, "goals.toml")
    return (dict(task.settings), True) if mine == today else (mine, False)


def _record(suite: Suite, task: Task, label: str, entry: str, seed: int, budget: dict[str, Any],
            settings: dict[str, Any], result: dict[str, Any], curve: list[Any], made: str, what: str,
            command: str) -> SuiteRecord:
    spec = next((m for m in suite.methods if m.label == label), None)
    if spec is None:  # a method the suite no longer lists: a peer (30 iterations, as the suite's) or a table method
        spec = MethodSpec(label, entry, iterations=30 if "@peer" in entry else 0)
    keyed = replace(task, settings=settings)
    settings = settings_of(keyed, spec, budget)
    return SuiteRecord(suite=suite.name, task=task.key, env_id=task.env_id, method=label, entry=entry, seed=seed,
                       cell=key_of(keyed, spec, seed, budget), budget=budget, settings=settings,
                       result=result, curve=[list(p) for p in curve], code="unknown", made=made,
                       source=f"imported: {what} (code unknown)", command=command)


def table_records(suite: Suite, path: Path) -> tuple[list[SuiteRecord], list[str]]:
    """The records of ``results.json``; and a line for each record kept with settings other than its task's."""
    made, out, notes = _made(path), [], []
    for r in json.loads(path.read_text(encoding="utf-8")):
        if "heldout" not in r:  # skipped or failed: no figure
            continue
        task = suite.task(r["task"])
        settings, same = _settings(task, r.get("settings"))
        if not same:
            notes.append(f"{task.key} {r['backend']} seed {r['seed']}: settings {settings} (goals.toml: "
                         f"{task.settings})")
        out.append(_record(suite, task, r["backend"], _entry(suite, r["backend"]), int(r["seed"]),
                           {"max_episodes": int(r["budget"])}, settings, table_result(r), r.get("curve") or [], made,
                           "bench/suite.py results.json", "python bench/suite.py"))
    return out, notes


def table_result(r: dict[str, Any]) -> dict[str, Any]:
    """A record's ``result`` from an old bench run record (``bench/goal_runs.py``'s: the suite's and the tuning's)."""
    keeper_is_method = r["backend"] != "q-learning"  # the kept table is the final policy too (docs/modes.md)
    return {"heldout_mean": r["heldout"], "final_heldout_mean": r["heldout"] if keeper_is_method else None,
            "selected_heldout_mean": r["heldout"],
            "heldout_within": r.get("heldout_within"), "heldout_episodes": 100, "episodes": r["episodes"],
            "env_steps": r.get("env_steps_total"), "iterations": r.get("iterations"), "wall_s": r.get("wall_s"),
            "cpu_s": r.get("cpu_s"), "calls": None, "tokens_in": None, "tokens_out": None, "cost_usd": None,
            "stop_reason": r.get("stop"), "reward_threshold": None, "model": None, "peer_source": None,
            "mode": "table", "backend": "offline" if r["backend"].startswith("offline") else r["backend"],
            "episodes_within": r.get("episodes_within"), "reached_at": r.get("reached_at"),
            "output_format": r.get("output_format")}


def peer_records(suite: Suite, path: Path) -> list[SuiteRecord]:
    """The records of ``peers.json``."""
    made, out = _made(path), []
    for r in json.loads(path.read_text(encoding="utf-8")):
        if r.get("heldout") is None:
            continue
        task = suite.task(r["task"])
        kind, algo = r["kind"], r["algo"]
        label = PEER_LABELS[kind].format(algo=algo)
        budget = {} if kind == "zoo" else {"max_steps" if kind == "steps" else "max_episodes": int(r["target"])}
        source = r["hyperparameters"] if r.get("tuned", True) else f"untuned: {r['hyperparameters']}"
        result = {"heldout_mean": r["heldout"], "final_heldout_mean": r["heldout"], "selected_heldout_mean": None,
                  "heldout_within": None, "heldout_episodes": r.get("heldout_episodes"), "episodes": r["episodes"],
                  "env_steps": r["steps"], "iterations": None, "wall_s": None, "cpu_s": r.get("cpu_s"),
                  "calls": None, "tokens_in": None, "tokens_out": None, "cost_usd": None,
                  "stop_reason": "budget reached" if r.get("reached") else "budget not reached",
                  "reward_threshold": None, "model": None, "peer_source": source, "mode": "peer", "backend": algo}
        out.append(_record(suite, task, label, _entry(suite, label, algo), int(r["seed"]), budget,
                           dict(task.settings), result, r.get("curve") or [], made, "bench/peers.py peers.json",
                           "python bench/peers.py"))
    return out


def _order(suite: Suite) -> Any:
    tasks = [t.key for t in suite.tasks]
    return lambda r: (tasks.index(r.task), r.method, r.seed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "bench" / "data" / "suite"))
    ap.add_argument("--out", default=str(ROOT / "llm_policy_gen" / "suites" / "data" / "goals"))
    args = ap.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    suite = load_suite("goals")
    records, notes = table_records(suite, data / "results.json")
    records = sorted(records + peer_records(suite, data / "peers.json"), key=_order(suite))
    out.mkdir(parents=True, exist_ok=True)
    made_here = [r for r in read_records(out) if not r.source.startswith("imported: ")]  # runs of bench: kept
    with open(out / RECORDS, "w", encoding="utf-8") as fh:  # the imported lines written anew, the others after them
        for r in [*records, *made_here]:
            fh.write(json.dumps(r.to_json(), allow_nan=False, separators=(",", ":")) + "\n")
    write_references(out / REFERENCES, json.loads((data / "random_policy.json").read_text(encoding="utf-8")),
                     json.loads((data / "priors.json").read_text(encoding="utf-8")),
                     f"imported: bench/suite_scores.py random_policy.json and priors.json ({_made(data)})")
    for line in notes:
        print(f"kept as history: {line}")
    print(f"wrote {len(records)} records to {out / RECORDS} and {out / REFERENCES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
