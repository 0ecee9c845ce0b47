"""OpenAI and OpenAI-compatible servers (Ollama, vLLM, llama.cpp server, LM Studio) via Chat Completions.

The Chat Completions API (``client.chat.completions.create``, ``POST {base_url}/chat/completions``) is used
rather than the Responses API because every local OpenAI-compatible server implements it. The answer is
requested through native structured output: ``response_format={"type": "json_schema", "json_schema":
{"name": ..., "schema": ..., "strict": True}}``.

Providers:

* ``openai``: key from ``OPENAI_API_KEY``; base URL from ``--base-url``, else ``OPENAI_BASE_URL``, else
  OpenAI's. When the base URL points at another server (vLLM, llama.cpp, LM Studio) and no key is set, a
  placeholder key is sent, because local servers do not check it. The output cap is sent as
  ``max_completion_tokens`` to OpenAI's own API (newer models refuse ``max_tokens``) and as ``max_tokens`` to
  any other server (many ignore the newer name, some refuse it).
* ``ollama``: no key (a placeholder is sent); base URL from ``--base-url``, else ``OLLAMA_BASE_URL``, else
  ``http://localhost:11434/v1`` (a bare ``http://host:11434`` gets ``/v1`` appended); ``max_tokens``.

The SDK's own retries are off (``max_retries=0``): :func:`~llm_policy_gen.backends.base.call_with_retries`
with ``options.retry`` is the only retry policy, and ``options.retry.timeout_s`` is the SDK's request timeout.
"""

from __future__ import annotations

import copy
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import openai

from ..errors import BackendConfigError
from . import keys
from .base import Completion, FaultKind, Message, OutputFormat, http_status_fault, timed_call_with_retries
from .base import retry_after_seconds as retry_after_seconds  # re-exported: its home before base.py

if TYPE_CHECKING:
    from ..prompt import PromptContext
    from . import BackendOptions

__all__ = [
    "OLLAMA_BASE_URL",
    "OPENAI_BASE_URL",
    "PLACEHOLDER_KEYS",
    "OpenAIBackend",
    "classify_openai_error",
    "retry_after_seconds",
]

#: OpenAI's own endpoint (the SDK's default).
OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Ollama's OpenAI-compatible endpoint on the local machine.
OLLAMA_BASE_URL = "http://localhost:11434/v1"
#: Keys sent to servers that do not check one (never a secret; not redacted).
PLACEHOLDER_KEYS: dict[str, str] = {"ollama": "ollama", "openai": "sk-no-key-required"}

_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")


def classify_openai_error(exc: BaseException) -> tuple[FaultKind, float | None]:
    """Map an SDK exception to the shared retry policy's fault kinds.

    Timeouts and connection errors retry; an HTTP status is sorted by
    :func:`~llm_policy_gen.backends.base.http_status_fault` (408, 409, 429 and 5xx retry with the server's
    ``Retry-After``; 401 and 403 are auth faults); everything else (400, 404, 422, a malformed response, ...)
    is fatal.
    """
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is a subclass
        return "retry", None
    if isinstance(exc, openai.APIStatusError):
        return http_status_fault(exc.status_code, exc.response.headers)
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return "retry", None
    return "fatal", None


