"""OpenAI and OpenAI-compatible servers (Ollama, vLLM, llama.cpp server, LM Studio) via Chat Completions.

The Chat Completions API (``client.chat.completions.create``, ``POST {base_url}/chat/completions``) is used rather
than the Responses API because every local OpenAI-compatible server implements it.

Providers:

* ``openai``: key from ``OPENAI_API_KEY``; base URL from ``--base-url``, else ``OPENAI_BASE_URL``, else OpenAI's.
  When the base URL points at another server (vLLM, llama.cpp, LM Studio) and no key is set, a placeholder key is
  sent, because local servers do not check it. The output cap is sent as ``max_completion_tokens`` to OpenAI's own
  API (newer models refuse ``max_tokens``) and as ``max_tokens`` to any other server (many ignore the newer name,
  some refuse it): the ``openai`` and ``openai-compatible`` profiles.
* ``ollama`` (:class:`~.ollama.OllamaClient`, a subclass): no key (a placeholder is sent); base URL from
  ``--base-url``, else ``OLLAMA_BASE_URL``, else ``http://localhost:11434/v1`` (a bare ``http://host:11434`` gets
  ``/v1`` appended); ``max_tokens``.
  :func:`server_answers` tells whether a server is listening there.

Structured output, strongest first (see :mod:`.structured` for the fallback): ``json_schema`` is
``response_format={"type": "json_schema", "json_schema": {"name", "schema", "strict": True}}`` with the schema made
strict by the SDK's own helper; ``json_mode`` is ``response_format={"type": "json_object"}``, to which every server
but OpenAI's own gets the answer's schema as ``"schema"``; ``prompt`` sends no ``response_format``.

What the servers document (read from their documentation pages, November 2026):

* ``llama_cpp.server`` (llama-cpp-python) refuses ``json_schema`` (its request model allows ``text`` and
  ``json_object`` only; the validation error comes back as HTTP 500 naming ``response_format``) and takes
  ``{"type": "json_object", "schema": {...}}``, which it enforces as a grammar. So the first call steps down to
  ``json_mode`` at once and every later call sends the schema that way.
* vLLM takes OpenAI's ``json_schema`` form (and ``json_object``, plus its own ``guided_json`` extra parameter); an
  unknown ``schema`` key beside ``json_object`` is ignored.
* LM Studio takes OpenAI's ``json_schema`` form only ("it follows the same format as OpenAI's Structured Output
  API"); ``json_object`` is not supported, so a refusal there steps on to ``prompt``.
* Ollama's OpenAI-compatible endpoint takes ``json_schema`` (enforced by llama.cpp's grammar, since 0.5) and
  ``json_object`` (its native API's ``format`` field takes a schema; the compatible endpoint has no other form).

A structured-output request refused with any 4xx or 5xx (but 401, 403, 408 and 429, which mean something else)
whose body names the structured-output field is a refusal, not a transient fault: the client steps down at once,
without retrying, and says so once (``extra["structured_output_fallback"]``).

Local servers: ``ollama``, and ``openai`` with a base URL on a loopback address (not OpenAI's), are local
(:mod:`.sdk`): 600 s per attempt unless ``--timeout`` is given, no retry of a timed-out attempt, and at most
``options.local_concurrency`` calls at once.

Seeds: every call sends ``seed=request.seed`` (OpenAI, vLLM, llama.cpp, LM Studio and Ollama take it), so that the K
candidates of one prompt are K different requests and a repair is not sent at the settings of the refused answer.

Answer fields: ``finish_reason`` is the choice's (``length`` means truncated), ``refusal`` is ``message.refusal``
(or "content filter" for ``finish_reason="content_filter"``), ``cached_input_tokens`` is
``usage.prompt_tokens_details.cached_tokens`` (part of ``prompt_tokens``).

The SDK's own retries are off (``max_retries=0``); ``options.retry.timeout_s`` is the SDK's timeout, which httpx2
applies to each phase of an attempt (connect, write, and each read), and the whole attempt's deadline
(:mod:`.deadline`): an attempt past it has its connection shut down (the SDK's HTTP client reports each answer's
connection through :meth:`~.sdk.SDKClient.http_event_hooks`), so that a trickling server stops sending at once.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ..errors import BackendConfigError
from . import keys
from .base import ClientOptions, Completion, Request
from .faults import not_json, require
from .profiles import ClientProfile
from .retry import AUTH_STATUSES, FaultKind, http_status_fault
from .sdk import SDKClient
from .structured import schema_name

__all__ = ["OPENAI_BASE_URL", "OpenAIClient", "server_answers"]

#: OpenAI's own endpoint (the SDK's default).
OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Error statuses that mean something else than a refused request, whatever their body says.
_NOT_A_REFUSAL = AUTH_STATUSES | {408, 429}


def _is_openai_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` made acceptable to strict structured output, by the SDK's own helper.

    Every object gets ``additionalProperties: false`` and all its properties required; a ``$ref`` with siblings is
    inlined. Falls back to the plain copy if a future SDK moves the (private) helper.
    """
    schema = copy.deepcopy(schema)
    try:
        from openai.lib._pydantic import _ensure_strict_json_schema
    except ImportError:  # pragma: no cover - depends on the SDK version
        return schema
    return _ensure_strict_json_schema(schema, path=(), root=schema)


