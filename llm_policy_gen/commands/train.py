"""``llm-policy-gen train``: run the loop and write one run directory, or ``--resume`` one. Its flags are generated
from the settings' fields: the shared ones first, then each plug-in's options under its name."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..loggers.console import print_dropped
from ..registry import Option
from ..schema.aliases import note_old_spelling, take_notes
from ..schema.argtypes import int_list, json_object, name_list

__all__ = ["add_parser", "summary_line"]


def add_parser(sub: Any) -> None:
    from ..config import options
    from ..schema.aliases import OLD_FLAGS

    p = sub.add_parser("train", help="run the iterative loop and write one run directory (or --resume one)",
                       description="Run the loop: collect -> prompt -> K candidates -> validate -> keep -> log. "
                       "The settings every run shares come first, then each plug-in's own options under its name; "
                       "an option of a plug-in this run does not use is recorded and noted, and changes nothing.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted or killed run from its directory")
    p.add_argument("--config", help="TOML file (top level or [train]) or a run's config.json; options override it")
    p.add_argument("--spec", help="a spec variant of the environment (see `envs`), e.g. rich: as --env ENV.rich")
    groups: dict[str, Any] = {"": p}
    for option in options().values():
        if option.flag:
            if option.section not in groups:
                groups[option.section] = p.add_argument_group(f"options of {option.section}")
            _add_setting(groups[option.section], option)
    for flag, setting in OLD_FLAGS.items():  # an old name's option (--eval-start) still works, unlisted, noted
        if options()[setting].flag:
            _add_setting(p, options()[setting], flag, argparse.SUPPRESS)
    p.set_defaults(func=_cmd_train)


def _noted(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action`` that first prints a one-line deprecation note on stderr naming the flag of today."""

    class Noted(action):  # type: ignore[valid-type,misc]
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
            note_old_spelling(f"note: {option_string} is the old spelling of {self.flag_of_today} (deprecated; it "
                              "still works)")
            super().__call__(parser, namespace, values, option_string)

    return Noted


def _add_setting(p: Any, option: Option, flag: str | None = None, help_text: str | None = None) -> None:
    """The flag of one setting, its parsing read from the field's type: a number, a choice, a comma list
    (``--log csv,tensorboard``, ``--bins 6,6``), a JSON object, or a switch that sets the opposite of the default
    (``--no-cache``, ``--quiet``). Unset, it is None: the config file or the default decides."""
    import types
    import typing

    old = flag is not None and flag != option.flag  # an old spelling: noted when used
    flag = flag or option.flag
    assert flag is not None
    name, kind = option.name, option.annotation
    help_text = option.help().replace("%", "%%") if help_text is None else help_text
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    store: type[argparse.Action] = _noted(argparse._StoreAction) if old else argparse._StoreAction
    if kind is bool:
        store_const = _noted(argparse._StoreConstAction) if old else argparse._StoreConstAction
        action = p.add_argument(flag, dest=name, action=store_const, const=not option.default, help=help_text)
    elif typing.get_origin(kind) is typing.Literal:
        action = p.add_argument(flag, dest=name, action=store, choices=typing.get_args(kind), help=help_text)
    else:
        parsers: dict[Any, tuple[Callable[[str], Any], str]] = {
            int: (int, "N"), float: (float, "X"), list[int]: (int_list, "N,N"),
            list[str]: (name_list, "NAME,NAME"), dict[str, Any]: (json_object, "JSON")}
        parse, metavar = parsers.get(kind, (str, flag[2:].upper().replace("-", "_")))
        action = p.add_argument(flag, dest=name, action=store, type=parse, metavar=metavar, help=help_text)
    action.flag_of_today = option.flag  # the flag of today, for the note an old spelling prints


