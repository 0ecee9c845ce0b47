"""``llm-policy-gen envs``: the ready environments and spec variants, with their table sizes and answer formats, and
what each spec changes from gymnasium's registration (keyword arguments, step limit, reward wrappers) with the
source of its solved threshold."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``envs``."""
    p = sub.add_parser("envs", help="list the ready environments with their table sizes and what differs from "
                                    "gymnasium's registration")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_envs)


def _row(env_id: str) -> dict[str, Any]:
    from ..envs import get_spec, load_spec_file
    from ..envs.catalog import shipped_spec_file
    from ..envs.gymdiff import gym_differences
    from ..formats import resolve_format_name

    try:
        spec = get_spec(env_id)
    except Exception as exc:  # an env whose extra (mujoco, box2d) is missing still gets listed
        return {"env_id": env_id, "error": str(exc).splitlines()[0]}
    obs = spec.observation_discretizer()
    acts = spec.action_discretizer()
    shape = "x".join(str(d.bins) for d in spec.dims) if spec.dims else str(obs.n_states)
    # The answer format a run gets without --output-format: the spec's train default, else auto's choice.
    given = str(spec.train_defaults.get("output_format", "auto"))
    fmt = f"{resolve_format_name(given, obs.n_states)} (auto)" if given == "auto" else given
    path = shipped_spec_file(env_id)
    declared = load_spec_file(path).reward_threshold if path is not None else None
    diff = gym_differences(spec, declared)
    return {"env_id": env_id, "states": obs.n_states, "bins": shape, "actions": acts.n_actions,
            "threshold": spec.reward_threshold, "format": fmt, "max_episode_steps": spec.max_episode_steps,
            "kwargs": dict(spec.kwargs), "gymnasium": diff.to_dict(), "differences": diff.lines()}


def _cmd_envs(args: argparse.Namespace) -> int:
    from ..envs import shipped_env_ids
    from ..envs.catalog import spec_variants

    rows = [_row(env_id) for env_id in sorted([*shipped_env_ids(), *spec_variants()])]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len("environment"), *(len(r["env_id"]) for r in rows))
    src = max(len("threshold from"), *(len(r["gymnasium"]["threshold_source"]) for r in rows if "error" not in r))
    print(f"{'environment':<{w}} {'states':>7} {'bins':<24} {'actions':>7} {'solved at':>9}  "
          f"{'threshold from':<{src}}  format")
    for r in rows:
        if "error" in r:
            print(f"{r['env_id']:<{w}} unavailable: {r['error']}")
            continue
        thr = "-" if r["threshold"] is None else f"{r['threshold']:g}"
        print(f"{r['env_id']:<{w}} {r['states']:>7} {r['bins']:<24} {r['actions']:>7} {thr:>9}  "
              f"{r['gymnasium']['threshold_source'] or '-':<{src}}  {r['format']}")
        if r["differences"]:
            print(f"{'':<{w}}   not gymnasium's: {'; '.join(r['differences'])}")
    print("Any other registered gymnasium id works too (generic spec from its spaces).")
    return 0
