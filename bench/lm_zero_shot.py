"""What a small model knows of a task, cheaply: its zero-shot action-scoring table on the held-out seeds.

    python bench/lm_zero_shot.py [--lm-model SMOLLM2.gguf] [--envs FrozenLake-v1.deterministic,CartPole-v1]
                                 [--episodes 100] [--seed 50000] [--run-seeds 0-9] [--out FILE.json]

For every state of each task the model scores each action's words after the state's text (``--lm-head scores``,
:mod:`llm_policy_gen.lm.scores`); the zero-shot table is each state's best-scored action (what ``--mode lm-policy
--lm-head scores`` reads out before any update), under each length normalisation (``word``, ``token``, ``sum``).
Beside it, on the same seeds: the spec's hand-written prior rule table (where the spec has one) and the constant
table (the spec's ``default_action`` everywhere). ``--seed 50000`` is the first held-out seed of a run with ``--seed
0``, so the figures sit beside such a run's ``best_eval_mean``. The scores are cached on disk (by the model's sha256),
so a second run costs only the evaluation. ``--run-seeds 0-9`` scores every table on each of those run seeds'
held-out seeds too (``by_seed``; the held-out seeds a ``train --seed S`` run is judged on), so that
``bench/lm_features.py --zero-shot FILE`` can put the zero-shot tables beside trained runs with an interval over the
same seeds. Each table itself is in the JSON (``table``, one action per state).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.lm.backbone import default_lm_cache, load_language_model
from llm_policy_gen.lm.scores import SCORE_NORMS, ActionScorer, continuations, normalise, scoring_prompts, word_counts
from llm_policy_gen.sweep.random_baseline import heldout_seeds

ENVS = "FrozenLake-v1.deterministic,FrozenLake-v1.8x8,MountainCar-v0,CartPole-v1,Taxi-v4"
DEFAULT_MODEL = Path.home() / ".cache" / "llm-policy-gen" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def task_figures(scorer: ActionScorer, env_id: str, seeds: list[int], run_seeds: Sequence[int] = (),
                 episodes: int = 100) -> dict[str, Any]:
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    t0, passes = time.perf_counter(), scorer.forward_passes
    sums, tokens = scorer.raw(scoring_prompts(spec, obs, acts), continuations(acts))
    score_s = time.perf_counter() - t0
    tables: dict[str, np.ndarray] = {}
    for how in SCORE_NORMS:
        tables[f"zero-shot ({how})"] = np.argmax(normalise(sums, tokens, word_counts(acts), how), axis=1)
    prior = spec.prior_table()
    if prior is not None:
        tables["prior rule"] = prior
    tables["constant"] = spec.default_table()
    out: dict[str, Any] = {"env": env_id, "states": spec.n_states, "actions": [acts.describe(a) for a in
                                                                                 range(acts.n_actions)],
                           "score_s": round(score_s, 1), "batches": scorer.forward_passes - passes, "tables": {}}
    with Collector(spec) as c:
        for name, table in tables.items():
            table = np.asarray(table, dtype=np.int64)
            r = c.evaluate(table, seeds)
            counts = np.bincount(table, minlength=acts.n_actions).tolist()
            out["tables"][name] = {"mean": float(r.mean), "std": float(np.std(r.returns)), "action_counts": counts,
                                   "table": table.tolist()}
            if run_seeds:
                out["tables"][name]["by_seed"] = {str(s): float(c.evaluate(table, heldout_seeds(s, episodes)).mean)
                                                  for s in run_seeds}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-model", default=str(DEFAULT_MODEL))
    ap.add_argument("--lm-cache", default=None)
    ap.add_argument("--envs", default=ENVS)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=50_000)
    ap.add_argument("--run-seeds", default="", help="e.g. 0-9: also each run seed's held-out seeds (by_seed)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here too")
    args = ap.parse_args()
    from bench_args import out_file
    from bench_args import seeds as seeds_arg

    run_seeds = seeds_arg("lm_zero_shot", args.run_seeds, "--run-seeds") if args.run_seeds else []
    if run_seeds is None or (args.out is not None and out_file("lm_zero_shot", args.out) is None):
        return 2
    import torch

    torch.set_num_threads(1)
    cache = Path(args.lm_cache) if args.lm_cache else default_lm_cache()
    with contextlib.redirect_stderr(io.StringIO()):
        lm = load_language_model(args.lm_model, cache)
    scorer = ActionScorer(lm, cache)
    seeds = [args.seed + j for j in range(args.episodes)]
    results = []
    print(f"model {Path(lm.identity.path).name} sha256 {lm.identity.sha256[:12]} ({lm.loaded_from}, "
          f"{lm.load_s:.1f} s); {args.episodes} held-out episodes from seed {args.seed}", flush=True)
    for env_id in args.envs.split(","):
        res = task_figures(scorer, env_id, seeds, run_seeds, args.episodes)
        results.append(res)
        cells = "; ".join(f"{k} {v['mean']:.3f} (actions {v['action_counts']})" for k, v in res["tables"].items())
        print(f"{env_id} ({res['states']} states, scored in {res['score_s']} s, {res['batches']} batches): {cells}",
              flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps({"model": lm.describe(), "episodes": args.episodes,
                                                  "seed": args.seed, "run_seeds": run_seeds, "results": results},
                                                 indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
