#!/usr/bin/env python3
"""One-off: the settings search's records of ``bench/tune_specs.py`` carried into the ``tune`` suite's store (issue 61,
issue 62 item 5).

    python tools/import_tune_records.py [--runs bench/data/tune/tune_runs.json] [--out llm_policy_gen/suites/data/tune]

Reads ``tune_runs.json`` (every finished tuning run's record: the task, its settings, budget, seed, held-out means,
the within-budget mean and the curve) and writes ``records.jsonl`` with each record's cell key computed from
``tune.toml`` as ``llm-policy-gen bench tune`` computes it (:func:`llm_policy_gen.suites.cells.key_of`), so a grid
already run counts as done. A record's point is the grid method whose settings resolve to the same values of the six
tuned settings (the package defaults < the spec's ``train_defaults`` < the settings: a run made with ``{}`` on a spec
whose defaults were its grid's base is that base's). A record of no point of today's grid (the point that combined
the changes which beat the base, which the old search added and the suite's one-pass grid does not) is kept under
the label ``combined`` with its own settings: history, not shown. The output is the same on every run (no clock is
read); records ``bench tune`` made since are kept after the imported ones.

The old files are gone from the tree once imported (git keeps them: ``git show fc3ceaa:bench/data/tune/tune_runs.json
> tune_runs.json``, then ``--runs tune_runs.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from import_bench_records import ROOT, _made, _order, table_result

from llm_policy_gen.suites.cells import key_of, settings_of
from llm_policy_gen.suites.definition import MethodSpec, Suite, Task, load_suite
from llm_policy_gen.suites.grid import base_values, not_a_point
from llm_policy_gen.suites.store import RECORDS, SuiteRecord, read_records

TUNED = ("candidates", "train_episodes", "test_start", "test_max", "confirm_episodes", "confirm_batches")
COMBINED = MethodSpec("combined", "combined=offline", note="the old search's point of the changes that beat the base")


def point_of(suite: Suite, task: Task, settings: dict[str, Any]) -> MethodSpec | None:
    """The grid method whose settings on ``task`` resolve to ``settings``' values of the tuned settings."""
    values = base_values(task.env_id, settings, TUNED)
    budget = {"max_episodes": task.budget}
    for m in suite.methods:
        if not_a_point(task.env_id, task.settings, m.moves):
            continue
        if base_values(task.env_id, settings_of(task, m, budget), TUNED) == values:
            return m
    return None


def tune_records(suite: Suite, path: Path) -> list[SuiteRecord]:
    made, out = _made(path), []
    for r in json.loads(path.read_text(encoding="utf-8")):
        if "heldout" not in r:
            continue
        task = suite.task(r["task"])
        if int(r["budget"]) != task.budget or r["backend"] != "offline":
            raise SystemExit(f"{r['task']} seed {r['seed']}: budget {r['budget']} / {r['backend']}, not the suite's")
        budget = {"max_episodes": task.budget}
        spec, keyed = point_of(suite, task, r["settings"]), task
        if spec is None:  # the combined point: its own settings, all six written out as the search gave them
            spec, keyed = COMBINED, replace(task, settings={**task.settings, **base_values(
                task.env_id, r["settings"], TUNED)})
        out.append(SuiteRecord(suite=suite.name, task=task.key, env_id=task.env_id, method=spec.label,
                               entry=spec.entry, seed=int(r["seed"]), cell=key_of(keyed, spec, int(r["seed"]), budget),
                               budget=budget, settings=settings_of(keyed, spec, budget), result=table_result(r),
                               curve=[list(p) for p in r.get("curve") or []], code="unknown", made=made,
                               source="imported: bench/tune_specs.py tune_runs.json (code unknown)",
                               command=f"python bench/tune_specs.py --tasks {task.key}"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default=str(ROOT / "bench" / "data" / "tune" / "tune_runs.json"))
    ap.add_argument("--out", default=str(ROOT / "llm_policy_gen" / "suites" / "data" / "tune"))
    args = ap.parse_args(argv)
    suite, out = load_suite("tune"), Path(args.out)
    methods = [m.label for m in suite.methods] + [COMBINED.label]
    order = _order(suite)
    records = sorted(tune_records(suite, Path(args.runs)),
                     key=lambda r: (order(r)[0], methods.index(r.method), r.seed))
    out.mkdir(parents=True, exist_ok=True)
    made_here = [r for r in read_records(out) if not r.source.startswith("imported: ")]  # runs of bench: kept
    with open(out / RECORDS, "w", encoding="utf-8") as fh:
        for r in [*records, *made_here]:
            fh.write(json.dumps(r.to_json(), allow_nan=False, separators=(",", ":")) + "\n")
    combined = sum(r.method == COMBINED.label for r in records)
    print(f"wrote {len(records)} records to {out / RECORDS} ({combined} of the combined point: history)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
