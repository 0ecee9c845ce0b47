"""The founding report's experiment (issue 31 item 5), scaled to what has a table here: a language-model backbone
(frozen features over the discretized state's text) trained with TRPO, against a PPO MLP on raw observations.

    python bench/lm_trpo_vs_ppo.py [--tasks cartpole,hopper] [--seeds 0-2] [--steps N] [--features smollm2|onehot]
                                   [--out DIR] [--report-only]

* **LM + TRPO**: ``train --mode lm-policy --lm-learner trpo`` with SmolLM2-135M-Instruct (Q4_1 GGUF) features
  (``--features onehot`` swaps in the tabular control, no model needed), ``steps / 256`` updates of 256 steps; the
  read-out table is the policy, judged by the keeper on held-out seeds (100 episodes on each adoption). On Hopper-v5
  the spec's shipped 384-state table, its actions the spec's 3 levels on each of the 3 joints (27 actions), so the
  exported table *is* the trained policy. The report counts the distinct texts the model encodes: one per
  discretized state (324 on CartPole-v1, 384 on Hopper-v5), where raw numbers written as text would be unbounded.
* **PPO MLP on raw observations**: SB3 PPO with the RL Baselines3 Zoo's hyperparameters for the task
  (``bench/zoo.py``; ``VecNormalize`` where the zoo uses it), continuous actions on Hopper, trained by
  ``bench/peer_train.py`` to the same number of environment steps, then played on the same 100 held-out seeds as
  the suite's runs.

Both arms get ``--steps`` environment steps of training (default: CartPole-v1 100,000; Hopper-v5 50,000, a twentieth
of the zoo's 1M). The LM arm also spends the keeper's test, confirmation and held-out episodes (``env_steps_total``),
which the PPO arm's curve evaluations do not count. Runs live in ``OUT/runs`` (lm-policy run directories, read when
finished) and ``OUT/ppo`` (peer_train's folders, checkpointed and resumed); a finished run is not run again.

Written to ``OUT``: ``results.json``, ``lm_trpo_vs_ppo.md`` (per task and arm: the interquartile mean of the final
held-out mean over seeds with its 95 % stratified bootstrap interval, rliable through
:func:`llm_policy_gen.plotting.stats.iqm_interval`; wall seconds; the texts encoded) and ``<task>_trpo_vs_ppo.png``
(held-out mean against training steps). ``OUT`` defaults to ``~/llm-policy-gen-bench/lm-trpo-vs-ppo``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling scripts, when imported by a test

import lm_features  # noqa: E402

DEFAULT_OUT = Path.home() / "llm-policy-gen-bench" / "lm-trpo-vs-ppo"
TASKS = {"cartpole": ("CartPole-v1", 100_000), "hopper": ("Hopper-v5", 50_000)}
N_STEPS = 256
HELDOUT = 100
CURVE_POINTS = 10
CURVE_EPISODES = 10


def run_ppo(env_id: str, steps: int, seed: int, run_dir: Path) -> dict[str, Any]:
    """SB3 PPO (zoo hyperparameters) on raw observations to ``steps``; its record (reused when finished)."""
    import peer_train
    import torch
    import zoo

    from llm_policy_gen.keeper import SeedPlan
    from llm_policy_gen.storage.runlog import write_json_atomic

    torch.set_num_threads(1)
    hyper = zoo.hyperparameters("ppo", env_id)
    record: dict[str, Any] = {"run_dir": str(run_dir), "hyperparameters": hyper.source}
    done = run_dir / "result.json"
    if done.is_file():
        return {**record, **json.loads(done.read_text()), "reused": True}
    plan = SeedPlan(seed)
    started = time.time()
    try:
        fields = peer_train.train(run_dir, "ppo", hyper, peer_train.EnvFactory(env_id),
                                  peer_train.Budget("steps", steps, steps), seed,
                                  [plan.heldout(j) for j in range(HELDOUT)], CURVE_EPISODES,
                                  max(1, steps // CURVE_POINTS), cpu_budget_s=float("inf"))
    except Exception as exc:  # a failed run is a row with its error
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
    fields["wall_s"] = round(time.time() - started, 1)
    if fields.get("reached"):
        write_json_atomic(done, fields)
    return {**record, **fields}


def plot(records: list[dict[str, Any]], out: Path, title: str) -> Path | None:
    """Median and interquartile band per arm, held-out mean against training steps."""
    from llm_policy_gen.sweep.figures import plot_curves
    from llm_policy_gen.sweep.results import Curve

    curves = []
    for r in records:
        label = r["label"].replace("-Instruct", "").replace(" (table)", "")  # short enough for the legend
        if r["arm"] == "ppo" and r.get("curve"):
            curves.append(Curve(label, r["seed"], [c[0] for c in r["curve"]], [c[2] for c in r["curve"]]))
        elif r.get("curve"):
            curves.append(Curve(label, r["seed"], r["curve"]["lm_steps"], r["curve"]["heldout"]))
    if not curves:
        return None
    threshold = next((r["threshold"] for r in records if r.get("threshold") is not None), None)
    return plot_curves(curves, out, title, threshold=threshold,
                       x_label="training environment steps (LM: the learner's rollouts; PPO: its own)")


def markdown(records: list[dict[str, Any]], command: str, note: str) -> str:
    from llm_policy_gen.plotting.stats import iqm_interval

    lines = ["## LM backbone + TRPO against a PPO MLP on raw observations (issue 31 item 5)", "",
             f"Regenerate: `{command}`", "", note, "",
             "| task | arm | runs | training steps | IQM of final held-out [95% CI] | median wall s | texts encoded |",
             "|---|---|---|---|---|---|---|"]
    for key, (env_id, _) in TASKS.items():
        for arm in ("lm", "ppo"):
            mine = [r for r in records if r["task"] == key and r["arm"] == arm and r.get("heldout") is not None]
            if not mine:
                continue
            interval = iqm_interval([r["heldout"] for r in mine])
            wall = sorted(r["wall_s"] for r in mine)[len(mine) // 2]
            texts = mine[0].get("state_texts") if arm == "lm" else None
            steps = mine[0]["steps_budget"]
            lines.append(f"| {env_id} | {mine[0]['label']} | {len(mine)} | {steps:,} | {interval.format(1)} | "
                         f"{wall:,.0f} | {'-' if texts is None else f'{texts:,} (one per discretized state)'} |")
    problems = [r for r in records if r.get("heldout") is None]
    lines += [""] + [f"- {r['task']} {r['arm']} seed {r['seed']}: {r.get('error') or r.get('not_run')}"
                     for r in problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="cartpole")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--steps", type=int, default=None, help="training steps per run (default: each task's own)")
    ap.add_argument("--features", choices=("smollm2", "onehot"), default="smollm2")
    ap.add_argument("--heldout-episodes", type=int, default=HELDOUT)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    from bench_args import out_dir
    from bench_args import seeds as seeds_arg

    seeds = seeds_arg("lm_trpo_vs_ppo", args.seeds)
    if seeds is None:
        return 2
    unknown = [t for t in args.tasks.split(",") if t not in TASKS]
    if unknown:
        print(f"lm_trpo_vs_ppo: unknown task {unknown[0]!r}; accepted: {', '.join(TASKS)}", file=sys.stderr)
        return 2
    out = out_dir("lm_trpo_vs_ppo", args.out)
    if out is None:
        return 2
    results, records = lm_features.load_results(out, "arm")
    mine: dict[tuple[str, str, int], dict[str, Any]] = {}
    feat = lm_features.FEATURES_BY_KEY[args.features]
    lm_label = f"{feat.label} + TRPO (table)"
    model = lm_features.model_path(feat.model) if feat.model else None
    command = "python bench/lm_trpo_vs_ppo.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started, load = time.time(), os.getloadavg()[0]
    for key in [] if args.report_only else args.tasks.split(","):
        env_id, default_steps = TASKS[key]
        steps = args.steps or default_steps
        iterations = max(1, steps // N_STEPS)
        for seed in seeds:
            base = {"task": key, "env_id": env_id, "seed": seed, "steps_budget": steps}
            if feat.model and model is None:
                rec: dict[str, Any] = {**base, "arm": "lm", "label": lm_label,
                                       "not_run": f"python tools/fetch_model.py {feat.model} first"}
            else:
                run_dir = out / "runs" / env_id / f"{args.features}_trpo_i{iterations}_s{seed}"
                rec = {**base, "arm": "lm", "label": lm_label, **lm_features.run_lm(
                    env_id, feat.kind, model, seed, run_dir,
                    {"iterations": iterations, "lm_learner": "trpo", "lm_n_steps": N_STEPS,
                     "heldout_episodes": args.heldout_episodes})}
            mine[(key, "lm", seed)] = rec
            records = lm_features.save_results(results, mine, "arm")
            ppo_dir = out / "ppo" / env_id / f"ppo_steps{steps}_s{seed}"
            ppo = {**base, "arm": "ppo", "label": "PPO MLP, raw observations (zoo)",
                   **run_ppo(env_id, steps, seed, ppo_dir)}
            mine[(key, "ppo", seed)] = ppo
            records = lm_features.save_results(results, mine, "arm")
            for r in (rec, ppo):
                print(f"{key} {r['arm']} seed {seed}: {r.get('error') or r.get('not_run') or r.get('heldout')}",
                      flush=True)
    records = lm_features.save_results(results, mine, "arm")
    note = (f"Measured on {os.cpu_count()} cores shared with other work (load average {load:.1f} at the start), one "
            f"run at a time, torch on one thread; this invocation took {time.time() - started:,.0f} s. LM curve: the "
            f"kept table's held-out mean ({args.heldout_episodes} episodes) against the learner's steps; PPO curve: "
            f"the agent on the first {CURVE_EPISODES} held-out seeds every {CURVE_POINTS}th of the budget, its final "
            f"figure on all {HELDOUT}.")
    all_records = list(records.values())
    for key, (env_id, _) in TASKS.items():
        of_task = [r for r in all_records if r["task"] == key]
        if of_task:
            plot(of_task, out / f"{key}_trpo_vs_ppo.png", f"{env_id}: LM backbone + TRPO vs PPO MLP")
    md = out / "lm_trpo_vs_ppo.md"
    md.write_text(markdown(all_records, command, note) + "\n")
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    from bench_args import run_main

    sys.exit(run_main("lm_trpo_vs_ppo", main))
