"""The backend contract: messages in; text, token usage and latency out.

Every backend (offline optimiser, replay, Gemini, OpenAI, Anthropic, local OpenAI-compatible servers) implements
``Backend.complete``. The loop never sees a provider SDK: it sends ``Message`` objects plus an ``OutputFormat`` (the
JSON schema the answer must follow, derived from the pydantic models in :mod:`llm_policy_gen.schema`) and gets a
``Completion`` back. Validation of the answer is the loop's job, not the backend's.

Transport faults are handled by one retry policy (:class:`RetryPolicy`, :func:`call_with_retries`) shared by all SDK
backends; the SDKs' own retries are switched off so that the policy is the only one. The SDK backends share the rest
of the transport logic here too: :func:`retry_after_seconds` reads a server's ``Retry-After``, :func:`http_status_fault`
sorts an HTTP error status into a fault kind, and :func:`timed_call_with_retries` adds the call's wall time.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, Required, TypedDict, TypeVar, runtime_checkable

from ..errors import BackendAuthError, BackendError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..prompt import PromptContext

__all__ = [
    "Message",
    "OutputFormat",
    "Completion",
    "Sampling",
    "RetryPolicy",
    "Backend",
    "FaultKind",
    "Classifier",
    "AUTH_STATUSES",
    "RETRY_STATUSES",
    "retry_after_seconds",
    "http_status_fault",
    "RetryOptions",
    "call_with_retries",
    "timed_call_with_retries",
]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class OutputFormat:
    """What the answer must look like.

    ``json_schema`` is a JSON schema (from ``pydantic.BaseModel.model_json_schema()``) that SDK backends pass to the
    provider's native structured output; ``None`` means plain text (the direct mode's ``Action: N``).
    """

    name: str
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent to a provider (part of the cache key)."""

    temperature: float | None = None
    """None: the provider's default."""
    max_output_tokens: int = 16384
    """Upper bound on the answer's tokens (a full 10,000-state table needs edits instead)."""


@dataclass
class Completion:
    """A backend's answer to one call."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    model: str = ""
    cached: bool = False
    """True when the answer came from the on-disk cache (no tokens were paid for)."""
    transport_attempts: int = 1
    """How many HTTP attempts the call took (1 + retries)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def transcript_fields(self) -> dict[str, Any]:
        """The fields of a transcripts.jsonl line that come from this answer."""
        return {
            "response_text": self.text,
            "response_model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_s": round(self.latency_s, 4),
            "cached": self.cached,
            "transport_attempts": self.transport_attempts,
        }


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy for timeouts, HTTP 429 and 5xx.

    Attempt ``k`` (0-based) waits ``min(max_delay_s, initial_delay_s * 2**k)`` scaled by a random factor in
    ``[1 - jitter, 1]``; a ``Retry-After`` header from the server replaces that delay (capped at ``max_delay_s``).
    """

    max_retries: int = 4
    """Retries after the first attempt (0 disables retrying)."""
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    jitter: float = 0.5
    timeout_s: float = 120.0
    """Per-request timeout handed to the SDK client."""

    def delay(self, attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        if retry_after_s is not None and retry_after_s >= 0:
            return min(self.max_delay_s, retry_after_s)
        base = min(self.max_delay_s, self.initial_delay_s * (2**attempt))
        r = (rng or random).random()
        return base * (1.0 - self.jitter * r)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FaultKind = Literal["retry", "auth", "fatal"]
T = TypeVar("T")
#: Maps an exception to ``("retry", seconds | None)``, ``("auth", None)`` or ``("fatal", None)``.
Classifier = Callable[[BaseException], tuple[FaultKind, float | None]]

#: HTTP statuses that refuse the credentials.
AUTH_STATUSES: frozenset[int] = frozenset({401, 403})
#: HTTP statuses worth another attempt besides every 5xx: request timeout, conflict, rate limit.
RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 429})


def _wait_s(value: str | None) -> float | None:
    """``value`` as a finite, non-negative number, else None."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _seconds_until(http_date: str) -> float | None:
    """Seconds from now until ``http_date`` (0.0 for a past date), or None when it is not a date."""
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC without a local zone (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asked the client to wait before the next attempt, or None if it asked nothing usable.

    ``retry-after-ms`` (milliseconds, sent by OpenAI and Anthropic) wins over ``retry-after``, which holds seconds or
    an HTTP date (a date in the past gives 0.0). A value that is neither a finite, non-negative number nor a date is
    ignored. ``headers`` should match names case-insensitively (``httpx.Headers`` does); a plain dict needs
    lower-case names.
    """
    if not headers:
        return None
    ms = _wait_s(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _wait_s(value)
    return seconds if seconds is not None else _seconds_until(value)


def http_status_fault(status: int, headers: Mapping[str, str] | None = None) -> tuple[FaultKind, float | None]:
    """The fault kind of an HTTP error answer, for :func:`call_with_retries`.

    401 and 403 are ``("auth", None)``; 408, 409, 429 and every status from 500 up are ``("retry", seconds)`` with
    the server's :func:`retry_after_seconds` (None: the policy's backoff); anything else is ``("fatal", None)``.
    """
    if status in AUTH_STATUSES:
        return "auth", None
    if status in RETRY_STATUSES or status >= 500:
        return "retry", retry_after_seconds(headers)
    return "fatal", None


def _short(text: str, limit: int = 240) -> str:
    """First line of ``text``, cut at a word boundary to at most ``limit`` characters."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


