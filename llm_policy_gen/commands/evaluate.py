"""``llm-policy-gen evaluate``: run a saved table on seeded episodes (a run's held-out seeds by default)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..storage.safe_json import loads
from .argtypes import json_object

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``evaluate``."""
    p = sub.add_parser("evaluate", help="run a saved policy (run directory or policy JSON)",
                       description="Evaluate a saved table. On a run directory the default seeds are the run's "
                       "held-out seeds, so the mean reproduces summary.json's held-out mean of the best policy.")
    p.add_argument("target", help="a run directory (its best_policy.json) or a policy JSON file")
    p.add_argument("--episodes", type=int, help="episodes (default: the run's held-out count, else 100)")
    p.add_argument("--seed", type=int, help="first episode seed (default: the run's first held-out seed, else 0)")
    p.add_argument("--json", action="store_true",
                   help="print {mean, std, episodes, steps, returns, min, max, env_id, seeds} as JSON")
    p.add_argument("--env-kwargs", type=json_object,
                   help="JSON object of gymnasium.make keyword arguments (must match the policy's)")
    p.add_argument("--gif", help="also save an animation of one episode to this file")
    p.add_argument("--env", dest="env_id", help="the policy's environment; needed (the same) when it is "
                   "module:EnvId, whose module is imported only then")
    p.set_defaults(func=_cmd_evaluate)


def _load_policy_and_spec(target: str, env_kwargs: dict[str, Any] | None = None,
                          env_id: str | None = None) -> tuple[Any, Any]:
    from ..envs import get_spec
    from ..envs.tailor import apply_env_kwargs
    from ..run.files import load_run_policy

    policy, spec = load_run_policy(target, env_id)
    if spec is None:
        spec = get_spec(policy.env_id)
    if env_kwargs:
        spec = apply_env_kwargs(spec, env_kwargs)
    policy.check_against(spec)
    return policy, spec


def _run_heldout(target: str) -> tuple[int, int] | None:
    """(first held-out seed, episodes) of the run ``target`` belongs to, when it is a run directory."""
    from ..keeper import SeedPlan
    from ..run.files import config_of, run_dir_of

    rd = run_dir_of(target)
    if rd is None:
        return None
    try:
        rec = loads(rd.config.read_text(encoding="utf-8"))
        if isinstance(rec, dict):
            rec = config_of(rec, rd.config)  # a newer layout: one line (it was refused loading the policy, too)
        first = int(rec.get("seeds", {}).get("heldout", SeedPlan(int(rec["seed"])).heldout(0)))
        n = int(rec.get("config", {}).get("heldout_episodes", 100))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return first, n


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from ..collect import Collector
    from ..config import SEED_MAX

    if args.episodes is not None and args.episodes < 1:
        raise UserError(f"bad --episodes {args.episodes}: accepted an integer >= 1")
    if args.seed is not None and not 0 <= args.seed <= SEED_MAX:
        raise UserError(f"bad --seed {args.seed}: accepted an integer in 0..{SEED_MAX}")
    if args.gif:
        from ..plotting.gif import check_gif_path

        check_gif_path(Path(args.gif))  # before any episode runs
    policy, spec = _load_policy_and_spec(args.target, args.env_kwargs, args.env_id)
    held = _run_heldout(args.target)
    first = args.seed if args.seed is not None else (held[0] if held else 0)
    n = args.episodes if args.episodes is not None else (held[1] if held else 100)
    seeds = [first + j for j in range(n)]
    with Collector(spec) as collector:
        r = collector.evaluate(policy.table, seeds)
    out = {"mean": float(r.mean), "std": float(np.std(r.returns)), "episodes": int(r.returns.size),
           "steps": int(r.steps), "returns": [float(x) for x in r.returns], "min": float(r.returns.min()),
           "max": float(r.returns.max()), "env_id": spec.env_id, "seeds": [first, first + n - 1],
           "seeds_are_heldout": held is not None and args.seed is None}
    if args.gif:
        from ..plotting.gif import save_gif

        written = save_gif(policy, spec, Path(args.gif), seed=first)
        print(f"wrote {written}", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        which = "the run's held-out seeds" if out["seeds_are_heldout"] else f"seeds {first}..{first + n - 1}"
        print(f"{spec.env_id}: mean {out['mean']:.2f} +- {out['std']:.2f} over {out['episodes']} episodes on {which} "
              f"({out['steps']} steps)")
    return 0
