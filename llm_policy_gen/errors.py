"""All errors of llm-policy-gen in one place.

``UserError`` and its subclasses are mistakes a user can fix (unknown environment, bad option, unreadable or
mismatched file, missing key): the CLI prints their one-line message and exits with code 2. Every other
``LLMPolicyGenError`` is a failure of the run itself (exit code 1).
"""

from __future__ import annotations

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
    "JSONBounds",
    "RunInterrupted",
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


class JSONBounds(LLMPolicyGenError, ValueError):
    """A JSON text from outside is over the bounds this package reads (:mod:`llm_policy_gen.safe_json`): too long,
    nested too deeply, or a number with too many digits. The message says which, without the text."""


class ReplayExhausted(LLMPolicyGenError):
    """A ``replay:`` backend has no more recorded answers; the run ends cleanly."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run whose directory is kept: names it and the iterations it keeps, so that the command line
    can print the resume command. A :class:`KeyboardInterrupt`, so callers that stop on Ctrl-C still do."""

    def __init__(self, run_dir: str, kept: int) -> None:
        self.run_dir = run_dir
        self.kept = kept
        super().__init__(run_dir)


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
