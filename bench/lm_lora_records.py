"""The `lora` suite's records from its run directories, and the statistics that count unsolved seeds.

    python bench/lm_lora_records.py RUNS_DIR --versions VERSIONS.txt --device "NVIDIA H100 80GB HBM3" \
        --code 0.1.0+844742e [--publish]

``RUNS_DIR`` holds the runs of ``llm_policy_gen/suites/data/lora.toml`` (``RUNS_DIR/FrozenLake-v1/lora8_s<seed>``,
made on the device machine by ``train`` itself: see docs/lm-policy.md); each is read only through
``RunDir.read()`` and must be finished (``RunDir.state()``). ``--versions`` is the device's ``name version`` lines
(torch, transformers, peft, ...), kept in each record's result. Prints one line per seed and the statistics;
``--publish`` appends the records to ``llm_policy_gen/suites/data/lora/records.jsonl``.

Statistics: solved k/n (the held-out mean reached gymnasium's ``reward_threshold`` at some measured point), the
median of the first-solve learner steps with an unsolved seed counted as never (infinite: the median is "never" when
half or more never solved), the per-seed final held-out means and their interquartile mean (the mean of the middle
half, rliable's IQM on one task; no interval, the values are listed).
"""

from __future__ import annotations

import argparse
import math
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llm_policy_gen.run.files import RunDir
from llm_policy_gen.run.view import RunState, RunView
from llm_policy_gen.suites.cells import key_of, settings_of
from llm_policy_gen.suites.definition import Suite, load_suite
from llm_policy_gen.suites.store import SuiteRecord, append_records

STORE = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "lora" / "records.jsonl"
MODEL = "SmolLM2-135M-Instruct Q4_1 (135M parameters, 4-bit)"
ENVIRONMENT = "USE_HUB_KERNELS=NO"
"""Set for every run: transformers 5.25 otherwise swaps layers for kernels fetched from the Hub (no network there)."""




def first_solve(view: RunView, threshold: float) -> int | None:
    """The learner steps at the first held-out measurement at or above ``threshold`` (None: never)."""
    for e in view.events:
        h = e.get("heldout_mean")
        if e.get("heldout_iteration") == e.get("iteration") and h is not None and h >= threshold - 1e-9:
            return int(e["lm_steps"])
    return None


def curve(view: RunView) -> list[list[float | None]]:
    """``[env_steps, episodes, heldout_mean]`` after each iteration; the held-out mean where it was measured."""
    return [[e.get("env_steps_total"), e.get("episodes_total"),
             e.get("heldout_mean") if e.get("heldout_iteration") == e.get("iteration") else None]
            for e in view.events]


def record(suite: Suite, view: RunView, versions: dict[str, str], device: str, code: str) -> SuiteRecord:
    task, method = suite.tasks[0], suite.methods[0]
    s = view.summary
    seed = int(view.fact("seed"))
    threshold = view.threshold if view.threshold is not None else task.goal
    budget: dict[str, Any] = {}  # the method's own: the task's max_steps and the method's iterations, as bench keys it
    settings = settings_of(task, method, budget)
    first = first_solve(view, threshold)
    result = {
        "heldout_mean": s.get("best_heldout_mean"), "final_heldout_mean": s.get("final_heldout_mean"),
        "selected_heldout_mean": s.get("selected_heldout_mean"), "heldout_within": s.get("heldout_within"),
        "heldout_episodes": s.get("best_heldout_episodes"), "episodes": s.get("episodes_total"),
        "env_steps": s.get("env_steps_total"), "iterations": s.get("iterations"), "wall_s": s.get("wall_s"),
        "cpu_s": s.get("cpu_s"), "calls": 0, "tokens_in": s.get("input_tokens"), "tokens_out": s.get("output_tokens"),
        "cost_usd": s.get("cost_usd"), "stop_reason": s.get("stop_reason"), "reward_threshold": threshold,
        "model": MODEL, "peer_source": None, "mode": view.mode, "backend": view.backend,
        "learner_steps": s.get("lm_steps"), "updates": s.get("lm_updates"), "model_passes": s.get("lm_model_passes"),
        "first_solve_steps": first, "solved": first is not None,
        "lm_model_sha256": (view.record.get("lm_model") or {}).get("sha256"),
        "lora_trainable": view.record.get("lora_trainable"), "device": device, **versions,
    }
    argv = [str(a) for a in view.record.get("argv") or []][1:]
    return SuiteRecord(suite=suite.name, task=task.key, env_id=task.env_id, method=method.label, entry=method.entry,
                       seed=seed, cell=key_of(task, method, seed, budget), budget=budget,
                       settings=settings, result=result, curve=curve(view), code=code,
                       made=datetime.now(UTC).isoformat(timespec="seconds"), source="run",
                       command=" ".join([ENVIRONMENT, "llm-policy-gen", *argv]))


def iqm(values: list[float]) -> float:
    """The interquartile mean as rliable computes it (``scipy.stats.trim_mean(x, 0.25)``: ``int(n / 4)`` values cut
    from each end)."""
    x = sorted(values)
    cut = len(x) // 4
    return statistics.fmean(x[cut:len(x) - cut])


def median_never(steps: list[int | None]) -> float:
    """The median with None (never solved) as infinity."""
    return float(statistics.median([math.inf if s is None else s for s in steps]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path)
    ap.add_argument("--versions", type=Path, required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--code", required=True)
    ap.add_argument("--publish", action="store_true")
    args = ap.parse_args()
    suite = load_suite("lora")
    lines = [ln.split() for ln in args.versions.read_text(encoding="utf-8").splitlines()]
    versions = {f"{w[0]}_version": w[1] for w in lines if len(w) >= 2}
    records = []
    for path in sorted((args.runs / "FrozenLake-v1").glob("lora8_s*"), key=lambda p: int(p.name.split("_s")[1])):
        view = RunDir(path).read()
        if view.state is not RunState.FINISHED:
            raise SystemExit(f"{path}: {view.state.value}, not a result")
        records.append(record(suite, view, versions, args.device, args.code))
    for r in records:
        print(f"seed {r.seed}: final held-out {r.result['final_heldout_mean']:.2f}, first solved at "
              f"{r.result['first_solve_steps'] or 'never'} learner steps, {r.result['learner_steps']} steps, "
              f"{r.result['wall_s']:.0f} s")
    finals = [float(r.result["final_heldout_mean"]) for r in records]
    firsts = [r.result["first_solve_steps"] for r in records]
    print(f"solved {sum(f is not None for f in firsts)}/{len(records)}; median first-solve steps (never = inf) "
          f"{median_never(firsts)}; final held-out IQM {iqm(finals):.3f}, at 1.00 at the end "
          f"{sum(f >= 1 for f in finals)}/{len(records)}")
    if args.publish:
        append_records(STORE, records)
        print(f"{len(records)} records appended to {STORE}")


if __name__ == "__main__":
    main()