def _is_openai_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def _without_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` removed (for config.json and error messages)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` made acceptable to strict structured output, by the SDK's own helper.

    Every object gets ``additionalProperties: false`` and all its properties required; a ``$ref`` with
    siblings is inlined. The proposal schemas already satisfy this; the helper guards schemas added later.
    Falls back to the plain copy if a future SDK moves the (private) helper.
    """
    schema = copy.deepcopy(schema)
    try:
        from openai.lib._pydantic import _ensure_strict_json_schema
    except ImportError:  # pragma: no cover - depends on the SDK version
        return schema
    return _ensure_strict_json_schema(schema, path=(), root=schema)


class OpenAIBackend:
    """OpenAI, or any OpenAI-compatible server, through ``client.chat.completions.create``.

    Args:
        model: Model name sent as ``model`` (e.g. ``gpt-6.2-sol``, ``llama3.1:8b``).
        options: Shared backend options (base URL, retry policy, sampling).
        provider: ``"openai"`` (OpenAI or a compatible server given by the base URL) or ``"ollama"``.
        sleep: Called between retries (tests pass a recorder).

    Raises:
        BackendConfigError: Unknown provider, empty model, or ``OPENAI_API_KEY`` missing for OpenAI's own API.
    """

    is_llm = True

    def __init__(
        self,
        model: str,
        options: BackendOptions,
        provider: str = "openai",
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if provider not in ("openai", "ollama"):
            raise BackendConfigError(f"OpenAIBackend serves 'openai' and 'ollama', got provider {provider!r}")
        if not model or not model.strip():
            raise BackendConfigError(f"{provider} needs a model name: --backend {provider}:MODEL")
        self.name: str = provider
        self.model: str = model.strip()
        self.options = options
        self._sleep = sleep
        self.base_url = self._resolve_base_url(provider, options.base_url)
        self._key_variable = keys.key_variable(provider)
        api_key, self._key_source = self._resolve_key(provider, self.base_url, self._key_variable)
        own_api = provider == "openai" and _is_openai_host(self.base_url)
        self._token_parameter = "max_completion_tokens" if own_api else "max_tokens"
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=options.retry.timeout_s,
        )

    @staticmethod
    def _resolve_base_url(provider: str, explicit: str | None) -> str:
        variable = keys.BASE_URL_VARIABLES[provider]
        url = (explicit or "").strip() or _env(variable)
        if provider == "ollama":
            url = url or OLLAMA_BASE_URL
            if urlsplit(url).path in ("", "/"):
                url = url.rstrip("/") + "/v1"
            return url
        return url or OPENAI_BASE_URL

    @staticmethod
    def _resolve_key(provider: str, base_url: str, variable: str) -> tuple[str, str]:
        """The key to send and where it came from (a variable name or ``"placeholder"``; never the value)."""
        key = keys.get_key(provider)
        if key is not None:
            return key, variable
        if provider == "ollama" or not _is_openai_host(base_url):
            return PLACEHOLDER_KEYS[provider], "placeholder"
        raise BackendConfigError(
            f"{provider} needs an API key: set {variable} (in the environment or .env), "
            f"or point --base-url / {keys.BASE_URL_VARIABLES[provider]} at an OpenAI-compatible server"
        )

    def _request(self, messages: Sequence[Message], output: OutputFormat) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` (system messages stay in ``messages``)."""
        sampling = self.options.sampling
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_dict() for m in messages],
            self._token_parameter: sampling.max_output_tokens,
        }
        if sampling.temperature is not None:
            request["temperature"] = sampling.temperature
        if output.json_schema is not None:
            name = _SCHEMA_NAME.sub("_", output.name)[:64] or "answer"
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": _strict_schema(output.json_schema), "strict": True},
            }
        return request

    def complete(
        self,
        messages: Sequence[Message],
        output: OutputFormat,
        context: PromptContext | None = None,
    ) -> Completion:
        """Send ``messages``; return the answer text, token usage and wall time (retries included)."""
        request = self._request(messages, output)
        response, attempts, latency = timed_call_with_retries(
            lambda: self._client.chat.completions.create(**request),
            self.classify,
            self.options.retry,
            describe=f"{self.name}:{self.model} at {_without_userinfo(self.base_url)}",
            key_variable=self._key_variable,
            sleep=self._sleep,
            redact=keys.redact,
        )
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content if choice is not None else None) or ""
        extra: dict[str, Any] = {"finish_reason": choice.finish_reason if choice is not None else None}
        if choice is not None and choice.message.refusal:
            extra["refusal"] = choice.message.refusal
        usage = response.usage
        return Completion(
            text=text,
            input_tokens=int(usage.prompt_tokens) if usage is not None else 0,
            output_tokens=int(usage.completion_tokens) if usage is not None else 0,
            latency_s=latency,
            model=response.model or self.model,
            transport_attempts=attempts,
            extra=extra,
        )

    def classify(self, exc: BaseException) -> tuple[FaultKind, float | None]:
        """See :func:`classify_openai_error`."""
        return classify_openai_error(exc)

    def describe(self) -> dict[str, Any]:
        """Provider, model, base URL, key source (a variable name, never the key) and the retry policy."""
        return {
            "provider": self.name,
            "model": self.model,
            "base_url": _without_userinfo(self.base_url),
            "is_llm": self.is_llm,
            "api": "chat.completions",
            "structured_output": "response_format json_schema (strict)",
            "token_parameter": self._token_parameter,
            "key_source": self._key_source,
            "sampling": asdict(self.options.sampling),
            "retry": self.options.retry.to_dict(),
        }
