"""The ``llm-policy-gen`` command line.

Exit codes: 0 done; 2 bad input from the user (one line on stderr naming what was wrong and what is accepted);
1 anything else (the run directory is left consistent).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from . import __version__
from .config import TRAIN_OPTIONS as _TRAIN_OPTIONS  # the settings `train` takes as options, from the fields
from .errors import LLMPolicyGenError, RunInterrupted, UserError

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
    from .config import OPTIONS

    p = sub.add_parser("train", help="run the iterative loop and write one run directory (or --resume one)",
                       description="Run the loop: collect -> prompt -> K candidates -> validate -> keep -> log.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted or killed run from its directory")
    p.add_argument("--config", help="TOML file (top level or [train]) or a run's config.json; options override it")
    p.add_argument("--spec", help="a spec variant of the environment (see `envs`), e.g. rich: as --env ENV.rich")
    for option in OPTIONS.values():
        if option.flag:
            _add_setting(p, option.name, option.flag, option.help())
    p.set_defaults(func=_cmd_train)


def _add_setting(p: argparse.ArgumentParser, name: str, flag: str, help_text: str) -> None:
    """The flag of one setting, its parsing read from the field's type: a number, a choice, a comma list
    (``--log csv,tensorboard``, ``--bins 6,6``), a JSON object, or a switch that sets the opposite of the default
    (``--no-cache``, ``--quiet``). Unset, it is None: the config file or the default decides."""
    import types
    import typing

    from .config import TrainConfig

    field = TrainConfig.model_fields[name]
    kind, help_text = field.annotation, help_text.replace("%", "%%")
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if kind is bool:
        p.add_argument(flag, dest=name, action="store_const", const=not field.default, help=help_text)
        return
    if typing.get_origin(kind) is typing.Literal:
        p.add_argument(flag, dest=name, choices=typing.get_args(kind), help=help_text)
        return
    parsers: dict[Any, tuple[Callable[[str], Any], str]] = {
        int: (int, "N"), float: (float, "X"), list[int]: (_int_list, "N,N"), list[str]: (_name_list, "NAME,NAME"),
        dict[str, Any]: (_json_object, "JSON")}
    parse, metavar = parsers.get(kind, (str, flag[2:].upper().replace("-", "_")))
    p.add_argument(flag, dest=name, type=parse, metavar=metavar, help=help_text)


def _name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _cmd_train(args: argparse.Namespace) -> int:
    from .clients.keys import load_env
    from .config import TrainConfig, load_config_file
    from .run import resume, train

    load_env()
    cli: dict[str, Any] = {n: getattr(args, n) for n in _TRAIN_OPTIONS if getattr(args, n) is not None}
    if args.resume:
        if args.config:
            raise UserError("--resume takes the run's own config.json; do not give --config with it")
        if args.spec:
            raise UserError("--resume takes the run's own env spec; do not give --spec with it")
        result = resume(Path(args.resume), cli)
    else:
        file_settings = load_config_file(args.config) if args.config else {}
        if "env_id" not in cli and isinstance(file_settings.get("env_id"), str):
            from .envs.catalog import check_env_named

            # a config file (maybe another's run's config.json) imports a module:EnvId module only when named
            check_env_named(file_settings["env_id"], None, f"the config file {args.config}")
        if args.spec:
            from .envs.catalog import variant_id

            env = cli.get("env_id") or file_settings.get("env_id") or TrainConfig.model_fields["env_id"].default
            cli["env_id"] = variant_id(str(env), args.spec)
        cfg = TrainConfig.build((file_settings, f"config file {args.config}"), (cli, "command line"))
        result = train(cfg)
    s = result.summary
    # The run's files are written: a console whose reader went away (`| head -1`) does not change its outcome.
    _print_dropped(summary_line(s))
    _print_dropped(f"run directory: {result.run_dir}")
    if s["stop_reason"] == "backend unreachable":
        _print_dropped(f"llm-policy-gen train: failed: the backend answered no call for "
                       f"{s.get('unreachable_after', 'several')} iterations in a row; resume with `train --resume "
                       f"{result.run_dir}` once it is back", sys.stderr)
        return 1
    return 0


def summary_line(s: dict[str, Any]) -> str:
    """The one line ``train`` prints about a finished run (from its summary.json)."""
    from .backends import is_client
    from .console import calls_text, cost_text, plural

    if s["solved"]:
        solved = f"solved after {plural(s['episodes_to_solve'], 'episode')}"
    else:
        solved = "not solved" if s.get("reward_threshold") is not None else "no threshold"
    cost = f", {cost_text(s['cost_usd'], s.get('cost_complete', True))}" if s["is_llm"] else ""
    best = "n/a" if s["best_eval_mean"] is None else f"{s['best_eval_mean']:.2f}"
    model = f":{s['model']}" if s["model"] and s["is_llm"] else ""
    mode = "" if s["mode"] == "table" else f", {s['mode']} mode"
    made = calls_text(s["llm_calls"], s.get("failed_calls") or 0, s.get("first_call_error"))
    calls = (f"{made}, {s['input_tokens']}+{s['output_tokens']} tokens{cost}"
             if is_client(s["backend"]) else f"{plural(s['llm_calls'], 'proposal')} (no model called)")
    never = " (no candidate was ever accepted: this is the initial table)" if s.get("never_accepted") \
        and s["mode"] != "direct" else ""
    when = " (measured once, at the end)" if s["mode"] == "direct" and s["best_eval_episodes"] else ""
    return (f"{s['env_id']} [{s['backend']}{model}{mode}] held-out mean {best} over "
            f"{plural(s['best_eval_episodes'], 'episode')}{when}{never}, {solved}; "
            f"{plural(s['iterations'], 'iteration')}, {plural(s['episodes_total'], 'episode')}, {calls}, "
            f"{s['wall_s']:.1f} s; stop: {s['stop_reason']}")


def _print_dropped(text: str, stream: TextIO | None = None) -> None:
    """Print a line that is a by-product: when its reader is gone (a closed pipe), it is dropped."""
    try:
        print(text, file=stream or sys.stdout, flush=True)
    except OSError:
        _release(stream or sys.stdout)


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="run a saved policy (run directory or policy JSON)",
                       description="Evaluate a saved table. On a run directory the default seeds are the run's "
                       "held-out seeds, so the mean reproduces summary.json's best_eval_mean.")
    p.add_argument("target", help="a run directory (its best_policy.json) or a policy JSON file")
    p.add_argument("--episodes", type=int, help="episodes (default: the run's held-out count, else 100)")
    p.add_argument("--seed", type=int, help="first episode seed (default: the run's first held-out seed, else 0)")
    p.add_argument("--json", action="store_true",
                   help="print {mean, std, episodes, steps, returns, min, max, env_id, seeds} as JSON")
    p.add_argument("--env-kwargs", type=_json_object,
                   help="JSON object of gymnasium.make keyword arguments (must match the policy's)")
    p.add_argument("--gif", help="also save an animation of one episode to this file")
    p.add_argument("--env", dest="env_id", help="the policy's environment; needed (the same) when it is "
                   "module:EnvId, whose module is imported only then")
    p.set_defaults(func=_cmd_evaluate)


def _load_policy_and_spec(target: str, env_kwargs: dict[str, Any] | None = None,
                          env_id: str | None = None) -> tuple[Any, Any]:
    from .envs import get_spec
    from .envs.tailor import apply_env_kwargs
    from .policy import load_run_policy

    policy, spec = load_run_policy(target, env_id)
    if spec is None:
        spec = get_spec(policy.env_id)
    if env_kwargs:
        spec = apply_env_kwargs(spec, env_kwargs)
    policy.check_against(spec)
    return policy, spec


def _run_heldout(target: str) -> tuple[int, int] | None:
    """(first held-out seed, episodes) of the run ``target`` belongs to, when it is a run directory."""
    from .config import SEED_MAX  # noqa: F401  (documents the seed range)
    from .keeper import SeedPlan

    d = Path(target)
    folder = d if d.is_dir() else d.parent
    if not d.is_dir() and folder.name == "policies":  # RUN/policies/iter_NNNN.json
        folder = folder.parent
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        return None
    try:
        rec = json.loads(cfg_file.read_text(encoding="utf-8"))
        first = int(rec.get("seeds", {}).get("heldout", SeedPlan(int(rec["seed"])).heldout(0)))
        n = int(rec.get("config", {}).get("heldout_episodes", 100))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return first, n


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from .collect import Collector
    from .config import SEED_MAX

    if args.episodes is not None and args.episodes < 1:
        raise UserError(f"bad --episodes {args.episodes}: accepted an integer >= 1")
    if args.seed is not None and not 0 <= args.seed <= SEED_MAX:
        raise UserError(f"bad --seed {args.seed}: accepted an integer in 0..{SEED_MAX}")
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
        from .gif import save_gif

        written = save_gif(policy, spec, Path(args.gif), seed=first)
        print(f"wrote {written}", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        which = "the run's held-out seeds" if out["seeds_are_heldout"] else f"seeds {first}..{first + n - 1}"
        print(f"{spec.env_id}: mean {out['mean']:.2f} +- {out['std']:.2f} over {out['episodes']} episodes on {which} "
              f"({out['steps']} steps)")
    return 0


def _add_envs(sub: Any) -> None:
    p = sub.add_parser("envs", help="list the ready environments with their table sizes")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_envs)


def _cmd_envs(args: argparse.Namespace) -> int:
    from .envs import get_spec, shipped_env_ids
    from .envs.catalog import spec_variants
    from .formats import resolve_format_name

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


def _add_backends(sub: Any) -> None:
    p = sub.add_parser("backends", help="list backends and whether each is configured (never prints a key)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--check", action="store_true", help="ask local servers (ollama) whether they answer")
    p.set_defaults(func=_cmd_backends)


def _cmd_backends(args: argparse.Namespace) -> int:
    from .backends import default_backend_spec, list_backends
    from .clients.keys import load_env

    load_env()
    rows = list_backends(check_servers=args.check)
    name, why = default_backend_spec()
    if args.json:
        print(json.dumps({"backends": rows, "default": name, "default_reason": why}, indent=2))
        return 0
    print(f"{'backend':<10} {'default model':<20} {'LLM':<4} {'configured':<12} key variable / note")
    for r in rows:
        note = r["key_variable"] or r["description"]
        if not r["is_llm"]:
            note = "NOT an LLM: " + r["description"]
        conf = {True: "yes", False: "no", None: "not checked"}[r["configured"]]
        print(f"{r['name']:<10} {r['default_model'] or '-':<20} {'yes' if r['is_llm'] else 'no':<4} "
              f"{conf:<12} {note}")
    if any(r["configured"] is None for r in rows):
        print("(ollama: 'not checked' -- `backends --check` asks its server)")
    print(f"train without --backend uses: {name} ({why})")
    return 0


def _add_optional(sub: Any) -> None:
    """Commands whose modules register themselves (compare, plot)."""
    import importlib

    for module in ("llm_policy_gen.sweep.compare", "llm_policy_gen.plotting.command", "llm_policy_gen.report"):
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
        code = int(args.func(args))
        sys.stdout.flush()  # here, so that a reader that went away is seen here and not at exit
        return code
    except BrokenPipeError:  # `llm-policy-gen envs | head`: the reader has what it wanted; exit as `cat` would
        _release(sys.stdout)
        return 128 + signal.SIGPIPE
    except UserError as exc:
        from .clients.keys import redact

        _print_dropped(f"llm-policy-gen {args.command}: error: {redact(str(exc)).splitlines()[0]}", sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        _print_dropped(_interrupted(exc), sys.stderr)
        return 130
    except (LLMPolicyGenError, OSError) as exc:
        from .clients.keys import redact

        _print_dropped(f"llm-policy-gen {args.command}: failed: {redact(str(exc)).splitlines()[0]}", sys.stderr)
        return 1


def _interrupted(exc: KeyboardInterrupt) -> str:
    """What Ctrl-C leaves: the run directory, what it keeps and the command that goes on."""
    if not isinstance(exc, RunInterrupted):
        return "interrupted"
    kept = f"keeps iterations 1..{exc.kept}" if exc.kept else "keeps no finished iteration yet"
    return (f"interrupted: the run directory {exc.run_dir} {kept}; go on with: llm-policy-gen train --resume "
            f"{shlex.quote(exc.run_dir)}")


def _release(stream: TextIO) -> None:
    """A standard stream whose reader went away: point it at /dev/null, so that nothing more fails on it (not even
    the flush at exit, which would print "Exception ignored ... BrokenPipeError")."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # not a real file (a test's captured stream)
        return
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
