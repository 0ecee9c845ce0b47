"""LoRA through the scores head on one task, with only the lm/ modules (no run directory): how far it gets.

A quick probe, not a measurement: every seed is judged on held-out seeds 50000-50099 and it stops on wall minutes.
The measurement is the `lora` suite (``train`` itself, seeds from ``--seed``, a fixed step budget; docs/lm-policy.md).

    python bench/lm_lora.py [--lm-model SMOLLM2.gguf] [--env FrozenLake-v1.deterministic] [--rank 8]
                            [--device cuda]
                            [--n-steps 128] [--batch-size 64] [--epochs 4] [--learning-rate 3e-4]
                            [--minutes 5] [--episodes 100] [--seed 0]

The same learner as ``train --mode lm-policy --lm-head scores --lm-lora R --lm-features onehot`` (SB3 PPO, the scores
head over the LoRA-adapted model, the critic over one-hot states), updated until ``--minutes`` have passed; after
each update the read-out table (each state's most probable action) is evaluated on ``--episodes`` held-out seeds from
50000 (a ``--seed 0`` run's held-out seeds). One JSON line per update: steps, wall time, held-out mean. Needs only
torch, transformers (+ gguf for a GGUF file), peft, stable-baselines3, gymnasium and numpy, so that it runs on a
machine without the package's other dependencies (a GPU box without network).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.lm.agent import LearnerSettings
from llm_policy_gen.lm.backbone import default_lm_cache, load_language_model
from llm_policy_gen.lm.features import features_table
from llm_policy_gen.lm.heads import ScoresLearner, lora_scores_head
from llm_policy_gen.lm.lora import lora_model, trainable_count
from llm_policy_gen.lm.scores import continuations, scoring_prompts, tokenize_task, word_counts
from llm_policy_gen.run.learner_env import LearnerEnv

DEFAULT_MODEL = Path.home() / ".cache" / "llm-policy-gen" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-model", default=str(DEFAULT_MODEL))
    ap.add_argument("--lm-cache", default=None)
    ap.add_argument("--env", default="FrozenLake-v1.deterministic")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n-steps", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--learning-rate", type=float, default=3e-4)
    ap.add_argument("--norm", default="word", choices=["word", "token", "sum"])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    if args.device == "cpu":
        torch.set_num_threads(1)
    t0 = time.perf_counter()
    lm = load_language_model(args.lm_model, Path(args.lm_cache) if args.lm_cache else default_lm_cache())
    spec = get_spec(args.env)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    task = tokenize_task(lm.tokenizer, scoring_prompts(spec, obs, acts), continuations(acts))
    adapted = lora_model(lm.model, args.rank, seed=args.seed, device=args.device)
    head = lora_scores_head(adapted, task, word_counts(acts), args.norm, args.device)
    settings = LearnerSettings(n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.epochs,
                               learning_rate=args.learning_rate, device=args.device, seed=args.seed)
    seeds = iter(range(100_000, 10_000_000))
    env = LearnerEnv(spec, lambda: next(seeds), lambda e: e)
    learner = ScoresLearner(env, features_table("onehot", obs.n_states), settings, head)
    held = [50_000 + j for j in range(args.episodes)]
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(json.dumps({"model": Path(lm.identity.path).name, "sha256": lm.identity.sha256[:12], "env": args.env,
                      "device": device_name, "rank": args.rank, "trainable": trainable_count(adapted),
                      "settings": vars(args), "setup_s": round(time.perf_counter() - t0, 1)}), flush=True)
    with Collector(spec) as collector:
        zero = collector.evaluate(learner.table(), held).mean
        print(json.dumps({"update": 0, "steps": 0, "heldout_mean": float(zero)}), flush=True)
        start = time.perf_counter()
        while time.perf_counter() - start < args.minutes * 60:
            learner.update()
            table = learner.table()
            mean = float(collector.evaluate(table, held).mean)
            print(json.dumps({"update": learner.updates, "steps": learner.steps, "heldout_mean": mean,
                              "wall_s": round(time.perf_counter() - start, 1), "model_passes": head.model_passes,
                              "actions": np.bincount(table, minlength=acts.n_actions).tolist()}), flush=True)


if __name__ == "__main__":
    main()
