"""A scripted loopback server that speaks Anthropic's Messages API (``POST /v1/messages``).

A :class:`fakes.loopback.LoopbackServer` on 127.0.0.1. Each request takes the next scripted step (:func:`ok`,
:func:`error`, :func:`hang`); when the queue is empty the server answers with ``responder(request_json) -> text`` if
one is set, else with a 400 ``invalid_request_error`` that says the script ran out. Every request is recorded
(method, path, headers, JSON body).

Wire format, as the ``anthropic`` SDK parses it (``anthropic/types/message.py``, ``usage.py``, ``_exceptions.py``):

* success: ``{"id", "type": "message", "role": "assistant", "model", "content": [{"type": "text", "text"}],
  "stop_reason", "stop_sequence", "usage": {"input_tokens", "output_tokens", "cache_creation_input_tokens",
  "cache_read_input_tokens"}}`` with a ``request-id`` header;
* a request that forces a tool (``tool_choice={"type": "tool", "name": N}``) gets the answer as that tool's call:
  ``content=[{"type": "tool_use", "id", "name": N, "input": <the answer text parsed as JSON>}]``,
  ``stop_reason="tool_use"``;
* a refusal: ``stop_reason="refusal"`` with ``stop_details={"type": "refusal", "category", "explanation"}``;
* error: ``{"type": "error", "error": {"type", "message"}, "request_id"}``, plus ``retry-after`` when scripted;
* :func:`raw`: any body and content type (a proxy's HTML page, JSON without ``content``).

Use :class:`FakeAnthropicServer` as a context manager, or the ``fake_anthropic`` pytest fixture, which also points
``ANTHROPIC_BASE_URL`` at the server and sets a fake ``ANTHROPIC_API_KEY`` (:data:`FAKE_KEY`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .loopback import PROXY_VARIABLES, LoopbackHandler, LoopbackServer, Recorded, ScriptStep, clear_env

__all__ = [
    "FAKE_KEY",
    "FakeAnthropicServer",
    "Recorded",
    "Step",
    "error",
    "fake_anthropic",
    "hang",
    "ok",
    "raw",
]

FAKE_KEY = "sk-ant-fake-0123456789abcdef"
MESSAGES_PATH = "/v1/messages"

#: HTTP status -> Anthropic ``error.type`` (``anthropic/types/shared/error_type.py``).
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Step(ScriptStep):
    """One scripted answer, with Anthropic's own fields."""

    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    model: str | None = None
    stop_reason: str | None = None
    """None: ``end_turn``, or ``tool_use`` when the request forced a tool."""
    stop_details: dict[str, Any] | None = None
    error_type: str | None = None


def ok(
    text: str,
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    model: str | None = None,
    stop_reason: str | None = None,
    stop_details: dict[str, Any] | None = None,
) -> Step:
    """A 200 answer whose single text block is ``text`` (a tool call when the request forced one); ``model``
    defaults to the requested model."""
    return Step.answer(
        text,
        input_tokens,
        output_tokens,
        cache_creation_input_tokens=cache_creation_input_tokens,
        cache_read_input_tokens=cache_read_input_tokens,
        model=model,
        stop_reason=stop_reason,
        stop_details=stop_details,
    )


def error(
    status: int,
    retry_after: float | str | None = None,
    *,
    error_type: str | None = None,
    message: str = "",
) -> Step:
    """An error answer in Anthropic's format; ``retry_after`` becomes the ``retry-after`` header."""
    return Step.failure(
        status,
        retry_after,
        error_type=error_type
        or ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error"),
        message=message or f"scripted {status}",
    )


#: ``hang(seconds)``: say nothing for ``seconds`` (longer than the client's timeout), then drop the connection.
hang = Step.hang
#: ``raw(body, content_type="text/html", status=200)``: any body, whatever the wire format.
raw = Step.raw


class _Handler(LoopbackHandler):
    fake: FakeAnthropicServer

    def reject(self, body: Any) -> bool:
        if self.path.split("?")[0] != MESSAGES_PATH:
            self.send_step_error(error(404, message=f"Not found: {self.path}"))
            return True
        key = self.headers.get("x-api-key")
        if key is None and self.headers.get("authorization", "").startswith("Bearer "):
            key = self.headers["authorization"][len("Bearer ") :]
        if self.fake.api_key is not None and key != self.fake.api_key:
            self.send_step_error(error(401, message="invalid x-api-key"))
            return True
        return False

    def send_step_ok(self, step: Step, body: Any) -> None:
        usage = {
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "cache_creation_input_tokens": step.cache_creation_input_tokens,
            "cache_read_input_tokens": step.cache_read_input_tokens,
            "service_tier": "standard",
        }
        request = body if isinstance(body, dict) else {}
        model = step.model or request.get("model") or "claude-fake"
        forced = request.get("tool_choice") or {}
        if forced.get("type") == "tool":
            call = {"type": "tool_use", "id": f"toolu_fake{self.request_id[8:]}", "name": forced.get("name")}
            content: list[dict[str, Any]] = [{**call, "input": json.loads(step.text or "{}")}]
            stop_reason = step.stop_reason or "tool_use"
        else:
            content = [{"type": "text", "text": step.text}]
            stop_reason = step.stop_reason or "end_turn"
        message = {
            "id": f"msg_fake{self.request_id[8:]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_details": step.stop_details,
            "stop_sequence": None,
            "usage": usage,
        }
        self.send_json(200, message, {"request-id": self.request_id})

    def do_GET(self) -> None:
        self.request_id = self.fake.request_id()
        self.send_step_error(error(404, message=f"Not found: {self.path}"))

    def send_step_error(self, step: Step) -> None:
        payload = {
            "type": "error",
            "error": {"type": step.error_type, "message": step.message},
            "request_id": self.request_id,
        }
        headers = {"request-id": self.request_id}
        if step.retry_after is not None:
            headers["retry-after"] = step.retry_after
        self.send_json(step.status, payload, headers)


class FakeAnthropicServer(LoopbackServer[Step]):
    """The scripted server (see :class:`~fakes.loopback.LoopbackServer` for the arguments).

    ``api_key``: when set, a request presenting another key gets a 401. The key is read from ``x-api-key`` or
    ``Authorization: Bearer`` (the SDK 2.x sends an ``api_key`` as a bearer token, ``anthropic/_client.py``).
    :attr:`url` is the base URL to hand to the SDK.
    """

    name = "anthropic"
    handler = _Handler

    def _reply_step(self, text: str, input_tokens: int, output_tokens: int) -> Step:
        return ok(text, input_tokens, output_tokens)

    def _ran_out_step(self, message: str) -> Step:
        return error(400, message=message)


@pytest.fixture
def fake_anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    """A started server; ``ANTHROPIC_BASE_URL`` points at it and ``ANTHROPIC_API_KEY`` is :data:`FAKE_KEY`."""
    clear_env(monkeypatch, ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS", *PROXY_VARIABLES))
    with FakeAnthropicServer(api_key=FAKE_KEY) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        yield server
