"""The ``llm-policy-gen`` command line.

Exit codes: 0 done; 2 bad input from the user (one line on stderr naming what was wrong and what is accepted);
1 anything else (the run directory is left consistent); 130 for Ctrl-C, and 143 and 129 for SIGTERM and SIGHUP,
which are handled as Ctrl-C is (the summary written, the lock released, the resume command printed).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__
from .errors import LLMPolicyGenError, RunInterrupted, SweepInterrupted, UserError, signal_of
from .loggers.console import print_dropped, release_stream
from .schema.aliases import take_notes
from .storage.locks import stops_as_interrupts

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line with exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        """One line; argparse's message quotes the arguments it refused, so a URL's password or key is redacted and
        terminal escapes are shown as escapes."""
        from .clients.keys import redact
        from .loggers.console import printable

        self.exit(2, f"{self.prog}: error: {printable(redact(message))} (see --help)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but options no parser knows are reported by the command's own parser, so that the
        message names it (``llm-policy-gen compare: error: ...``), not only the program."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
            owner = commands.get(str(getattr(parsed, "command", "")), self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


COMMANDS = ("llm_policy_gen.commands.train", "llm_policy_gen.commands.evaluate", "llm_policy_gen.commands.envs",
            "llm_policy_gen.commands.backends", "llm_policy_gen.commands.compare", "llm_policy_gen.commands.bench",
            "llm_policy_gen.commands.plot",
            "llm_policy_gen.commands.report", "llm_policy_gen.commands.drift")
"""The modules of the commands (``train`` first), one each in :mod:`llm_policy_gen.commands`, in the order
``--help`` lists them; each has ``add_parser(subparsers)`` (see ``llm_policy_gen.commands``). A new command
is one module and a line here."""


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
    _add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except UserError as exc:  # a plug-in whose options cannot be known (its module does not import)
        print_dropped(_error_line("", "error", exc).replace("llm-policy-gen : ", "llm-policy-gen: "), sys.stderr)
        return 2
    take_notes()  # the notes of this command only (main may run several in one process)
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
        release_stream(sys.stdout)
        return 128 + signal.SIGPIPE
    except UserError as exc:
        print_dropped(_error_line(args.command, "error", exc), sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
        print_dropped(_interrupted(exc), sys.stderr)
        return 128 + signal_of(exc)
    except (LLMPolicyGenError, OSError) as exc:
        print_dropped(_error_line(args.command, "failed", exc), sys.stderr)
        return 1


def _error_line(command: str, word: str, exc: BaseException) -> str:
    """The one line a failed command prints: the first line of its error, secrets redacted and made printable (a
    server's message may carry terminal escapes)."""
    from .clients.keys import redact
    from .loggers.console import printable

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