def server_answers(base_url: str, timeout_s: float = 1.0) -> bool:
    """True when anything answers ``GET <base_url>/models`` within ``timeout_s`` (any HTTP status counts).

    For ``llm-policy-gen backends``: Ollama needs no key, so "configured" means "a server is listening".
    """
    import httpx2  # the SDK's HTTP library, imported when a call is made (``backends`` stays fast)

    url = base_url.rstrip("/") + "/models"
    try:
        httpx2.get(url, timeout=timeout_s)
    except (httpx2.HTTPError, OSError):
        return False
    return True


class OpenAIClient(SDKClient):
    """OpenAI, or any OpenAI-compatible server, through ``client.chat.completions.create``.

    A subclass serves another OpenAI-compatible provider by its class variables alone (:class:`~.ollama.OllamaClient`).

    Args:
        model: Model name sent as ``model`` (e.g. ``gpt-6.2-sol``, ``llama3.1:8b``).
        options: Base URL, retry policy (its ``timeout_s`` bounds each attempt) and sampling.
        sleep: Called between retries (tests pass a recorder).

    Raises:
        BackendConfigError: Empty model, a temperature outside 0..2, or no key where one is needed (OpenAI's own API,
            or a provider whose ``needs_key`` is set).
    """

    api: ClassVar[str] = "chat.completions"
    takes_seed: ClassVar[bool] = True
    provider_name: ClassVar[str] = "openai"
    description: ClassVar[str] = "OpenAI or any OpenAI-compatible server (--base-url)"
    default_model: ClassVar[str] = "gpt-6.2-sol"
    key_variables: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    base_url_variable: ClassVar[str | None] = "OPENAI_BASE_URL"
    auto_order: ClassVar[int | None] = 2
    default_base_url: ClassVar[str] = OPENAI_BASE_URL
    """Where calls go without ``--base-url`` or :attr:`base_url_variable`."""
    placeholder_key: ClassVar[str] = "sk-no-key-required"
    """The key sent when none is set (servers that check none; never a secret, not redacted)."""
    default_profile: ClassVar[ClientProfile] = ClientProfile("openai", "OpenAI", (0.0, 2.0), "max_completion_tokens")
    compatible_profile: ClassVar[ClientProfile | None] = ClientProfile(
        "openai-compatible", "the OpenAI-compatible server", (0.0, 2.0), "max_tokens"
    )
    """The profile for any server but OpenAI's own (vLLM, llama.cpp, LM Studio behind ``--base-url``); None: the
    :attr:`default_profile` wherever the server is (a subclass for one provider)."""

    @classmethod
    def profiles(cls) -> tuple[ClientProfile, ...]:
        other = cls.compatible_profile
        return (cls.default_profile,) if other is None else (cls.default_profile, other)

    @classmethod
    def profile_for(cls, base_url: str) -> ClientProfile:
        other = cls.compatible_profile
        return cls.default_profile if other is None or _is_openai_host(base_url) else other

    @classmethod
    def base_url_for(cls, explicit: str | None) -> str:
        """The URL calls go to: ``--base-url``, else :attr:`base_url_variable`, else :attr:`default_base_url`."""
        return cls.configured_url(explicit) or cls.default_base_url

    def __init__(
        self, model: str, options: ClientOptions, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        import openai

        base_url = self.base_url_for(options.base_url)
        self._schema_in_json_mode = not _is_openai_host(base_url)
        """json_object requests carry the schema (llama_cpp.server enforces it; OpenAI would refuse the key)."""
        key = self.require_key() if self.needs_key else self.find_key()
        if key is None and _is_openai_host(base_url):
            raise BackendConfigError(
                f"{self.provider_name} needs an API key: set {self.key_name()} (in the environment or .env), "
                f"or point --base-url / {self.base_url_variable} at an OpenAI-compatible server"
            )
        super().__init__(
            self.provider_name, model, options, self.profile_for(base_url),
            base_url=base_url, key=key, key_source=self.key_found_in() if key is not None else "placeholder",
            key_variable=self.key_name(), sleep=sleep,
            local=keys.is_loopback_url(base_url) and not _is_openai_host(base_url),
        )  # fmt: skip
        self._client = openai.OpenAI(
            api_key=key or self.placeholder_key,
            base_url=base_url,
            max_retries=0,
            timeout=self.options.retry.attempt_timeout_s,
            http_client=openai.DefaultHttpxClient(event_hooks=self.http_event_hooks()),
        )

    def _arguments(self, request: Request, mode: str) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` (system messages stay in ``messages``)."""
        sampling = self.options.sampling
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_dict() for m in request.messages],
            self.profile.token_parameter: sampling.max_output_tokens,
        }
        temperature = self.temperature_for(request)
        if temperature is not None:
            kwargs["temperature"] = temperature
        if request.seed is not None:
            kwargs["seed"] = request.seed
        schema = request.output.json_schema
        if mode == "json_schema" and schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request.output.name),
                    "schema": _strict_schema(schema),
                    "strict": True,
                },
            }
        elif mode == "json_mode":
            kwargs["response_format"] = {"type": "json_object"}
            if schema is not None and self._schema_in_json_mode:
                kwargs["response_format"]["schema"] = schema
        return kwargs

    def _send(self, request: Request, mode: str) -> Any:
        return self._client.chat.completions.create(**self._arguments(request, mode))

    def _read(self, response: Any, mode: str) -> Completion:
        label = self.profile.label
        choices = require(getattr(response, "choices", None), "'choices'", label, list)
        if not choices:
            raise not_json(label, "an empty 'choices' list")
        choice = choices[0]
        message = require(choice.message, "'choices[0].message'", label)
        finish = choice.finish_reason
        refusal = message.refusal or ("content filter" if finish == "content_filter" else None)
        usage = response.usage
        details = usage.prompt_tokens_details if usage is not None else None
        return Completion(
            text=message.content or "",
            input_tokens=int(usage.prompt_tokens or 0) if usage is not None else 0,
            output_tokens=int(usage.completion_tokens or 0) if usage is not None else 0,
            cached_input_tokens=int(details.cached_tokens or 0) if details is not None else 0,
            model=response.model or self.model,
            finish_reason=finish,
            truncated=finish == "length",
            refusal=refusal,
        )

    def _classify_sdk(self, exc: BaseException) -> tuple[FaultKind, float | None] | None:
        """An HTTP status by :func:`~.retry.http_status_fault`; other connection errors retry."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            return http_status_fault(exc.status_code, exc.response.headers)
        if isinstance(exc, openai.APIConnectionError):
            return "retry", None
        return None

    def _bad_request_text(self, exc: BaseException) -> str | None:
        """Any 4xx or 5xx (see the module doc): its message, parameter and body (a FastAPI validation error names
        the offending field in its ``loc``, which the SDK's message may not show)."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or exc.status_code in _NOT_A_REFUSAL:
            return None
        text = exc.message + (f" (param: {exc.param})" if exc.param else "")
        if exc.body is not None and str(exc.body) not in text:
            text += f" {exc.body}"
        return text
