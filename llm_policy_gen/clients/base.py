"""The transport contract: a :class:`Request` (messages, the answer's JSON schema, the call's key) in; a
:class:`Completion` (text, token usage, finish reason) out.

Every LLM transport implements :class:`LLMClient`: the SDK clients (Gemini, OpenAI, Anthropic, local
OpenAI-compatible servers) and ``replay:PATH``. A client knows nothing of prompts, answer formats, budgets, caches or
transcripts: those live in the session (:mod:`llm_policy_gen.clients.session`). The non-LLM proposers (offline,
q-learning, random) are not clients at all (see :mod:`llm_policy_gen.proposers`).

Transport faults are handled by one retry policy (:class:`RetryPolicy`, :func:`call_with_retries`) shared by all SDK
clients; the SDKs' own retries are switched off so that the policy is the only one. :func:`retry_after_seconds`
reads a server's ``Retry-After``, :func:`http_status_fault` sorts an HTTP error status into a fault kind, and
:func:`timed_call_with_retries` adds the call's wall time.

Local servers (Ollama, ``llama_cpp.server`` or any OpenAI-compatible server on a loopback address, the in-process
model) get their own defaults (:meth:`RetryPolicy.resolved`): a long timeout, since a small machine may take minutes
over one prompt, and no retry of a call that timed out, since the server is still busy with it.

A client that knows its model's tokenizer offers :class:`CountsTokens`, so that prompts are measured in tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, Required, TypedDict, TypeVar, runtime_checkable

from ..errors import BackendAuthError, BackendError, BackendUnreachable

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "Message",
    "OutputSpec",
    "CallKey",
    "CountsTokens",
    "Request",
    "Completion",
    "Sampling",
    "RetryPolicy",
    "ClientOptions",
    "LLMClient",
    "FaultKind",
    "Classifier",
    "AUTH_STATUSES",
    "RETRY_STATUSES",
    "STRUCTURED_MODES",
    "retry_after_seconds",
    "http_status_fault",
    "RetryOptions",
    "DEFAULT_TIMEOUT_S",
    "LOCAL_TIMEOUT_S",
    "call_seed",
    "call_with_retries",
    "timed_call_with_retries",
]

Role = Literal["system", "user", "assistant"]

#: How a client asks for JSON, strongest first: the provider's native JSON-schema output, then a JSON mode or a
#: forced tool call, then plain JSON asked for by the prompt alone. A client starts at the first one it supports and
#: falls back once per run when the provider refuses the request itself (see the SDK clients).
STRUCTURED_MODES = ("json_schema", "json_mode", "prompt")


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class OutputSpec:
    """What the answer must look like.

    ``json_schema`` is a JSON schema (from an answer format's pydantic model) that SDK clients pass to the provider's
    native structured output; ``None`` means plain text (the direct mode's ``Action: N``).
    """

    name: str
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True, order=True)
class CallKey:
    """Which call this is: iteration, candidate (1..K), attempt (1 + repairs) and, in direct mode, the state asked.

    Replay and resume find a recorded answer by this key, never by line order.
    """

    iteration: int
    candidate: int = 1
    attempt: int = 1
    state: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"iteration": self.iteration, "candidate": self.candidate, "attempt": self.attempt}
        if self.state is not None:
            d["state"] = self.state
        return d

    @classmethod
    def of(cls, record: dict[str, Any]) -> CallKey:
        """The key of a transcript line (lines from before keys existed count as candidate 1, attempt 1)."""
        state = record.get("state")
        return cls(int(record.get("iteration", 0)), int(record.get("candidate", 1) or 1),
                   int(record.get("attempt", 1) or 1), None if state is None else int(state))


@dataclass(frozen=True)
class Request:
    """One call to a client: the conversation so far, the answer's shape and the call's key.

    ``key.candidate`` is also the sample index: K candidates of one iteration are K distinct samples of the same
    prompt (the answer cache keys on it too).
    """

    messages: tuple[Message, ...]
    output: OutputSpec
    key: CallKey = field(default_factory=lambda: CallKey(0))
    seed: int | None = None
    """The call's sampling seed (:func:`call_seed` of the run seed and the key), sent to providers that take one, so
    that K candidates at one temperature are K different requests; None: no seed."""


def call_seed(run_seed: int, key: CallKey) -> int:
    """The sampling seed of the call ``key`` in the run seeded ``run_seed``: a pure function of (run seed, iteration,
    candidate, attempt, state), so a replayed or resumed run sends the same seeds and the answer cache stays exact.
    A 31-bit integer (every provider that takes a seed accepts it)."""
    text = json.dumps([int(run_seed), key.iteration, key.candidate, key.attempt, key.state])
    return int.from_bytes(hashlib.sha256(text.encode("ascii")).digest()[:4], "big") & 0x7FFFFFFF


@dataclass
class Completion:
    """A client's answer to one call."""

    text: str
    input_tokens: int = 0
    """Every prompt token the call processed (cached ones included)."""
    output_tokens: int = 0
    """Answer tokens (thinking included where the provider bills it as output)."""
    cached_input_tokens: int = 0
    """Prompt tokens read from the provider's prompt cache (part of ``input_tokens``; priced as cache reads)."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's prompt cache (part of ``input_tokens``; Anthropic bills them apart)."""
    latency_s: float = 0.0
    model: str = ""
    finish_reason: str | None = None
    """The provider's own word for why the answer ended (``stop``, ``length``, ``end_turn``, ``MAX_TOKENS``, ...)."""
    truncated: bool = False
    """True when the answer was cut by the output-token limit."""
    refusal: str | None = None
    """The model's refusal text or the provider's block reason, when it declined to answer."""
    structured_output: str = "json_schema"
    """How JSON was asked for (one of :data:`STRUCTURED_MODES`; ``none`` for plain-text calls)."""
    transport_attempts: int = 1
    """How many HTTP attempts the call took (1 + retries)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def transcript_fields(self) -> dict[str, Any]:
        """The fields of a transcripts.jsonl line that come from this answer."""
        out: dict[str, Any] = {
            "response_text": self.text,
            "response_model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "latency_s": round(self.latency_s, 4),
            "finish_reason": self.finish_reason,
            "truncated": self.truncated,
            "refusal": self.refusal,
            "structured_output": self.structured_output,
            "transport_attempts": self.transport_attempts,
        }
        if self.extra:
            out["provider_extra"] = self.extra
        return out


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent to a provider (part of the cache key)."""

    temperature: float | None = None
    """None: the provider's default."""
    max_output_tokens: int = 16384
    """Upper bound on the answer's tokens (a full 10,000-state table needs edits instead)."""


#: Default bound on one attempt to a remote provider, in seconds.
DEFAULT_TIMEOUT_S = 120.0
#: Default bound on one attempt to a local server: a 6,000-token prompt took 138 s on 2 cores (issue 18).
LOCAL_TIMEOUT_S = 600.0


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
    timeout_s: float | None = None
    """Bound on one whole attempt, however the answer's bytes trickle in (the SDK clients also hand it to the SDK,
    which applies it to each phase): a server that never answers costs about ``timeout_s * (max_retries + 1)`` per
    call. None: :data:`DEFAULT_TIMEOUT_S`, or :data:`LOCAL_TIMEOUT_S` for a local server."""
    retry_timeouts: bool | None = None
    """Whether an attempt that timed out is tried again. None: yes, except for a local server (it is still busy
    with the request, and another attempt would only queue behind it)."""

    def resolved(self, local: bool) -> RetryPolicy:
        """This policy with its defaults filled in for a remote (``local=False``) or a local server."""
        timeout = self.timeout_s if self.timeout_s is not None else (LOCAL_TIMEOUT_S if local else DEFAULT_TIMEOUT_S)
        retry = self.retry_timeouts if self.retry_timeouts is not None else not local
        return replace(self, timeout_s=timeout, retry_timeouts=retry)

    @property
    def attempt_timeout_s(self) -> float:
        """The bound on one attempt (the remote default when the policy was not :meth:`resolved`)."""
        return self.timeout_s if self.timeout_s is not None else DEFAULT_TIMEOUT_S

    def delay(self, attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        if retry_after_s is not None and retry_after_s >= 0:
            return min(self.max_delay_s, retry_after_s)
        base = min(self.max_delay_s, self.initial_delay_s * (2**attempt))
        r = (rng or random).random()
        return base * (1.0 - self.jitter * r)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClientOptions:
    """Settings every SDK client takes."""

    base_url: str | None = None
    """Overrides the provider's base URL (else the SDK's own variable, else the provider's endpoint)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sampling: Sampling = field(default_factory=Sampling)
    n_ctx: int | None = None
    """Context size of an in-process model (None: the model's own)."""
    threads: int | None = None
    """Threads of an in-process model (None: the usable cores divided by the processes sharing them)."""
    local_concurrency: int = 1
    """Calls a local server is sent at once (``llama_cpp.server`` serves one at a time; Ollama as many as its
    ``OLLAMA_NUM_PARALLEL``); the others wait their turn in the client, not in the server's queue."""


FaultKind = Literal["retry", "auth", "fatal", "unreachable", "timeout"]
T = TypeVar("T")
#: Maps an exception to ``("retry", seconds | None)``, ``("unreachable", None)``, ``("timeout", None)``,
#: ``("auth", None)`` or ``("fatal", None)``.
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

    ``classify`` maps an exception to ``("retry", retry_after_s)``, ``("unreachable", None)`` (no answer from the
    server: connection refused, DNS failure), ``("timeout", None)`` (no answer in time), ``("auth", None)`` or
    ``("fatal", None)``. Retry and unreachable faults are tried again under ``policy``, timeouts only when
    ``policy.retry_timeouts`` is not False. An auth fault raises :class:`BackendAuthError` naming
    ``key_variable``; spent retries raise :class:`BackendUnreachable` when no attempt reached the server, else
    :class:`BackendError`, as does a fatal fault. Messages go through ``redact`` so that a key never reaches an error
    text.
    """
    attempt = 0
    answered = False
    while True:
        try:
            return fn(), attempt + 1
        except Exception as exc:  # classified below; unknown kinds are fatal for this call only
            kind, retry_after = classify(exc)
            answered = answered or kind not in ("unreachable", "timeout")
            reason = _short(redact(f"{type(exc).__name__}: {exc}"))
            if kind == "auth":
                hint = f"; set {key_variable} to a valid key" if key_variable else ""
                raise BackendAuthError(f"{describe} refused the credentials ({reason}){hint}") from None
            spent = attempt >= policy.max_retries or (kind == "timeout" and policy.retry_timeouts is False)
            if kind == "fatal" or spent:
                n = attempt + 1
                tail = "" if kind == "fatal" else f" after {n} attempt{'s' if n > 1 else ''}"
                if not answered:
                    raise BackendUnreachable(f"{describe} could not be reached{tail}: {reason}") from None
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
class LLMClient(Protocol):
    """A transport to a language model (or to recorded answers): one request in, one completion out.

    Implementations raise :class:`~llm_policy_gen.errors.BackendAuthError` for refused credentials,
    :class:`~llm_policy_gen.errors.BackendUnreachable` when no attempt reached the server, and
    :class:`~llm_policy_gen.errors.BackendError` for any other call that failed after the retry policy. They must be
    safe to call from several threads at once (the K candidates of an iteration are asked concurrently).
    """

    provider: str
    """Provider name as in the backend spec: gemini, openai, anthropic, ollama, replay."""
    model: str
    """Model name."""
    is_llm: bool
    """False for replay (it answers from a file)."""

    def complete(self, request: Request) -> Completion:
        """Answer one request."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for config.json (never a key)."""
        ...


@runtime_checkable
class CountsTokens(Protocol):
    """What a client that knows its model's tokenizer offers (the in-process llama.cpp model does), so that the
    prompt is measured in tokens rather than characters (``--max-prompt-tokens``)."""

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's tokenizer."""
        ...

    @property
    def context_tokens(self) -> int | None:
        """The model's context size in tokens (prompt and answer together), or None when unknown."""
        ...
