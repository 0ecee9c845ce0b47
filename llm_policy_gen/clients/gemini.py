"""Google Gemini through ``google-genai`` (the Gemini Developer API, never Vertex AI).

One ``Client.models.generate_content`` call per attempt, under the shared retry policy (:mod:`.sdk`):

* **Key**: ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY`` (:meth:`~.sdk.SDKClient.find_key`). It is passed to the client
  explicitly, so our order wins over the SDK's own (which prefers ``GOOGLE_API_KEY``).
* **Base URL**: ``options.base_url``, else ``GOOGLE_GEMINI_BASE_URL`` (the variable the SDK itself reads in
  ``google/genai/_base_url.py``), else the SDK's default endpoint. The API version is the SDK's default
  (``v1`` in google-genai 3.x; ``GOOGLE_GENAI_API_VERSION=v1beta`` selects the beta API).
* **Transport**: ``HttpOptions.timeout`` is in *milliseconds* (``_api_client.get_timeout_in_seconds``) and is set
  from ``options.retry.timeout_s``; httpx2 applies it to each phase of an attempt (connect, write, each read).
  ``HttpRetryOptions(attempts=1)`` switches the SDK's tenacity retries off.
* **Structured output**, strongest first: ``json_schema`` is ``response_mime_type="application/json"`` plus
  ``response_json_schema`` (full JSON Schema with ``$defs``/``$ref``, sent unchanged except that a ``$ref`` may carry
  no sibling keywords on Gemini, so those are dropped); ``json_mode`` is the MIME type alone; ``prompt`` sends
  neither.
* **Seed**: ``GenerateContentConfig.seed`` is ``request.seed`` (a distinct sample per candidate and per repair).
* **Usage**: ``prompt_token_count`` is input (it includes ``cached_content_token_count``, the cached part);
  ``candidates_token_count + thoughts_token_count`` is output (thinking tokens are billed as output tokens).
* **Finish**: ``finish_reason`` is the candidate's (``MAX_TOKENS`` means truncated); a ``prompt_feedback``
  block reason or a safety finish reason (``SAFETY``, ``PROHIBITED_CONTENT``, ...) is the refusal.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import BackendConfigError
from .base import ClientOptions, Completion, Message, Request
from .faults import not_json
from .profiles import ClientProfile
from .retry import FaultKind, http_status_fault, retry_after_seconds
from .sdk import SDKClient, split_system

if TYPE_CHECKING:
    from google.genai import types as genai_types

__all__ = ["GEMINI_BASE_URL", "GeminiClient", "gemini_json_schema", "to_gemini_contents"]

#: The Gemini Developer API's endpoint (the SDK's default).
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"

#: google.rpc status names of refused credentials (used besides the HTTP code).
AUTH_RPC_STATUSES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
#: google.rpc status names of transient faults (used when a body carries no HTTP code).
RETRY_RPC_STATUSES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "INTERNAL"})
#: Finish reasons that mean the answer was withheld by a safety or policy filter.
REFUSAL_FINISH_REASONS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "MODEL_ARMOR",
    }
)


def to_gemini_contents(messages: tuple[Message, ...] | list[Message]) -> tuple[str | None, list[Any]]:
    """Split ``messages`` into Gemini's ``system_instruction`` and ``contents`` (assistant turns are ``"model"``)."""
    from google.genai import types as genai_types

    system, turns = split_system(messages)
    contents = []
    for m in turns:
        if m.role not in ("user", "assistant"):
            raise ValueError(f"unknown message role {m.role!r}; accepted: system, user, assistant")
        role = "model" if m.role == "assistant" else "user"
        contents.append(genai_types.Content(role=role, parts=[genai_types.Part(text=m.content)]))
    return system, contents


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


def _name(value: Any) -> str | None:
    """An SDK enum (or a plain string the SDK did not know) as its name."""
    return None if value is None else str(getattr(value, "value", value))


