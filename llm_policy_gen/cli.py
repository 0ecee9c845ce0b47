"""The ``llm-policy-gen`` command line.

Exit codes: 0 done; 2 bad input from the user (one line on stderr naming what was wrong and what is accepted);
1 anything else (the run directory is left consistent); 130 for Ctrl-C, and 143 and 129 for SIGTERM and SIGHUP,
which are handled as Ctrl-C is (the summary written, the lock released, the resume command printed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from . import __version__
from .commands.argtypes import int_list, json_object, name_list
from .errors import LLMPolicyGenError, RunInterrupted, SweepInterrupted, UserError, signal_of
from .locks import stops_as_interrupts
from .registry import Option

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line with exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but options no parser knows are reported by the command's own parser, so that the
        message names it (``llm-policy-gen compare: error: ...``), not only the program."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
            owner = commands.get(str(getattr(parsed, "command", "")), self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _add_train(sub: Any) -> None:
    from .config import options
    from .schema.aliases import OLD_FLAGS

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
    for flag, setting in OLD_FLAGS.items():  # an old name's option (--eval-start) still works, unlisted
        if options()[setting].flag:
            _add_setting(p, options()[setting], flag, argparse.SUPPRESS)
    p.set_defaults(func=_cmd_train)


def _add_setting(p: Any, option: Option, flag: str | None = None, help_text: str | None = None) -> None:
    """The flag of one setting, its parsing read from the field's type: a number, a choice, a comma list
    (``--log csv,tensorboard``, ``--bins 6,6``), a JSON object, or a switch that sets the opposite of the default
    (``--no-cache``, ``--quiet``). Unset, it is None: the config file or the default decides."""
    import types
    import typing

    flag = flag or option.flag
    assert flag is not None
    name, kind = option.name, option.annotation
    help_text = option.help().replace("%", "%%") if help_text is None else help_text
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if kind is bool:
        p.add_argument(flag, dest=name, action="store_const", const=not option.default, help=help_text)
        return
    if typing.get_origin(kind) is typing.Literal:
        p.add_argument(flag, dest=name, choices=typing.get_args(kind), help=help_text)
        return
    parsers: dict[Any, tuple[Callable[[str], Any], str]] = {
        int: (int, "N"), float: (float, "X"), list[int]: (int_list, "N,N"), list[str]: (name_list, "NAME,NAME"),
        dict[str, Any]: (json_object, "JSON")}
    parse, metavar = parsers.get(kind, (str, flag[2:].upper().replace("-", "_")))
    p.add_argument(flag, dest=name, type=parse, metavar=metavar, help=help_text)


def _cmd_train(args: argparse.Namespace) -> int:
    from .clients.keys import load_env_noted
    from .config import TrainConfig, train_options
    from .console import printable
    from .run import resume, train
    from .run.files import load_settings

    load_env_noted()
    cli: dict[str, Any] = {n: getattr(args, n) for n in train_options() if getattr(args, n, None) is not None}
    if args.resume:
        if args.config:
            raise UserError("--resume takes the run's own config.json; do not give --config with it")
        if args.spec:
            raise UserError("--resume takes the run's own env spec; do not give --spec with it")
        result = resume(Path(args.resume), cli)
    else:
        file_settings = load_settings(args.config) if args.config else {}
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
    _print_dropped(printable(summary_line(s)))
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
    from .schema.aliases import summary_in

    s = summary_in(s)
    if s["solved"]:
        solved = f"solved after {plural(s['episodes_to_solve'], 'episode')}"
    else:
        solved = "not solved" if s.get("reward_threshold") is not None else "no threshold"
    cost = f", {cost_text(s['cost_usd'], s.get('cost_complete', True))}" if s["is_llm"] else ""
    best = "n/a" if s["best_heldout_mean"] is None else f"{s['best_heldout_mean']:.2f}"
    model = f":{s['model']}" if s["model"] and s["is_llm"] else ""
    mode = "" if s["mode"] == "table" else f", {s['mode']} mode"
    made = calls_text(s["llm_calls"], s.get("failed_calls") or 0, s.get("first_call_error"))
    calls = (f"{made}, {s['input_tokens']}+{s['output_tokens']} tokens{cost}"
             if is_client(s["backend"]) else f"{plural(s['llm_calls'], 'proposal')} (no model called)")
    never = " (no candidate was ever accepted: this is the initial table)" if s.get("never_accepted") \
        and s["mode"] != "direct" else ""
    when = " (measured once, at the end)" if s["mode"] == "direct" and s["best_heldout_episodes"] else ""
    return (f"{s['env_id']} [{s['backend']}{model}{mode}] held-out mean {best} over "
            f"{plural(s['best_heldout_episodes'], 'episode')}{when}{never}, {solved}; "
            f"{plural(s['iterations'], 'iteration')}, {plural(s['episodes_total'], 'episode')}, {calls}, "
            f"{s['wall_s']:.1f} s; stop: {s['stop_reason']}")


def _print_dropped(text: str, stream: TextIO | None = None) -> None:
    """Print a line that is a by-product: when its reader is gone (a closed pipe), it is dropped."""
    try:
        print(text, file=stream or sys.stdout, flush=True)
    except OSError:
        _release(stream or sys.stdout)


COMMANDS = ("llm_policy_gen.commands.evaluate", "llm_policy_gen.commands.envs", "llm_policy_gen.commands.backends",
            "llm_policy_gen.sweep.compare", "llm_policy_gen.plotting.command", "llm_policy_gen.report")
"""The modules of the commands beside ``train``, in the order ``--help`` lists them; each has
``add_parser(subparsers)`` (see ``llm_policy_gen.commands``). A new command is one module and a line here."""


def _add_commands(sub: Any) -> None:
    """The commands of ``COMMANDS``; one whose module is not in this install (a trimmed package) is left out."""
    import importlib

    for module in COMMANDS:
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
    _add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad option (already reported in one line)
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    with stops_as_interrupts():  # SIGTERM and SIGHUP as Ctrl-C: the same files, message and exit code 128 + signal
        return _run_command(args)


def _run_command(args: argparse.Namespace) -> int:
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, so that a reader that went away is seen here and not at exit
        return code
    except BrokenPipeError:  # `llm-policy-gen envs | head`: the reader has what it wanted; exit as `cat` would
        _release(sys.stdout)
        return 128 + signal.SIGPIPE
    except UserError as exc:
        _print_dropped(_error_line(args.command, "error", exc), sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
        _print_dropped(_interrupted(exc), sys.stderr)
        return 128 + signal_of(exc)
    except (LLMPolicyGenError, OSError) as exc:
        _print_dropped(_error_line(args.command, "failed", exc), sys.stderr)
        return 1


def _error_line(command: str, word: str, exc: BaseException) -> str:
    """The one line a failed command prints: the first line of its error, secrets redacted and made printable (a
    server's message may carry terminal escapes)."""
    from .clients.keys import redact
    from .console import printable

    lines = redact(str(exc)).splitlines() or [type(exc).__name__]
    return f"llm-policy-gen {command}: {word}: {printable(lines[0])}"


def _interrupted(exc: KeyboardInterrupt) -> str:
    """What Ctrl-C (or SIGTERM, SIGHUP) leaves: the run directory, what it keeps and the command that goes on."""
    signum = signal_of(exc)
    what = "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"
    if isinstance(exc, SweepInterrupted):
        return (f"{what}: the comparison folder {exc.folder} keeps {exc.finished} of {exc.total} runs finished; go "
                f"on with the same command: {exc.command}")
    if not isinstance(exc, RunInterrupted):
        return what
    kept = f"keeps iterations 1..{exc.kept}" if exc.kept else "keeps no finished iteration yet"
    return (f"{what}: the run directory {exc.run_dir} {kept}; go on with: llm-policy-gen train --resume "
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
