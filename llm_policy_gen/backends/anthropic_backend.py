"""Anthropic Claude through the ``anthropic`` SDK's Messages API (``POST /v1/messages``).

Wire choices (read from the installed SDK, ``anthropic/resources/messages/messages.py`` and ``anthropic/types``):

* System messages go to the top-level ``system`` parameter (joined by a blank line); the rest are ``messages``.
* Structured output is native and non-beta: ``output_config={"format": {"type": "json_schema", "schema": S}}``
  (``OutputConfigParam`` / ``JSONOutputFormatParam``). ``S`` is our schema passed through the SDK's public
  :func:`anthropic.transform_schema`, the same transform ``messages.parse(output_format=...)`` applies: it keeps the
  ``$defs``/``$ref``, forces ``additionalProperties: false`` and moves unsupported keywords into descriptions. The
  format has no name field, so ``OutputFormat.name`` becomes the schema's ``title`` when it has none.
* ``max_tokens`` is required: ``options.sampling.max_output_tokens``. The SDK has no ``temperature`` argument any
  more; a set temperature goes through ``extra_body``, except to models that reject sampling parameters with a 400
  (Opus 4.7 and later, every generation-5 model): for those it is left out and ``Completion.extra`` says so.
* Usage: ``input_tokens`` counts every prompt token the call processed, i.e. ``usage.input_tokens +
  cache_creation_input_tokens + cache_read_input_tokens`` (Anthropic reports the three apart; the split is kept in
  ``Completion.extra["usage"]`` for exact pricing). ``output_tokens`` is ``usage.output_tokens`` (thinking included).
* The SDK's own retries are off (``max_retries=0``); :func:`~.base.call_with_retries` is the only retry loop.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BackendConfigError
from . import keys
from .base import Completion, FaultKind, Message, OutputFormat, http_status_fault, timed_call_with_retries
from .base import retry_after_seconds as retry_after_seconds  # re-exported: its home before base.py

if TYPE_CHECKING:
    from ..prompt import PromptContext
    from . import BackendOptions

__all__ = ["AnthropicBackend", "accepts_temperature", "retry_after_seconds", "to_anthropic_schema"]

PROVIDER = "anthropic"
_log = logging.getLogger(__name__)
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:\D|$)")


def to_anthropic_schema(schema: Mapping[str, Any], name: str = "") -> dict[str, Any]:
    """``schema`` in the JSON-schema subset the Messages API accepts (via :func:`anthropic.transform_schema`)."""
    from anthropic import transform_schema

    out = transform_schema(dict(schema))
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


class AnthropicBackend:
    """Claude via ``client.messages.create``, with native JSON-schema structured output."""

    name: str = PROVIDER
    is_llm: bool = True

    def __init__(
        self,
        model: str,
        options: BackendOptions,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Build the SDK client; a missing key raises :class:`BackendConfigError` naming the variable.

        ``sleep`` is the pause between retries (tests pass a recorder).
        """
        import anthropic

        self.model = model
        self.options = options
        self._sleep = sleep
        key = keys.get_key(PROVIDER)
        if key is None:
            raise BackendConfigError(
                f"the anthropic backend needs an API key: set {keys.key_variable(PROVIDER)} "
                "(in the environment or .env)"
            )
        self.base_url: str | None = (
            options.base_url or os.environ.get(keys.BASE_URL_VARIABLES[PROVIDER]) or None
        )
        self._send_temperature = options.sampling.temperature is not None and accepts_temperature(model)
        if options.sampling.temperature is not None and not self._send_temperature:
            _log.warning(
                "%s rejects a sampling temperature; it is not sent (the model's default applies)", model
            )
        # An explicit api_key stops the SDK from reading ANTHROPIC_AUTH_TOKEN, profiles or federation settings.
        self._client = anthropic.Anthropic(
            api_key=key,
            base_url=self.base_url,
            max_retries=0,
            timeout=options.retry.timeout_s,
        )

    def _request(self, messages: Sequence[Message], output: OutputFormat) -> dict[str, Any]:
        """Keyword arguments of ``messages.create`` for one call."""
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        if not turns:
            raise ValueError("the Messages API needs at least one user message besides the system prompt")
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.options.sampling.max_output_tokens,
            "messages": turns,
        }
        if system:
            kwargs["system"] = system
        if output.json_schema is not None:
            schema = to_anthropic_schema(output.json_schema, output.name)
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        if self._send_temperature:
            kwargs["extra_body"] = {"temperature": self.options.sampling.temperature}
        return kwargs

    def complete(
        self,
        messages: Sequence[Message],
        output: OutputFormat,
        context: PromptContext | None = None,
    ) -> Completion:
        """Send ``messages``; return the text blocks of the answer, the token usage and the wall time."""
        kwargs = self._request(messages, output)
        response, attempts, latency = timed_call_with_retries(
            lambda: self._client.messages.create(**kwargs),
            self.classify,
            self.options.retry,
            describe=f"{PROVIDER}:{self.model}",
            key_variable=keys.key_variable(PROVIDER),
            sleep=self._sleep,
            redact=keys.redact,
        )
        text = "".join(block.text for block in response.content if getattr(block, "type", "") == "text")
        usage = response.usage
        cache_write = usage.cache_creation_input_tokens or 0
        cache_read = usage.cache_read_input_tokens or 0
        extra: dict[str, Any] = {
            "stop_reason": response.stop_reason,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": usage.output_tokens,
            },
        }
        if self.options.sampling.temperature is not None and not self._send_temperature:
            extra["temperature_dropped"] = True
        return Completion(
            text=text,
            input_tokens=usage.input_tokens + cache_write + cache_read,
            output_tokens=usage.output_tokens,
            latency_s=latency,
            model=response.model or self.model,
            transport_attempts=attempts,
            extra=extra,
        )

    @staticmethod
    def classify(exc: BaseException) -> tuple[FaultKind, float | None]:
        """Timeouts, connection errors, 408/409/429/5xx/529 and ``overloaded_error`` retry; 401/403 are auth."""
        import anthropic

        if isinstance(
            exc, (anthropic.APIConnectionError, anthropic.RetryableError)
        ):  # APITimeoutError included
            return "retry", None
        if isinstance(exc, anthropic.APIStatusError):
            kind, wait_s = http_status_fault(exc.status_code, exc.response.headers)
            if kind == "fatal" and exc.type == "overloaded_error":  # Anthropic's overload, whatever the status
                return "retry", retry_after_seconds(exc.response.headers)
            return kind, wait_s
        return "fatal", None

    def describe(self) -> dict[str, Any]:
        """Provider, model, base URL, sampling and retry policy for config.json (never the key)."""
        info: dict[str, Any] = {
            "provider": PROVIDER,
            "model": self.model,
            "is_llm": self.is_llm,
            "api": "messages",
            "structured_output": "output_config.format json_schema",
            "max_output_tokens": self.options.sampling.max_output_tokens,
            "temperature": self.options.sampling.temperature,
            "temperature_sent": self._send_temperature,
            "retry": self.options.retry.to_dict(),
        }
        if self.base_url:
            info["base_url"] = keys.redact(self.base_url)
        return info
