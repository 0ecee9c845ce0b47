"""``llm-policy-gen envs``: the ready environments and spec variants, with their table sizes and answer formats."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``envs``."""
    p = sub.add_parser("envs", help="list the ready environments with their table sizes")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_envs)


def _cmd_envs(args: argparse.Namespace) -> int:
    from ..envs import get_spec, shipped_env_ids
    from ..envs.catalog import spec_variants
    from ..formats import resolve_format_name

    rows: list[dict[str, Any]] = []
    for env_id in sorted([*shipped_env_ids(), *spec_variants()]):
        try:
            spec = get_spec(env_id)
        except Exception as exc:  # an env whose extra (mujoco, box2d) is missing still gets listed
            rows.append({"env_id": env_id, "error": str(exc).splitlines()[0]})
            continue
        obs = spec.observation_discretizer()
        acts = spec.action_discretizer()
        shape = "x".join(str(d.bins) for d in spec.dims) if spec.dims else str(obs.n_states)
        # The answer format a run gets without --output-format: the spec's train default, else auto's choice.
        given = str(spec.train_defaults.get("output_format", "auto"))
        fmt = f"{resolve_format_name(given, obs.n_states)} (auto)" if given == "auto" else given
        rows.append({"env_id": env_id, "states": obs.n_states, "bins": shape, "actions": acts.n_actions,
                     "threshold": spec.reward_threshold, "format": fmt})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'environment':<24} {'states':>7} {'bins':<24} {'actions':>7} {'solved at':>9}  format")
    for r in rows:
        if "error" in r:
            print(f"{r['env_id']:<24} unavailable: {r['error']}")
        else:
            thr = "-" if r["threshold"] is None else f"{r['threshold']:g}"
            print(f"{r['env_id']:<24} {r['states']:>7} {r['bins']:<24} {r['actions']:>7} {thr:>9}  {r['format']}")
    print("Any other registered gymnasium id works too (generic spec from its spaces).")
    return 0