def _cmd_train(args: argparse.Namespace) -> int:
    from ..clients.keys import load_env_noted
    from ..config import TrainConfig, train_options
    from ..loggers.console import printable
    from ..run import resume, train
    from ..run.files import experiment_settings

    load_env_noted()
    cli: dict[str, Any] = {n: getattr(args, n) for n in train_options() if getattr(args, n, None) is not None}
    if args.resume:
        if args.config:
            raise UserError("--resume takes the run's own config.json; do not give --config with it")
        if args.spec:
            raise UserError("--resume takes the run's own env spec; do not give --spec with it")
        _print_notes()
        result = resume(Path(args.resume), cli)
    else:
        file_settings = experiment_settings(args.config) if args.config else {}
        if "env_id" not in cli and isinstance(file_settings.get("env_id"), str):
            from ..envs.catalog import check_env_named

            # a config file (maybe another's run's config.json) imports a module:EnvId module only when named
            check_env_named(file_settings["env_id"], None, f"the config file {args.config}")
        if args.spec:
            from ..envs.catalog import variant_id

            env = cli.get("env_id") or file_settings.get("env_id") or TrainConfig.model_fields["env_id"].default
            cli["env_id"] = variant_id(str(env), args.spec)
        cfg = TrainConfig.build((file_settings, f"config file {args.config}"), (cli, "command line"))
        _print_notes()
        result = train(cfg)
    s = result.summary
    # The run's files are written: a console whose reader went away (`| head -1`) does not change its outcome.
    print_dropped(printable(summary_line(s)))
    print_dropped(f"run directory: {result.run_dir}")
    if s["stop_reason"] == "backend unreachable":
        print_dropped(f"llm-policy-gen train: failed: the backend answered no call for "
                       f"{s.get('unreachable_after', 'several')} iterations in a row; resume with `train --resume "
                       f"{result.run_dir}` once it is back", sys.stderr)
        return 1
    return 0


def _print_notes() -> None:
    """The deprecation notes of this command (old flags and keys it was given), once its settings are read."""
    for line in take_notes():
        print_dropped(line, sys.stderr)


def summary_line(s: dict[str, Any]) -> str:
    """The one line ``train`` prints about a finished run (from its summary.json). A run without a backend is named
    by its method and model alone (its summary's ``backend``: ``lm-policy(SmolLM2-135M-Instruct.Q4_1)``)."""
    from ..backends import BACKENDS, is_client
    from ..config import TrainConfig
    from ..loggers.console import calls_text, cost_text, plural
    from ..schema.aliases import summary_in

    s = summary_in(s)
    if s["solved"]:
        solved = f"solved after {plural(s['episodes_to_solve'], 'episode')}"
    else:
        solved = "not solved" if s.get("reward_threshold") is not None else "no threshold"
    mode_class = _mode_class(s["mode"])
    backend = s["backend"] in BACKENDS and getattr(mode_class, "needs_backend", True)  # else a method without one
    client = backend and is_client(s["backend"])
    cost = f", {cost_text(s['cost_usd'], s.get('cost_complete', True))}" if client and s["is_llm"] else ""
    best = "n/a" if s["best_heldout_mean"] is None else f"{s['best_heldout_mean']:.2f}"
    model = f":{s['model']}" if backend and s["model"] and s["is_llm"] else ""
    default = TrainConfig.model_fields["mode"].default  # the default mode goes unsaid
    mode = "" if s["mode"] == default or not backend else f", {s['mode']} mode"
    made = calls_text(s["llm_calls"], s.get("failed_calls") or 0, s.get("first_call_error"))
    calls = (f"{made}, {s['input_tokens']}+{s['output_tokens']} tokens{cost}" if client
             else "no model calls" if not backend else f"{plural(s['llm_calls'], 'proposal')} (no model called)")
    judges = bool(getattr(mode_class, "judges_candidates", True))
    never = " (no candidate was ever accepted: this is the initial table)" if s.get("never_accepted") \
        and judges and s.get("select") != "none" else ""
    never = " (the final policy: --select none)" if s.get("select") == "none" and judges else never
    when = " (measured once, at the end)" if not judges and not getattr(mode_class, "heldout_each_iteration", False) \
        and s["best_heldout_episodes"] else ""
    return (f"{s['env_id']} [{s['backend']}{model}{mode}] held-out mean {best} over "
            f"{plural(s['best_heldout_episodes'], 'episode')}{when}{never}, {solved}; "
            f"{plural(s['iterations'], 'iteration')}, {plural(s['episodes_total'], 'episode')} "
            f"({plural(s.get('env_steps_total') or 0, 'step')}), {calls}, "
            f"{s['wall_s']:.1f} s; stop: {s['stop_reason']}")


def _mode_class(mode: str) -> type | None:
    """The class of ``mode``, whose attributes say what it needs and does (None for one no longer registered: it
    reads as a table mode)."""
    from ..modes import MODES

    return MODES.load(mode) if mode in MODES else None