class GeminiClient(SDKClient):
    """Gemini models through ``google.genai.Client`` (Gemini Developer API).

    Args:
        model: Model id, e.g. ``"gemini-3.8-flash"``.
        options: Base URL, retry policy (its ``timeout_s`` bounds each attempt) and sampling.
        sleep: How retries wait (injectable for tests).

    Raises:
        BackendConfigError: No key, empty model, a temperature outside 0..2, or a client the SDK refuses to build.
    """

    api: ClassVar[str] = "models.generateContent (Gemini Developer API)"
    takes_seed: ClassVar[bool] = True
    provider_name: ClassVar[str] = "gemini"
    description: ClassVar[str] = "Google Gemini through google-genai"
    default_model: ClassVar[str] = "gemini-3.8-flash"
    key_variables: ClassVar[tuple[str, ...]] = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    base_url_variable: ClassVar[str | None] = "GOOGLE_GEMINI_BASE_URL"
    needs_key: ClassVar[bool] = True
    auto_order: ClassVar[int | None] = 1
    default_profile: ClassVar[ClientProfile] = ClientProfile("gemini", "Gemini", (0.0, 2.0), "max_output_tokens")

    def __init__(
        self, model: str, options: ClientOptions, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        from google import genai
        from google.genai import types as genai_types

        key = self.require_key()
        configured = self.configured_url(options.base_url)
        source = self.key_found_in()
        super().__init__(
            self.provider_name, model, options, self.default_profile,
            base_url=configured or GEMINI_BASE_URL, key=key, key_source=source, key_variable=source, sleep=sleep,
        )  # fmt: skip
        http_options = genai_types.HttpOptions(
            base_url=configured,
            timeout=_timeout_ms(self.options.retry.attempt_timeout_s),
            retry_options=genai_types.HttpRetryOptions(attempts=1),
            client_args={"event_hooks": self.http_event_hooks()},
        )
        try:
            self._client = genai.Client(api_key=key, vertexai=False, http_options=http_options)
        except ValueError as exc:
            raise BackendConfigError(self._redact(f"cannot build the Gemini client: {exc}")) from None

    def _config(self, system: str | None, request: Request, mode: str) -> genai_types.GenerateContentConfig:
        from google.genai import types as genai_types

        sampling = self.options.sampling
        kwargs: dict[str, Any] = {
            "max_output_tokens": sampling.max_output_tokens,
            # No tools are sent; this only skips the SDK's function-calling loop (nothing goes on the wire).
            "automatic_function_calling": genai_types.AutomaticFunctionCallingConfig(disable=True),
        }
        temperature = self.temperature_for(request)
        if temperature is not None:
            kwargs["temperature"] = temperature
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if system:
            kwargs["system_instruction"] = system
        schema = request.output.json_schema
        if mode in ("json_schema", "json_mode"):
            kwargs["response_mime_type"] = "application/json"
        if mode == "json_schema" and schema is not None:
            kwargs["response_json_schema"] = gemini_json_schema(schema, request.output.name)
        return genai_types.GenerateContentConfig(**kwargs)

    def _send(self, request: Request, mode: str) -> Any:
        system, contents = to_gemini_contents(request.messages)
        config = self._config(system, request, mode)
        return self._client.models.generate_content(model=self.model, contents=contents, config=config)

    def _read(self, response: Any, mode: str) -> Completion:
        candidates = response.candidates
        feedback = response.prompt_feedback
        block = _name(feedback.block_reason) if feedback is not None else None
        if not candidates and block is None:
            missing = "'candidates'" if candidates is None else "an empty 'candidates' list"
            raise not_json(self.profile.label, f"{missing} and no prompt feedback")
        finish = _name(candidates[0].finish_reason) if candidates else None
        usage = response.usage_metadata
        thoughts = (usage.thoughts_token_count or 0) if usage is not None else 0
        extra: dict[str, Any] = {"thoughts_tokens": thoughts}
        refusal = None
        if block is not None:
            message = getattr(feedback, "block_reason_message", None)
            refusal = f"prompt blocked: {block}" + (f" ({message})" if message else "")
            extra["block_reason"] = block
        elif finish in REFUSAL_FINISH_REASONS:
            refusal = f"answer blocked: {finish}"
        return Completion(
            text=(response.text or "") if candidates else "",
            input_tokens=(usage.prompt_token_count or 0) if usage is not None else 0,
            output_tokens=((usage.candidates_token_count or 0) + thoughts) if usage is not None else 0,
            cached_input_tokens=(usage.cached_content_token_count or 0) if usage is not None else 0,
            model=response.model_version or self.model,
            finish_reason=finish,
            truncated=finish == "MAX_TOKENS",
            refusal=refusal,
            extra=extra,
        )

    def _classify_sdk(self, exc: BaseException) -> tuple[FaultKind, float | None] | None:
        """Map an SDK error to ``("retry", delay)``, ``("auth", None)`` or ``("fatal", None)``."""
        from google.genai import errors as genai_errors

        if not isinstance(exc, genai_errors.APIError):
            return None
        # The HTTP code alone (Retry-After is read below, with the RetryInfo detail as a fallback).
        kind = http_status_fault(exc.code)[0] if isinstance(exc.code, int) else "fatal"
        status = str(exc.status or "").upper()
        if kind == "auth" or status in AUTH_RPC_STATUSES or _is_key_refusal(exc):
            return "auth", None
        if kind == "retry" or status in RETRY_RPC_STATUSES:
            return "retry", _retry_after_s(exc)
        return "fatal", None

    def _bad_request_text(self, exc: BaseException) -> str | None:
        from google.genai import errors as genai_errors

        if not isinstance(exc, genai_errors.APIError) or exc.code != 400 or _is_key_refusal(exc):
            return None
        return str(exc.message or "")
