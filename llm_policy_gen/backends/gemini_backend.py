"""Google Gemini through ``google-genai`` (the Gemini Developer API, never Vertex AI).

One ``Client.models.generate_content`` call per attempt, under :func:`~.base.call_with_retries`:

* **Key**: ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY`` (:func:`.keys.get_key`). It is passed to the client
  explicitly, so our order wins over the SDK's own (which prefers ``GOOGLE_API_KEY``).
* **Base URL**: ``options.base_url``, else ``GOOGLE_GEMINI_BASE_URL`` (the variable the SDK itself reads in
  ``google/genai/_base_url.py``), else the SDK's default endpoint. The API version is the SDK's default
  (``v1`` in google-genai 3.x; ``GOOGLE_GENAI_API_VERSION=v1beta`` selects the beta API).
* **Transport**: ``HttpOptions.timeout`` is in *milliseconds* (``_api_client.get_timeout_in_seconds``) and is set
  from ``options.retry.timeout_s``; ``HttpRetryOptions(attempts=1)`` switches the SDK's tenacity retries off, so
  :class:`~.base.RetryPolicy` is the only retry policy.
* **Structured output**: ``response_mime_type="application/json"`` plus ``response_json_schema`` (full JSON Schema
  with ``$defs``/``$ref``, ``additionalProperties`` and ``required``; sent unchanged except that a ``$ref`` may carry
  no sibling keywords on Gemini, so those are dropped).
* **Usage**: ``prompt_token_count`` is input; ``candidates_token_count + thoughts_token_count`` is output (thinking
  tokens are billed as output tokens).
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..errors import BackendConfigError
from . import keys
from .base import (
    Completion,
    FaultKind,
    Message,
    OutputFormat,
    http_status_fault,
    retry_after_seconds,
    timed_call_with_retries,
)

if TYPE_CHECKING:
    from ..prompt import PromptContext
    from . import BackendOptions

try:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types
except ImportError:  # pragma: no cover - google-genai is a dependency
    genai = None  # type: ignore[assignment]

__all__ = ["TRANSPORT_ERRORS", "GeminiBackend", "gemini_json_schema", "to_gemini_contents"]

PROVIDER = "gemini"

#: google.rpc status names of refused credentials (used besides the HTTP code).
AUTH_RPC_STATUSES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
#: google.rpc status names of transient faults (used when a body carries no HTTP code).
RETRY_RPC_STATUSES = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "INTERNAL"}
)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Timeouts and connection faults of whichever HTTP package the SDK uses (httpx2 by default, or httpx)."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for package in ("httpx2", "httpx"):
        try:
            mod = importlib.import_module(package)
        except ImportError:
            continue
        found += [mod.TimeoutException, mod.NetworkError, mod.RemoteProtocolError]
    return tuple(found)


#: Exceptions classified as ("retry", None).
TRANSPORT_ERRORS = _transport_errors()


def to_gemini_contents(messages: Sequence[Message]) -> tuple[str | None, list[Any]]:
    """Split ``messages`` into Gemini's ``system_instruction`` and ``contents`` (assistant turns are ``"model"``)."""
    system = [m.content for m in messages if m.role == "system"]
    contents = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role not in ("user", "assistant"):
            raise ValueError(f"unknown message role {m.role!r}; accepted: system, user, assistant")
        role = "model" if m.role == "assistant" else "user"
        contents.append(genai_types.Content(role=role, parts=[genai_types.Part(text=m.content)]))
    if not contents:
        raise ValueError("Gemini needs at least one user message besides the system instruction")
    return ("\n\n".join(system) if system else None), contents


def gemini_json_schema(schema: dict[str, Any], name: str = "") -> dict[str, Any]:
    """A copy of ``schema`` that Gemini accepts as ``responseJsonSchema``.

    Gemini refuses keywords beside ``$ref`` (pydantic emits ``{"$ref": ..., "description": ...}`` for a nested model
    field), so such siblings are dropped; ``name`` becomes the ``title`` when the schema has none.
    """

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return {k: clean(v) for k, v in node.items() if k.startswith("$")}
            return {k: clean(v) for k, v in node.items()}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    out: dict[str, Any] = clean(copy.deepcopy(schema))
    if name and "title" not in out:
        out["title"] = name
    return out


def _timeout_ms(timeout_s: float | None) -> int | None:
    """``HttpOptions.timeout`` is whole milliseconds; 0 or None means no timeout."""
    if not timeout_s or timeout_s <= 0:
        return None
    return max(1, round(timeout_s * 1000))


