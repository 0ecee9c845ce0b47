"""What a language model's encodings add to a policy network (issue 31 item 4): the same learner over LM features,
one-hot features and random features of the same width, on five tabular tasks.

    python bench/lm_features.py [--tasks frozenlake,cartpole,...] [--features smollm2,qwen,onehot,random,...]
                                [--seeds 0-9] [--learner ppo|trpo] [--iterations N] [--out DIR] [--report-only]
                                [--offline-out SUITE_DIR] [--zero-shot A.json,B.json] [--table-writing FILE.json]

Every (task, features, seed) is one ``train --mode lm-policy`` run (the package's own mode: a frozen features table
per discretized state, a head trained by SB3 PPO or sb3-contrib TRPO, read out as a table after every update and
judged by the keeper on held-out seeds), in its own run directory under ``OUT/runs/<env-id>/<run-id>``. A run whose
``summary.json`` exists is read, not run again; one interrupted after a checkpoint resumes from it (to the
uninterrupted result); one killed before its first checkpoint is removed and run again. One run at a time, in this
process (torch on one thread); a second invocation on the same ``--out`` with other tasks may run beside it on
another core: each replaces only its own records in ``results.json`` (under a file lock, ``bench/results_file.py``).

Features (``--features``):

* ``smollm2``: SmolLM2-135M-Instruct, Q4_1 GGUF (``tools/fetch_model.py smollm2``), dequantised to float32, mean of
  the last hidden states over the state's text, standardised per feature: 576 wide.
* ``qwen``: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (``tools/fetch_model.py qwen2.5-coder-0.5b``): 896 wide.
* ``onehot``: the identity, as wide as the number of states (the tabular control).
* ``random``: standard normal features 576 wide (SmolLM2's width, no model loaded); ``random-qwen``: 896 wide
  (Qwen's width; loads the model for its width).
* ``offline``: not features but the product's default backend (not an LLM), the optimiser that writes the table,
  with the suite's budget and settings for the task (``goals.toml`` through ``bench/goal_runs.py``; 300 episodes on
  FrozenLake-v1.deterministic, which is not in the goal table): a run of ``bench/goal_runs.py``'s, read from
  ``--offline-out`` (default ``OUT``) when it is there, so that its curve sits on the same axes.

Beside each task's table, what needs no training run here, on the same held-out seeds: the spec's table before any
episode (its prior rule, or the default action everywhere: ``bench/suite_scores.py``, kept in ``OUT/priors.json``),
each model's zero-shot table (``--zero-shot``: files of ``bench/lm_zero_shot.py --run-seeds 0-9``), and a language
model writing the table (``--table-writing``, by default ``bench/data/real_llm_2026-11-26.json``: Qwen2.5-Coder-0.5B,
seeds 0-2, transcribed from that day's ``bench/real_llm.py`` measurement).

A model that is not in the models folder makes its rows "not run" (fetch it first); nothing is downloaded here.

Written to ``OUT``: ``results.json`` (one record per run, with its curve: the kept table's held-out mean, the
events' ``best_eval_mean``, against the run's environment steps, ``env_steps_total``: the learner's rollouts plus the
keeper's test, confirmation and held-out episodes, and against the learner's own steps, ``lm_steps``),
``lm_features.md`` (per task: the interquartile mean of the final held-out mean over seeds with its 95 % stratified
bootstrap interval, :func:`llm_policy_gen.plotting.stats.iqm_interval` (rliable), the seeds that reach the task's
threshold, the median learner and environment steps to reach it) and ``<task>.png`` (median and interquartile band per
features against environment steps). ``OUT`` defaults to ``~/llm-policy-gen-bench/lm-features``, outside the work
tree. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling scripts, when imported by a test

import results_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path.home() / "llm-policy-gen-bench" / "lm-features"


@dataclass(frozen=True)
class Task:
    key: str
    env_id: str
    iterations: int
    """Learner updates per run (each a rollout of ``--lm-n-steps``, 256 by default)."""


TASKS = [Task("frozenlake", "FrozenLake-v1.deterministic", 40), Task("frozenlake8x8", "FrozenLake-v1.8x8", 120),
         Task("cartpole", "CartPole-v1", 80), Task("taxi", "Taxi-v4", 200), Task("mountaincar", "MountainCar-v0", 120)]
BY_KEY = {t.key: t for t in TASKS}


@dataclass(frozen=True)
class Features:
    key: str
    kind: str
    """``lm``, ``onehot`` or ``random`` (``--lm-features``)."""
    model: str | None
    """``tools/fetch_model.py``'s name of the model, or None."""
    label: str


