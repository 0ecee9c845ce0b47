"""``llm-policy-gen evaluate``: run a saved table on seeded episodes (a run's held-out seeds by default); a peer run
(``--mode peer``) runs its network."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..schema.argtypes import json_object
from ..storage.safe_json import loads

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


def _network_policy(target: str, env_kwargs: dict[str, Any] | None, env_id: str | None) -> tuple[Any, Any] | None:
    """A peer run's network (``--mode peer``: ``peer_policy.json`` and its safetensors) and the run's spec; None when
    ``target`` is not a run directory holding one. Without the peers extra, one line."""
    import hashlib

    from ..envs.catalog import check_env_named
    from ..envs.spec import EnvSpec
    from ..errors import PolicyFileError
    from ..run.files import run_dir_of

    rd = run_dir_of(target)
    if rd is None or not Path(target).is_dir() or not rd.network_policy[0].is_file():
        return None
    facts_path, weights_path = rd.network_policy
    from ..peers import require_peers

    require_peers(f"evaluate {target}: the run's policy is a peer's network, which")
    record = rd.load_config() or {}
    facts = loads(facts_path.read_text(encoding="utf-8"))
    if not isinstance(facts, dict):
        raise PolicyFileError(f"{facts_path} holds no JSON object")
    check_env_named(str(facts.get("env_id")), env_id, f"the run {target}")  # before anything is imported
    try:
        spec = EnvSpec.from_dict(record["env_spec"])
        data = weights_path.read_bytes()
    except (KeyError, ValueError, TypeError, OSError) as exc:
        raise PolicyFileError(f"{target}: the peer run's configuration or weights cannot be read ({exc})") from None
    if facts.get("weights_sha256") != hashlib.sha256(data).hexdigest():
        raise PolicyFileError(f"{facts_path} does not describe {weights_path.name} (another sha256): the run was cut "
                              f"between the two writes; resume it (train --resume {target}) to write them again")
    if env_kwargs and env_kwargs != facts.get("env_kwargs"):
        raise PolicyFileError(f"--env-kwargs {env_kwargs} differ from the peer's environment "
                              f"({facts.get('env_kwargs')}); a network runs only in the environment it learned")
    from ..peers.network_policy import NetworkPolicy

    return NetworkPolicy.from_bytes(facts, data, str(weights_path)), spec


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
    network = _network_policy(args.target, args.env_kwargs, args.env_id)
    if network is not None and args.gif:
        raise UserError(f"--gif draws a table policy; {args.target} is a peer run, whose network is not drawn: "
                        "leave --gif out")
    policy, spec = network or _load_policy_and_spec(args.target, args.env_kwargs, args.env_id)
    held = _run_heldout(args.target)
    first = args.seed if args.seed is not None else (held[0] if held else 0)
    n = args.episodes if args.episodes is not None else (held[1] if held else 100)
    seeds = [first + j for j in range(n)]
    with Collector(spec) as collector:
        r = collector.evaluate(policy if network is not None else policy.table, seeds)
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