def _error_details(exc: BaseException) -> list[dict[str, Any]]:
    """The ``error.details`` list of a Google API error body (RetryInfo, ErrorInfo, ...)."""
    body = getattr(exc, "details", None)
    if isinstance(body, dict):
        body = body.get("error", body)
        details = body.get("details") if isinstance(body, dict) else None
        if isinstance(details, list):
            return [d for d in details if isinstance(d, dict)]
    return []


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds to wait from ``Retry-After`` / ``retry-after-ms``, else from a ``google.rpc.RetryInfo`` detail."""
    seconds = retry_after_seconds(getattr(getattr(exc, "response", None), "headers", None))
    if seconds is not None:
        return seconds
    for detail in _error_details(exc):
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", str(detail.get("retryDelay", "")))
            if m:
                return float(m.group(1))
    return None


def _is_key_refusal(exc: BaseException) -> bool:
    """Gemini answers a bad key with HTTP 400 INVALID_ARGUMENT and an ErrorInfo reason ``API_KEY_INVALID``."""
    return any(str(d.get("reason", "")).startswith("API_KEY_") for d in _error_details(exc))


class GeminiBackend:
    """Gemini models through ``google.genai.Client`` (Gemini Developer API).

    Args:
        model: Model id, e.g. ``"gemini-3.8-flash"``.
        options: Shared backend options (base URL, retry policy with the per-request timeout, sampling).
        sleep: How retries wait (injectable for tests).
    """

    name = PROVIDER
    is_llm = True

    def __init__(
        self, model: str, options: BackendOptions, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        if genai is None:  # pragma: no cover - google-genai is a dependency
            raise BackendConfigError("the gemini backend needs google-genai: pip install google-genai")
        if not model:
            raise BackendConfigError("gemini needs a model name, e.g. --backend gemini:gemini-3.8-flash")
        self.model = model
        self.options = options
        self._sleep = sleep
        key = keys.get_key(PROVIDER)
        if key is None:
            names = " or ".join(keys.KEY_VARIABLES[PROVIDER])
            raise BackendConfigError(f"no Gemini API key: set {names} (in the environment or .env)")
        #: The variable the key came from, named in auth errors.
        self.key_variable = next(
            (v for v in keys.KEY_VARIABLES[PROVIDER] if os.environ.get(v, "").strip()),
            keys.key_variable(PROVIDER),
        )
        self._redact: Callable[[str], str] = functools.partial(keys.redact, extra=[key])
        env_url = os.environ.get(keys.BASE_URL_VARIABLES[PROVIDER], "").strip()
        self.base_url: str | None = (options.base_url or "").strip() or env_url or None
        http_options = genai_types.HttpOptions(
            base_url=self.base_url,
            timeout=_timeout_ms(options.retry.timeout_s),
            retry_options=genai_types.HttpRetryOptions(attempts=1),
        )
        try:
            self._client = genai.Client(api_key=key, vertexai=False, http_options=http_options)
        except ValueError as exc:
            raise BackendConfigError(self._redact(f"cannot build the Gemini client: {exc}")) from None

    def _config(self, system: str | None, output: OutputFormat) -> Any:
        sampling = self.options.sampling
        kwargs: dict[str, Any] = {
            "max_output_tokens": sampling.max_output_tokens,
            # No tools are sent; this only skips the SDK's function-calling loop (nothing goes on the wire).
            "automatic_function_calling": genai_types.AutomaticFunctionCallingConfig(disable=True),
        }
        if sampling.temperature is not None:
            kwargs["temperature"] = sampling.temperature
        if system:
            kwargs["system_instruction"] = system
        if output.json_schema is not None:
            kwargs["response_mime_type"] = "application/json"
            kwargs["response_json_schema"] = gemini_json_schema(output.json_schema, output.name)
        return genai_types.GenerateContentConfig(**kwargs)

    def complete(
        self,
        messages: Sequence[Message],
        output: OutputFormat,
        context: PromptContext | None = None,
    ) -> Completion:
        """Send ``messages`` (native structured output when ``output.json_schema`` is set); see the module doc."""
        system, contents = to_gemini_contents(messages)
        config = self._config(system, output)
        response, attempts, latency = timed_call_with_retries(
            lambda: self._client.models.generate_content(model=self.model, contents=contents, config=config),
            self.classify,
            self.options.retry,
            describe=f"{PROVIDER}:{self.model}",
            key_variable=self.key_variable,
            sleep=self._sleep,
            redact=self._redact,
        )
        usage = response.usage_metadata
        thoughts = (usage.thoughts_token_count or 0) if usage else 0
        candidate = response.candidates[0] if response.candidates else None
        finish = getattr(candidate, "finish_reason", None) if candidate else None
        feedback = response.prompt_feedback
        extra: dict[str, Any] = {"thoughts_tokens": thoughts}
        if finish is not None:
            extra["finish_reason"] = str(getattr(finish, "value", finish))
        if feedback is not None and feedback.block_reason is not None:
            extra["block_reason"] = str(getattr(feedback.block_reason, "value", feedback.block_reason))
        return Completion(
            text=response.text or "",
            input_tokens=(usage.prompt_token_count or 0) if usage else 0,
            output_tokens=((usage.candidates_token_count or 0) + thoughts) if usage else 0,
            latency_s=latency,
            model=response.model_version or self.model,
            transport_attempts=attempts,
            extra=extra,
        )

    @staticmethod
    def classify(exc: BaseException) -> tuple[FaultKind, float | None]:
        """Map an SDK or transport exception to ``("retry", delay)``, ``("auth", None)`` or ``("fatal", None)``."""
        if isinstance(exc, genai_errors.APIError):
            # The HTTP code alone (Retry-After is read below, with the RetryInfo detail as a fallback).
            kind = http_status_fault(exc.code)[0] if isinstance(exc.code, int) else "fatal"
            status = str(exc.status or "").upper()
            if kind == "auth" or status in AUTH_RPC_STATUSES or _is_key_refusal(exc):
                return "auth", None
            if kind == "retry" or status in RETRY_RPC_STATUSES:
                return "retry", _retry_after_s(exc)
            return "fatal", None
        if isinstance(exc, TRANSPORT_ERRORS):
            return "retry", None
        return "fatal", None

    def describe(self) -> dict[str, Any]:
        """Provider, model, base URL (if any), key source (a variable name), sampling and retry policy; no key."""
        out: dict[str, Any] = {"provider": PROVIDER, "model": self.model}
        if self.base_url:
            out["base_url"] = self._redact(self.base_url)
        out.update(
            is_llm=self.is_llm,
            api="models.generateContent (Gemini Developer API)",
            structured_output="generationConfig.responseJsonSchema",
            key_source=self.key_variable,
            sampling=asdict(self.options.sampling),
            retry=self.options.retry.to_dict(),
        )
        return out
