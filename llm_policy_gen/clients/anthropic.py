"""Anthropic Claude through the ``anthropic`` SDK's Messages API (``POST /v1/messages``).

Wire choices (read from the installed SDK, ``anthropic/resources/messages/messages.py`` and ``anthropic/types``):

* System messages go to the top-level ``system`` parameter (joined by a blank line); the rest are ``messages``.
* Structured output, strongest first (see :mod:`.structured` for the fallback):

  - ``json_schema``: ``output_config={"format": {"type": "json_schema", "schema": S}}`` where ``S`` is our schema
    passed through the SDK's public :func:`anthropic.transform_schema` (the transform ``messages.parse`` applies:
    ``$defs``/``$ref`` kept, ``additionalProperties: false`` forced, unsupported keywords moved into descriptions);
    the format has no name field, so ``OutputSpec.name`` becomes the schema's ``title`` when it has none.
  - ``json_mode``: a forced tool call, ``tools=[{"name", "description", "input_schema": schema}]`` with
    ``tool_choice={"type": "tool", "name": ...}``; the answer is the tool call's ``input`` as JSON text.
  - ``prompt``: no JSON option at all.

* ``max_tokens`` is required: ``options.sampling.max_output_tokens``. The SDK has no ``temperature`` argument any
  more; a set temperature (0..1) goes through ``extra_body``, except to models that reject sampling parameters with a
  400 (Opus 4.7 and later, every generation-5 model): for those it is left out and ``Completion.extra`` says so.
* Usage: ``input_tokens`` counts every prompt token the call processed, ``usage.input_tokens +
  cache_creation_input_tokens + cache_read_input_tokens``; the last two are also ``cache_write_tokens`` and
  ``cached_input_tokens``. ``output_tokens`` is ``usage.output_tokens`` (thinking included).
* ``finish_reason`` is the ``stop_reason`` (``max_tokens`` means truncated); ``stop_reason="refusal"`` gives a
  short refusal text from ``stop_details``.
* The SDK's own retries are off (``max_retries=0``); ``options.retry.timeout_s`` is the SDK's timeout.
* The Messages API takes no seed: a repair is a new sample only by sampling itself; one of an answer asked at
  temperature 0 is sent warmer (:meth:`~.sdk.SDKClient.temperature_for`) so that it cannot get the refused
  answer back.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .base import ClientOptions, Completion, Request
from .faults import require
from .profiles import ClientProfile
from .retry import FaultKind, http_status_fault, retry_after_seconds
from .sdk import SDKClient, split_system
from .structured import schema_name

__all__ = ["ANTHROPIC_BASE_URL", "AnthropicClient", "accepts_temperature", "to_anthropic_schema"]

#: Anthropic's own endpoint (the SDK's default).
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
_log = logging.getLogger(__name__)
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:\D|$)")


def to_anthropic_schema(schema: Mapping[str, Any], name: str = "") -> dict[str, Any]:
    """``schema`` in the JSON-schema subset the Messages API accepts (via :func:`anthropic.transform_schema`)."""
    import anthropic

    out = anthropic.transform_schema(dict(schema))
    if name and "title" not in out:
        out["title"] = name
    return out


def accepts_temperature(model: str) -> bool:
    """False for models that answer ``temperature`` with HTTP 400 (Opus 4.7+, generation 5+, Fable, Mythos).

    Unknown names (gateways, future aliases) are assumed to accept it: the 400 then names the parameter.
    """
    name = model.lower().rsplit("/", 1)[-1]
    if "fable" in name or "mythos" in name:
        return False
    m = _CLAUDE_VERSION.search(name)
    if m is None:
        return True
    major, minor = int(m.group(1)), int(m.group(2) or 0)
    return (major, minor) < (4, 7)


def _refusal_text(response: Any) -> str:
    """A short text for ``stop_reason="refusal"``: the explanation, else the policy category."""
    details = getattr(response, "stop_details", None)
    explanation = getattr(details, "explanation", None)
    category = getattr(details, "category", None)
    if explanation:
        return str(explanation)
    return f"refused ({category})" if category else "the model refused to answer"


class AnthropicClient(SDKClient):
    """Claude via ``client.messages.create``.

    Args:
        model: Model name, e.g. ``claude-sonnet-4-6``.
        options: Base URL, retry policy (its ``timeout_s`` bounds each attempt) and sampling.
        sleep: Called between retries (tests pass a recorder).

    Raises:
        BackendConfigError: No ``ANTHROPIC_API_KEY``, empty model, or a temperature outside 0..1.
    """

    api: ClassVar[str] = "messages"
    provider_name: ClassVar[str] = "anthropic"
    description: ClassVar[str] = "Anthropic Claude through anthropic"
    default_model: ClassVar[str] = "claude-sonnet-5-5"
    key_variables: ClassVar[tuple[str, ...]] = ("ANTHROPIC_API_KEY",)
    base_url_variable: ClassVar[str | None] = "ANTHROPIC_BASE_URL"
    needs_key: ClassVar[bool] = True
    auto_order: ClassVar[int | None] = 3
    default_profile: ClassVar[ClientProfile] = ClientProfile("anthropic", "Anthropic", (0.0, 1.0), "max_tokens")

    def __init__(
        self, model: str, options: ClientOptions, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        import anthropic

        key = self.require_key()
        base_url = self.configured_url(options.base_url) or ANTHROPIC_BASE_URL
        super().__init__(
            self.provider_name, model, options, self.default_profile,
            base_url=base_url, key=key, key_source=self.key_found_in(), key_variable=self.key_name(), sleep=sleep,
        )  # fmt: skip
        self._send_temperature = options.sampling.temperature is not None and accepts_temperature(self.model)
        if options.sampling.temperature is not None and not self._send_temperature:
            _log.warning("%s rejects a sampling temperature; it is not sent (the model's default applies)", model)
        # An explicit api_key stops the SDK from reading ANTHROPIC_AUTH_TOKEN, profiles or federation settings.
        self._client = anthropic.Anthropic(
            api_key=key,
            base_url=base_url,
            max_retries=0,
            timeout=self.options.retry.attempt_timeout_s,
            http_client=anthropic.DefaultHttpxClient(event_hooks=self.http_event_hooks()),
        )

    def _arguments(self, request: Request, mode: str) -> dict[str, Any]:
        """Keyword arguments of ``messages.create`` for one call in ``mode``."""
        system, turns = split_system(request.messages)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.options.sampling.max_output_tokens,
            "messages": [m.to_dict() for m in turns],
        }
        if system:
            kwargs["system"] = system
        schema, name = request.output.json_schema, request.output.name
        if mode == "json_schema" and schema is not None:
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": to_anthropic_schema(schema, name)}}
        elif mode == "json_mode" and schema is not None:
            tool = schema_name(name)
            kwargs["tools"] = [
                {
                    "name": tool,
                    "description": "Give your answer as this tool's input.",
                    "input_schema": copy.deepcopy(schema),
                }
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": tool}
        if self._send_temperature:  # no seed here: a repair at temperature 0 goes warmer (``temperature_for``)
            kwargs["extra_body"] = {"temperature": self.temperature_for(request)}
        return kwargs

    def _send(self, request: Request, mode: str) -> Any:
        return self._client.messages.create(**self._arguments(request, mode))

    def _read(self, response: Any, mode: str) -> Completion:
        content = require(getattr(response, "content", None), "'content'", self.profile.label, list)
        tool_inputs = [b.input for b in content if getattr(b, "type", None) == "tool_use"]
        if mode == "json_mode" and tool_inputs:
            text = json.dumps(tool_inputs[0])
        else:
            text = "".join(b.text for b in content if getattr(b, "type", None) == "text")
        usage = response.usage
        fresh = (usage.input_tokens or 0) if usage is not None else 0
        cache_write = (usage.cache_creation_input_tokens or 0) if usage is not None else 0
        cache_read = (usage.cache_read_input_tokens or 0) if usage is not None else 0
        extra: dict[str, Any] = {}
        if self.options.sampling.temperature is not None and not self._send_temperature:
            extra["temperature_dropped"] = True
        stop = response.stop_reason
        return Completion(
            text=text,
            input_tokens=fresh + cache_write + cache_read,
            output_tokens=(usage.output_tokens or 0) if usage is not None else 0,
            cached_input_tokens=cache_read,
            cache_write_tokens=cache_write,
            model=response.model or self.model,
            finish_reason=stop,
            truncated=stop == "max_tokens",
            refusal=_refusal_text(response) if stop == "refusal" else None,
            extra=extra,
        )

    def _classify_sdk(self, exc: BaseException) -> tuple[FaultKind, float | None] | None:
        """408/409/429/5xx/529 and ``overloaded_error`` retry with the server's wait; 401/403 are auth."""
        import anthropic

        if isinstance(exc, (anthropic.APIConnectionError, anthropic.RetryableError)):
            return "retry", None
        if isinstance(exc, anthropic.APIStatusError):
            kind, wait_s = http_status_fault(exc.status_code, exc.response.headers)
            if kind == "fatal" and exc.type == "overloaded_error":  # Anthropic's overload, whatever the status
                return "retry", retry_after_seconds(exc.response.headers)
            return kind, wait_s
        return None

    def _bad_request_text(self, exc: BaseException) -> str | None:
        import anthropic

        if not isinstance(exc, anthropic.APIStatusError) or exc.status_code != 400:
            return None
        if exc.type not in (None, "invalid_request_error"):
            return None
        return exc.api_message or exc.message

    def _describe_extra(self) -> dict[str, Any]:
        return {"temperature_sent": self._send_temperature}
