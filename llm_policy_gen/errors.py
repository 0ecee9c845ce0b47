"""All errors of llm-policy-gen in one place.

``UserError`` and its subclasses are mistakes a user can fix (unknown environment, bad option, unreadable or
mismatched file, missing key): the CLI prints their one-line message and exits with code 2. Every other
``LLMPolicyGenError`` is a failure of the run itself (exit code 1).
"""

from __future__ import annotations

import signal

__all__ = [
    "LLMPolicyGenError",
    "UserError",
    "SpecError",
    "PolicyFileError",
    "BackendConfigError",
    "BackendAuthError",
    "EndpointError",
    "BackendError",
    "BackendUnreachable",
    "ReplayExhausted",
    "ProposalError",
    "Interrupted",
    "EnvOutputError",
    "JSONBounds",
    "RunInterrupted",
    "SweepInterrupted",
    "NoCallSucceeded",
    "NoValidAnswer",
    "signal_of",
    "missing_extra",
]


class LLMPolicyGenError(Exception):
    """Base class of every error raised on purpose by this package."""


class UserError(LLMPolicyGenError):
    """A mistake in the user's input; the message says what was wrong and what is accepted (exit code 2)."""


class SpecError(UserError, ValueError):
    """An environment, discretizer or action specification is invalid."""


class PolicyFileError(UserError):
    """A policy file cannot be read or does not match the environment."""


class BackendConfigError(UserError):
    """A backend spec is unknown or its configuration (key, model, base URL) is missing."""


class BackendAuthError(UserError):
    """The provider refused the key (HTTP 401/403). The run stops at once."""


class EndpointError(UserError):
    """The base URL the user set reached no server on any attempt of the run's first call."""


class BackendError(LLMPolicyGenError):
    """A backend call failed after every retry (timeouts, 429, 5xx). One iteration is lost, not the run."""


class BackendUnreachable(BackendError):
    """No attempt of a call reached the server (connection refused, DNS failure, timeout on every attempt)."""


class NoCallSucceeded(BackendError):
    """A run made calls and not one of them succeeded: it ends with exit 1, naming the first error and the URL
    (never "0 calls" and exit 0)."""


class NoValidAnswer(BackendError):
    """A run asked a model and not one of its answers was valid (e.g. a server answering ``content: null`` to
    every call): it ends with exit 1 and a line saying so, never "iterations done" and exit 0."""


class EnvOutputError(LLMPolicyGenError):
    """The environment returned a non-finite reward or observation (NaN, infinity): named with its step and
    episode. Before a run starts it is a :class:`SpecError` (exit 2); during a run it ends the run (exit 1) with its
    directory as of the last finished iteration."""


class JSONBounds(LLMPolicyGenError, ValueError):
    """A JSON text from outside is over the bounds this package reads (:mod:`llm_policy_gen.storage.safe_json`): too
    long, nested too deeply, or a number with too many digits. The message says which, without the text."""


class ReplayExhausted(LLMPolicyGenError):
    """A ``replay:`` backend has no more recorded answers; the run ends cleanly."""


class Interrupted(KeyboardInterrupt):
    """A stop asked for from outside: SIGTERM or SIGHUP (what Slurm, systemd and a closed ssh connection send),
    raised where the program is, as Ctrl-C raises :class:`KeyboardInterrupt`, so that everything Ctrl-C does (the
    summary, the lock released, the resume command) a SIGTERM does too. ``signum`` says which signal (exit code
    ``128 + signum``)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)


def signal_of(exc: BaseException) -> int:
    """The signal behind an interrupt: its ``signum``, or SIGINT for a plain :class:`KeyboardInterrupt` (Ctrl-C)."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


class RunInterrupted(Interrupted):
    """Ctrl-C (or SIGTERM, SIGHUP) during a run whose directory is kept: names it and the iterations it keeps, so
    that the command line can print the resume command. A :class:`KeyboardInterrupt`, so callers that stop on Ctrl-C
    still do."""

    def __init__(self, run_dir: str, kept: int, signum: int = signal.SIGINT) -> None:
        self.run_dir = run_dir
        self.kept = kept
        super().__init__(signum)


class SweepInterrupted(Interrupted):
    """Ctrl-C (or SIGTERM, SIGHUP) during ``compare``, after its files were written: names the comparison folder,
    the runs it keeps finished and the command that goes on (the same one)."""

    def __init__(self, folder: str, finished: int, total: int, command: str, signum: int = signal.SIGINT) -> None:
        self.folder, self.finished, self.total, self.command = folder, finished, total, command
        super().__init__(signum)


def missing_extra(what: str, extra: str) -> UserError:
    """``what`` needs an optional dependency: the one-line error with the install command the README gives."""
    return UserError(f"{what}: pip install -e '.[{extra}]' (in the project's folder, as the README installs it)")


class ProposalError(LLMPolicyGenError):
    """A backend's answer is not a valid proposal.

    ``errors`` holds short messages written so that they can be sent back to a model for repair.
    """

    def __init__(self, errors: list[str], raw_text: str = "") -> None:
        self.errors = list(errors) or ["invalid proposal"]
        self.raw_text = raw_text
        super().__init__("; ".join(self.errors))
