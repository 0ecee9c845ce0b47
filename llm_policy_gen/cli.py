"""The ``llm-policy-gen`` command line.

Exit codes: 0 done; 2 bad input from the user (one line on stderr naming what was wrong and what is accepted);
1 anything else (the run directory is left consistent).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .errors import LLMPolicyGenError, UserError

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line with exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _add_train(sub: Any) -> None:
    p = sub.add_parser("train", help="run the iterative loop and write one run directory",
                       description="Run the loop: collect -> prompt -> propose -> validate -> evaluate -> keep.")
    p.add_argument("--env", dest="env_id", help="gymnasium id (see `envs`); default CartPole-v1")
    p.add_argument("--backend", help="offline, replay:PATH, gemini[:MODEL], openai[:MODEL], anthropic[:MODEL], "
                   "ollama[:MODEL]; default: the first configured provider, else offline")
    p.add_argument("--iterations", type=int, help="proposal rounds (default 30)")
    p.add_argument("--seed", type=int, help="run seed (default 0)")
    p.add_argument("--logs-dir", help="where run directories go (default logs)")
    p.add_argument("--run-id", help="name of the run directory")
    p.add_argument("--config", help="TOML file with settings (top level or [train]); options override it")
    p.add_argument("--output-format", choices=["auto", "table", "edits"], help="answer format (default auto)")
    p.add_argument("--mode", choices=["table", "direct"], help="table (default) or direct (the model picks actions)")
    p.add_argument("--base-url", help="provider base URL (local OpenAI-compatible servers, proxies)")
    p.add_argument("--budget-usd", type=float, help="stop cleanly before a call would pass this spend")
    p.add_argument("--no-cache", action="store_true", help="do not use the on-disk answer cache")
    p.add_argument("--repair-attempts", type=int, help="follow-up calls with validation errors (default 2)")
    p.add_argument("--max-retries", type=int, help="retries of timeouts, 429 and 5xx (default 4)")
    p.add_argument("--timeout", dest="timeout_s", type=float, help="per-request timeout in seconds (default 120)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: provider's)")
    p.add_argument("--patience", type=int, help="stop after N iterations without a new best (0 = never)")
    p.add_argument("--train-episodes", type=int, help="training episodes per iteration (default 4)")
    p.add_argument("--bins", type=_int_list, help="comma-separated bins per observation dimension")
    p.add_argument("--dims", type=_int_list, help="comma-separated observation indices to tabulate")
    p.add_argument("--env-kwargs", type=_json_object, help="JSON object of gymnasium.make keyword arguments")
    p.add_argument("--prices", dest="prices_file", help="TOML price table (default: the shipped one)")
    p.add_argument("--no-plots", action="store_true", help="skip training.png and testing.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from .backends.keys import load_env
    from .config import TrainConfig, load_toml
    from .loop import train

    load_env()
    cfg = TrainConfig()
    if args.config:
        cfg = cfg.updated(load_toml(args.config), f"config file {args.config}")
    cli: dict[str, Any] = {}
    for name in ("env_id", "backend", "iterations", "seed", "logs_dir", "run_id", "output_format", "mode",
                 "base_url", "budget_usd", "repair_attempts", "max_retries", "timeout_s", "temperature",
                 "patience", "train_episodes", "bins", "dims", "env_kwargs", "prices_file"):
        value = getattr(args, name)
        if value is not None:
            cli[name] = value
    if args.no_cache:
        cli["cache"] = False
    if args.no_plots:
        cli["plots"] = False
    if args.no_progress or not sys.stderr.isatty():
        cli["progress"] = False
    cfg = cfg.updated(cli, "command line").validate()
    result = train(cfg)
    s = result.summary
    solved = f"solved after {s['episodes_to_solve']} episodes" if s["solved"] else "not solved"
    cost = f", ${s['cost_usd']:.4f}" if s["is_llm"] else ""
    print(
        f"{s['env_id']} [{s['backend']}{':' + s['model'] if s['model'] and s['is_llm'] else ''}] "
        f"best {s['best_eval_mean']:.2f} on {s['best_eval_episodes']} held-out episodes, {solved}; "
        f"{s['iterations']} iterations, {s['episodes_total']} episodes, {s['llm_calls']} calls, "
        f"{s['input_tokens']}+{s['output_tokens']} tokens{cost}, {s['wall_s']:.1f} s"
    )
    print(f"run directory: {result.run_dir}")
    return 0


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="run a saved policy (run directory or policy JSON)",
                       description="Evaluate a saved table on fresh seeded episodes.")
    p.add_argument("target", help="a run directory (its best_policy.json) or a policy JSON file")
    p.add_argument("--episodes", type=int, default=100, help="episodes (default 100)")
    p.add_argument("--seed", type=int, default=0, help="first episode seed (default 0)")
    p.add_argument("--json", action="store_true", help="print {mean, std, episodes, steps} as JSON")
    p.add_argument("--env-kwargs", type=_json_object, help="JSON object of gymnasium.make keyword arguments")
    p.add_argument("--gif", help="also save an animation of one episode to this file")
    p.set_defaults(func=_cmd_evaluate)


def _load_policy_and_spec(target: str, env_kwargs: dict[str, Any] | None = None) -> tuple[Any, Any]:
    from .envs import get_spec
    from .policy import load_run_policy

    policy, spec = load_run_policy(target)
    if spec is None:
        spec = get_spec(policy.env_id)
    if env_kwargs:
        spec = spec.with_overrides(kwargs={**spec.kwargs, **env_kwargs})
    policy.check_matches(spec.env_id, spec.observation_discretizer(), spec.action_discretizer())
    return policy, spec


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from .collect import Collector

    if args.episodes < 1:
        raise UserError(f"bad --episodes {args.episodes}: accepted an integer >= 1")
    if args.seed < 0:
        raise UserError(f"bad --seed {args.seed}: accepted an integer >= 0")
    policy, spec = _load_policy_and_spec(args.target, args.env_kwargs)
    with Collector(spec) as collector:
        r = collector.evaluate(policy.table, [args.seed + j for j in range(args.episodes)])
    out = {"mean": float(r.mean), "std": float(np.std(r.returns)), "episodes": int(r.returns.size),
           "steps": int(r.steps)}
    if args.gif:
        from .gif import save_gif

        save_gif(policy, spec, Path(args.gif), seed=args.seed)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{spec.env_id}: mean {out['mean']:.2f} +- {out['std']:.2f} over {out['episodes']} episodes "
              f"({out['steps']} steps)")
    return 0


def _add_envs(sub: Any) -> None:
    p = sub.add_parser("envs", help="list the ready environments with their table sizes")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_envs)


def _cmd_envs(args: argparse.Namespace) -> int:
    from .envs import get_spec, shipped_env_ids

    rows: list[dict[str, Any]] = []
    for env_id in shipped_env_ids():
        try:
            spec = get_spec(env_id)
        except Exception as exc:  # an env whose extra (mujoco, box2d) is missing still gets listed
            rows.append({"env_id": env_id, "error": str(exc).splitlines()[0]})
            continue
        obs = spec.observation_discretizer()
        acts = spec.action_discretizer()
        shape = "x".join(str(d.bins) for d in spec.dims) if spec.dims else str(obs.n_states)
        rows.append({"env_id": env_id, "states": obs.n_states, "bins": shape, "actions": acts.n_actions,
                     "threshold": spec.reward_threshold})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'environment':<20} {'states':>7} {'bins':<12} {'actions':>7} {'solved at':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['env_id']:<20} unavailable: {r['error']}")
        else:
            thr = "-" if r["threshold"] is None else f"{r['threshold']:g}"
            print(f"{r['env_id']:<20} {r['states']:>7} {r['bins']:<12} {r['actions']:>7} {thr:>9}")
    print("Any other registered gymnasium id works too (generic spec from its spaces).")
    return 0


def _add_backends(sub: Any) -> None:
    p = sub.add_parser("backends", help="list backends and whether each is configured (never prints a key)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_backends)


def _cmd_backends(args: argparse.Namespace) -> int:
    from .backends import default_backend_spec, list_backends
    from .backends.keys import load_env

    load_env()
    rows = list_backends()
    name, why = default_backend_spec()
    if args.json:
        print(json.dumps({"backends": rows, "default": name, "default_reason": why}, indent=2))
        return 0
    print(f"{'backend':<10} {'default model':<20} {'LLM':<4} {'configured':<11} key variable / note")
    for r in rows:
        note = r["key_variable"] or r["description"]
        if not r["is_llm"]:
            note = "NOT an LLM: " + r["description"]
        print(f"{r['name']:<10} {r['default_model'] or '-':<20} {'yes' if r['is_llm'] else 'no':<4} "
              f"{'yes' if r['configured'] else 'no':<11} {note}")
    print(f"train without --backend uses: {name} ({why})")
    return 0


def _add_optional(sub: Any) -> None:
    """Commands whose modules register themselves (compare, plot)."""
    import importlib

    for module in ("llm_policy_gen.compare", "llm_policy_gen.figures"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.add_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llm-policy-gen", description="An LLM writes and rewrites a tabular RL policy.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_train(sub)
    _add_evaluate(sub)
    _add_envs(sub)
    _add_backends(sub)
    _add_optional(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad option (already reported in one line)
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return int(args.func(args))
    except UserError as exc:
        from .backends.keys import redact

        print(f"llm-policy-gen {args.command}: error: {redact(str(exc)).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (LLMPolicyGenError, OSError) as exc:
        from .backends.keys import redact

        print(f"llm-policy-gen {args.command}: failed: {redact(str(exc)).splitlines()[0]}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
