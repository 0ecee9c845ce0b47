"""The transport contract: a :class:`Request` (messages, the answer's JSON schema, the call's key) in; a
:class:`Completion` (text, token usage, finish reason) out.

Every LLM transport implements :class:`LLMClient`: the SDK clients (Gemini, OpenAI, Anthropic, local
OpenAI-compatible servers) and ``replay:PATH``. A client knows nothing of prompts, answer formats, budgets, caches or
transcripts: those live in the session (:mod:`llm_policy_gen.clients.session`). The non-LLM proposers (offline,
q-learning, random) are not clients at all (see :mod:`llm_policy_gen.proposers`).

Transport faults are handled by one retry policy shared by all SDK clients (:mod:`.retry`); :class:`ClientOptions`
carries it with the sampling settings.

A client that knows its model's tokenizer offers :class:`CountsTokens`, so that prompts are measured in tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import field_validator

from ..registry import PluginOptions, setting
from .retry import RetryPolicy

__all__ = ["ClientSettings",
    "Message",
    "OutputSpec",
    "CallKey",
    "CountsTokens",
    "Request",
    "Completion",
    "Sampling",
    "ClientOptions",
    "LLMClient",
    "STRUCTURED_MODES",
    "call_seed",
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
    usage_clamped: dict[str, str] = field(default_factory=dict)
    """Usage fields the server reported out of range (negative, huge, not a whole number): field -> the reported
    value as text; the counts above hold the clamped values (see :func:`~.usage.token_count`)."""

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
        if self.usage_clamped:
            out["usage_clamped"] = self.usage_clamped
        return out


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent to a provider (part of the cache key)."""

    temperature: float | None = None
    """None: the provider's default."""
    max_output_tokens: int = 16384
    """Upper bound on the answer's tokens (a full 10,000-state table needs edits instead)."""


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
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    """Where a client says what a slow step of its own is doing (an in-process model's load, a long generation);
    None: nothing is said."""


class ClientSettings(PluginOptions):
    """The options of every LLM client backend (``Options`` of the SDK clients and of ``replay``): where calls go,
    how they are retried and sampled, and the answers' bounds. A client with more declares a subclass
    (``llamacpp``: its context and threads) and its :meth:`client_options` passes them on."""

    base_url: str | None = setting(None, "an http:// or https:// URL with a host", "Provider base URL (else the SDK's "
                                   "own variable).")
    timeout_s: float | None = setting(None, "a number of seconds > 0", "Bound on one whole request attempt, however "
                                      "the answer trickles in (None: 120 s, or 600 s for a local server: Ollama, "
                                      "llamacpp, or an OpenAI-compatible --base-url on a loopback address).", gt=0.0,
                                      flag="--timeout", resume=True, operational=True)
    max_retries: int = setting(4, "an integer >= 0", "Retries of timeouts, connection errors, 429 and 5xx "
                               "(exponential backoff with jitter, honouring Retry-After).", ge=0, resume=True,
                               operational=True)
    temperature: float | None = setting(None, "a number >= 0 within the provider's range",
                                        "Sampling temperature (None: the provider's default).", ge=0.0)
    max_output_tokens: int = setting(16384, "an integer >= 1", "Upper bound on an answer's tokens.", ge=1)
    max_answer_chars: int = setting(262144, "an integer >= 1000", "Longest answer text accepted, in characters: a "
                                    "longer answer is refused as invalid, stored cut to this length, never cached "
                                    "and never sent back whole in a repair.", ge=1000)
    local_concurrency: int = setting(1, "an integer >= 1", "Calls a local server (Ollama, an OpenAI-compatible "
                                     "--base-url on a loopback address) is sent at once; llama_cpp.server serves "
                                     "one at a time.", ge=1, resume=True, operational=True)
    # the call session's (clients/session.py): repairs, spending, concurrency, the answer cache and the prices
    repair_attempts: int = setting(2, "an integer >= 0", "Follow-up calls with the validation errors when an "
                                   "answer is refused.", ge=0)
    budget_usd: float | None = setting(None, "a number >= 0", "Stop cleanly before a call would pass this spend "
                                       "(calls in flight count).", ge=0.0, resume=True)
    max_concurrent_calls: int = setting(8, "an integer >= 1", "Calls in flight at once (the K candidates of an "
                                        "iteration are asked concurrently).", ge=1, resume=True, operational=True)
    unreachable_after: int = setting(3, "an integer >= 1", "Stop the run after this many iterations in a row "
                                     "without one successful call.", ge=1, operational=True)
    cache: bool = setting(True, "true or false", "Cache LLM answers on disk (keyed by provider, model, messages, "
                          "schema, sampling and candidate).", flag="--no-cache", resume=True, operational=True)
    cache_dir: str | None = setting(None, "a folder", "Answer cache folder (default: "
                                    "~/.cache/llm-policy-gen/responses).", operational=True)
    prices_file: str | None = setting(None, "a TOML file", "TOML price table (default: the shipped "
                                      "llm_policy_gen/data/prices.toml).", flag="--prices")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        """A base URL calls can go to (``localhost:8080/v1``, ``ftp://``, ``file://`` are refused before any run
        directory is made, instead of failing each call); a blank one means none."""
        from .keys import http_url_problem

        problem = None if v is None or not v.strip() else http_url_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    def client_options(self) -> ClientOptions:
        """What a client is built with."""
        return ClientOptions(base_url=self.base_url,
                             retry=RetryPolicy(max_retries=self.max_retries, timeout_s=self.timeout_s),
                             sampling=Sampling(temperature=self.temperature, max_output_tokens=self.max_output_tokens),
                             local_concurrency=self.local_concurrency)


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


def calls_at_once(client: LLMClient) -> int | None:
    """How many calls ``client`` serves at once (None: no bound of its own). An optional attribute ``serves_at_once``
    of the client says so (:class:`~llm_policy_gen.clients.sdk.SDKClient` sets it for a server on this machine). A
    session starts no more concurrent calls than this, so that none of its calls holds a place under a shared limit
    (the sweep's provider limit, the budget) while it only waits in the client for another of its own calls."""
    n = getattr(client, "serves_at_once", None)
    return max(1, int(n)) if isinstance(n, int) else None


def is_free(client: LLMClient) -> bool:
    """True when a client's calls cost nothing (a model on this machine: no price is looked up, a budget needs none).
    An optional attribute ``free`` of the client says so (:class:`~llm_policy_gen.clients.sdk.SDKClient` subclasses set
    it on the class); a client without it is priced."""
    return bool(getattr(client, "free", False))


@runtime_checkable
class RendersChat(Protocol):
    """What a client that renders chat messages with its model's own template offers (the in-process llama.cpp
    model), so that the backend factory can refuse, before a run starts, a model that cannot take chat messages and
    a context too small for the prompt."""

    def check_chat(self) -> None:
        """Raise a :class:`~llm_policy_gen.errors.BackendConfigError` when the model cannot take chat messages."""
        ...

    def chat_tokens(self, messages: list[Message]) -> int:
        """Tokens of ``messages`` rendered by the model's chat template."""
        ...

    @property
    def context_tokens(self) -> int | None:
        """The model's context size in tokens (prompt and answer together), or None when unknown."""
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