FEATURES = [
    Features("smollm2", "lm", "smollm2", "LM: SmolLM2-135M-Instruct Q4_1 (576)"),
    Features("qwen", "lm", "qwen2.5-coder-0.5b", "LM: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (896)"),
    Features("onehot", "onehot", None, "one-hot"),
    Features("random", "random", None, "random (576)"),
    Features("random-qwen", "random", "qwen2.5-coder-0.5b", "random (896)"),
    Features("offline", "offline", None, "offline (not an LLM: the table-writing optimiser)"),
]
OFFLINE_BUDGETS = {"frozenlake": 300}
"""Episode budgets of ``offline`` on the tasks outside the suite's goal table (the others use the suite's budget and
settings, ``goals.toml`` through ``bench/goal_runs.py``)."""
TABLE_WRITING = ROOT / "bench" / "data" / "real_llm_2026-11-26.json"
"""A language model writing the table (Qwen2.5-Coder-0.5B, seeds 0-2, K = 2, 5 iterations): the figures of
``bench/real_llm.py``'s 2026-11-26 measurement, whose run folders are not kept here (``--table-writing``)."""
FEATURES_BY_KEY = {f.key: f for f in FEATURES}


def _fetch_module() -> Any:
    spec = importlib.util.spec_from_file_location("fetch_model", ROOT / "tools" / "fetch_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_model"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def model_path(name: str) -> Path | None:
    """The checked GGUF file of ``tools/fetch_model.py``'s ``name``, or None when it is not there (no download)."""
    fetch = _fetch_module()
    source = fetch.MODELS[name]
    path = fetch.models_dir() / source.file_name
    return path if fetch.is_checked(path, source) else None


def curve_of(run_dir: Path) -> dict[str, list[float]]:
    """The kept table's held-out mean after each iteration, against environment and learner steps."""
    from llm_policy_gen.storage.runlog import read_jsonl

    events = [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("best_eval_mean") is not None]
    curve = {"env_steps": [float(e["env_steps_total"]) for e in events],
             "heldout": [float(e["best_eval_mean"]) for e in events]}
    if any("lm_steps" in e for e in events):  # an lm-policy run (offline has no learner)
        curve["lm_steps"] = [float(e.get("lm_steps", 0)) for e in events]
    return curve


def run_lm(env_id: str, features: str, model: Path | None, seed: int, run_dir: Path,
           settings: dict[str, Any]) -> dict[str, Any]:
    """One ``--mode lm-policy`` run into ``run_dir`` (``OUT/runs/<gymnasium id>/<run id>``, where ``train`` puts
    it): read when finished, resumed from its checkpoint when interrupted, else run; its record."""
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import resume, train

    record: dict[str, Any] = {"run_dir": str(run_dir)}
    try:
        if (run_dir / "summary.json").is_file():
            record["reused"] = True
        elif (run_dir / "checkpoint.npz").is_file():  # interrupted: goes on to the uninterrupted result
            run_dir = resume(run_dir, {}, log=lambda _m: None).run_dir
            record["resumed"] = True
        else:
            if run_dir.exists():  # killed before its first checkpoint: nothing to go on from
                shutil.rmtree(run_dir)
            cfg = TrainConfig.build(({"env_id": env_id, "mode": "lm-policy", "lm_features": features,
                                      "lm_model": None if model is None else str(model), "seed": seed,
                                      "logs_dir": str(run_dir.parent.parent), "run_id": run_dir.name,
                                      "progress": False, "quiet": True, "plots": False, **settings}, "bench"))
            run_dir = train(cfg, log=lambda _m: None).run_dir
    except Exception as exc:  # a failed run is a row with its error
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
    record["run_dir"] = str(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    record.update(heldout=summary["best_eval_mean"], env_steps_total=summary["env_steps_total"],
                  episodes=summary["episodes_total"], lm_steps=summary.get("lm_steps"), wall_s=summary["wall_s"],
                  threshold=summary.get("reward_threshold"), width=config.get("features_width"),
                  state_texts=config.get("state_texts"), learner=config.get("learner", {}).get("class"),
                  curve=curve_of(run_dir))
    return record


def run_offline(task: Task, seed: int, out: Path) -> dict[str, Any]:
    """``offline`` (the product's default backend, not an LLM) on ``task`` with the suite's budget and settings, a
    run of ``bench/goal_runs.py``'s in ``out/runs``: read when finished there, resumed when interrupted;
    its record with the same curve as an lm-policy run's."""
    import goal_runs

    goal = goal_runs.BY_KEY.get(task.key) or goal_runs.Goal(task.key, task.env_id, OFFLINE_BUDGETS[task.key],
                                                            float("nan"), "", "")
    rec = goal_runs.run_one(goal, "offline", seed, out)
    if "error" in rec:
        return {"run_dir": rec.get("run_dir"), "error": rec["error"]}
    run_dir = Path(rec["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"run_dir": str(run_dir), "reused": bool(rec.get("reused")), "heldout": rec["heldout"],
            "env_steps_total": rec["env_steps_total"], "episodes": rec["episodes"], "lm_steps": None,
            "wall_s": rec["wall_s"], "threshold": summary.get("reward_threshold"), "budget": goal.budget,
            "learner": None, "curve": curve_of(run_dir)}


def run_name(task: Task, features: str, learner: str, iterations: int, seed: int) -> str:
    """A run's id; a spec variant's (``FrozenLake-v1.8x8``) starts with the variant, since its runs share the
    gymnasium id's folder with the plain spec's."""
    variant = task.env_id.partition(".")[2]
    return f"{variant + '-' if variant else ''}{features}_{learner}_i{iterations}_s{seed}"


def load_results(out: Path, column: str) -> tuple[Path, dict[tuple[str, str, int], dict[str, Any]]]:
    """``out`` made, its ``results.json`` and the records already there by (task, ``column``, seed)."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    from bench_args import read_json

    return results, {(r["task"], r[column], r["seed"]): r for r in read_json(results, [])}


def save_results(results: Path, mine: dict[tuple[str, str, int], dict[str, Any]],
                 column: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    """This invocation's records written into ``results.json``, every other record kept (another invocation on the
    same folder, running other tasks, may have written since this one started); all of them by key."""
    data = results_file.merge_save(results, mine.values(), key=lambda r: (r["task"], r[column], r["seed"]))
    return {(r["task"], r[column], r["seed"]): r for r in data}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(BY_KEY))
    ap.add_argument("--features", default="smollm2,qwen,onehot,random")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--learner", choices=("ppo", "trpo"), default="ppo")
    ap.add_argument("--iterations", type=int, default=None, help="updates per run (default: each task's own)")
    ap.add_argument("--heldout-episodes", type=int, default=100)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="results folder (default outside the work tree)")
    ap.add_argument("--offline-out", default=None,
                    help="the suite folder whose offline runs are read, or run there when missing (default: --out)")
    ap.add_argument("--zero-shot", default="",
                    help="comma-separated bench/lm_zero_shot.py --run-seeds JSON files: the zero-shot rows")
    ap.add_argument("--table-writing", default=str(TABLE_WRITING),
                    help="figures of a model writing the table (JSON; '' for none)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from results.json and exit")
    args = ap.parse_args(argv)
    from bench_args import out_dir
    from bench_args import seeds as seeds_arg

    bad = [t for t in args.tasks.split(",") if t not in BY_KEY] + \
          [f for f in args.features.split(",") if f not in FEATURES_BY_KEY]
    if bad:
        print(f"lm_features: unknown {bad[0]!r}; tasks: {', '.join(BY_KEY)}; features: "
              f"{', '.join(FEATURES_BY_KEY)}", file=sys.stderr)
        return 2
    seeds = seeds_arg("lm_features", args.seeds)
    if seeds is None:
        return 2
    try:
        zero_shot = [json.loads(Path(f).expanduser().read_text()) for f in args.zero_shot.split(",") if f]
        table_writing = json.loads(Path(args.table_writing).read_text()) if args.table_writing else None
    except (OSError, ValueError) as exc:
        print(f"lm_features: cannot read {getattr(exc, 'filename', None) or 'a JSON file'}: {exc}", file=sys.stderr)
        return 2
    if not all(isinstance(z, dict) and isinstance(z.get("results"), list) and "path" in z.get("model", {})
               for z in zero_shot) or not (table_writing is None or isinstance(table_writing.get("tasks"), dict)):
        print("lm_features: --zero-shot takes bench/lm_zero_shot.py's JSON, --table-writing a JSON with 'tasks'",
              file=sys.stderr)
        return 2
    out = out_dir("lm_features", args.out)
    offline_out = out_dir("lm_features", args.offline_out, "--offline-out") if args.offline_out else out
    if out is None or offline_out is None:
        return 2
    results, records = load_results(out, "features")
    mine: dict[tuple[str, str, int], dict[str, Any]] = {}
    command = "python bench/lm_features.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    load = os.getloadavg()[0]
    from llm_policy_gen.envs import get_spec

    for key in [] if args.report_only else args.tasks.split(","):
        task = BY_KEY[key]
        iterations = args.iterations or task.iterations
        settings = {"iterations": iterations, "lm_learner": args.learner, "heldout_episodes": args.heldout_episodes}
        for fkey in args.features.split(","):
            feat = FEATURES_BY_KEY[fkey]
            for seed in seeds:
                base = {"task": key, "env_id": task.env_id, "features": fkey, "group": fkey, "seed": seed,
                        "iterations": iterations}
                model = model_path(feat.model) if feat.model else None
                if feat.model and model is None:
                    mine[(key, fkey, seed)] = {**base, "not_run": f"model {feat.model} not fetched "
                                               f"(python tools/fetch_model.py {feat.model})"}
                    continue
                if feat.kind == "offline":
                    rec = {**base, **run_offline(task, seed, offline_out)}
                else:
                    run_dir = out / "runs" / get_spec(task.env_id).env_id / run_name(task, fkey, args.learner,
                                                                                      iterations, seed)
                    rec = {**base, **run_lm(task.env_id, feat.kind, model, seed, run_dir, settings)}
                mine[(key, fkey, seed)] = rec
                shown = rec.get("error") or f"held-out {rec['heldout']:.3f}, {rec['wall_s']:.0f} s"
                print(f"{key} {fkey} seed {seed}: {shown}", flush=True)
                records = save_results(results, mine, "features")
    records = save_results(results, mine, "features")
    note = (f"Measured on {os.cpu_count()} cores shared with other work (load average {load:.1f} at the start), one "
            f"run at a time, torch on one thread; this invocation took {time.time() - started:,.0f} s.")
    from lm_features_report import write_report

    groups = [(f.key, f.label) for f in FEATURES]
    print(f"wrote {write_report(out, list(records.values()), command, note, TASKS, groups, zero_shot, table_writing)}")
    return 0


if __name__ == "__main__":
    from bench_args import run_main

    sys.exit(run_main("lm_features", main))