def call_with_retries(
    fn: Callable[[], T],
    classify: Classifier,
    policy: RetryPolicy,
    *,
    describe: str,
    key_variable: str = "",
    sleep: Callable[[float], None] = time.sleep,
    redact: Callable[[str], str] = lambda s: s,
) -> tuple[T, int]:
    """Run ``fn`` under ``policy``; return its result and the number of attempts.

    ``classify`` maps an exception to ``("retry", retry_after_s)``, ``("auth", None)`` or ``("fatal", None)``.
    An auth fault raises :class:`BackendAuthError` naming ``key_variable``; a fatal fault or spent retries raise
    :class:`BackendError`. Messages go through ``redact`` so that a key never reaches an error text.
    """
    attempt = 0
    while True:
        try:
            return fn(), attempt + 1
        except Exception as exc:  # classified below; unknown kinds are fatal for this call only
            kind, retry_after = classify(exc)
            reason = _short(redact(f"{type(exc).__name__}: {exc}"))
            if kind == "auth":
                hint = f"; set {key_variable} to a valid key" if key_variable else ""
                raise BackendAuthError(f"{describe} refused the credentials ({reason}){hint}") from None
            if kind == "fatal" or attempt >= policy.max_retries:
                n = attempt + 1
                tail = "" if kind == "fatal" else f" after {n} attempt{'s' if n > 1 else ''}"
                raise BackendError(f"{describe} failed{tail}: {reason}") from None
            sleep(policy.delay(attempt, retry_after))
            attempt += 1


class RetryOptions(TypedDict, total=False):
    """The keyword arguments of :func:`call_with_retries`, for the helpers that pass them on."""

    describe: Required[str]
    key_variable: str
    sleep: Callable[[float], None]
    redact: Callable[[str], str]


def timed_call_with_retries(
    fn: Callable[[], T], classify: Classifier, policy: RetryPolicy, **options: Unpack[RetryOptions]
) -> tuple[T, int, float]:
    """:func:`call_with_retries` (same arguments) plus the wall time of the whole call.

    Returns ``(result, attempts, latency_s)``; the latency counts every attempt and every wait between attempts,
    which is what a backend reports as ``Completion.latency_s``.
    """
    start = time.perf_counter()
    result, attempts = call_with_retries(fn, classify, policy, **options)
    return result, attempts, time.perf_counter() - start


@runtime_checkable
class Backend(Protocol):
    """Anything that can answer a list of messages."""

    name: str
    """Provider name as in the spec string: offline, replay, gemini, openai, anthropic, ollama, ..."""
    model: str
    """Model name ('' where there is none)."""
    is_llm: bool
    """False for the offline optimiser and the classic baselines."""

    def complete(
        self,
        messages: Sequence[Message],
        output: OutputFormat,
        context: PromptContext | None = None,
    ) -> Completion:
        """Answer ``messages``. ``context`` is the data the prompt was rendered from; LLM backends ignore it."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for config.json (never a key)."""
        ...
