"""A loopback server that speaks the Gemini Developer API's ``generateContent`` wire protocol.

``POST /{version}/models/{model}:generateContent`` with the key in ``x-goog-api-key``; answers are
``GenerateContentResponse`` JSON (``candidates``, ``usageMetadata``, ``modelVersion``), errors are Google's
``{"error": {"code", "message", "status", "details"}}`` with an optional ``Retry-After`` header and/or a
``google.rpc.RetryInfo`` detail (what the real API sends with a 429). A wrong key gets the real API's answer:
HTTP 400 ``INVALID_ARGUMENT`` with ErrorInfo reason ``API_KEY_INVALID``.

The server is scripted: :meth:`FakeGeminiServer.ok`, :meth:`~FakeGeminiServer.blocked` (a prompt refused by the
safety filter: ``promptFeedback.blockReason`` and no candidates), :meth:`~FakeGeminiServer.error`,
:meth:`~FakeGeminiServer.hang` and :meth:`~FakeGeminiServer.raw` (any body and content type) queue one step each;
once the queue is empty a ``responder(request_json) -> text`` answers (so a multi-iteration run can talk to it), and
without one the server answers 400 ``INVALID_ARGUMENT``. Every request is recorded (:attr:`FakeGeminiServer.requests`).
Only 127.0.0.1 is used. The server's lifecycle, script queue and request log are :mod:`fakes.loopback`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .loopback import LoopbackHandler, LoopbackServer, Recorded, Responder, ScriptStep, clear_env

__all__ = ["FAKE_GEMINI_KEY", "FakeGeminiServer", "RecordedRequest", "Step", "fake_gemini_fixture"]

#: The key the fixture puts in GEMINI_API_KEY; it must never show up in an error message.
FAKE_GEMINI_KEY = "AIzaFAKE-gemini-test-key-0123456789"

_PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:]+):generateContent$")
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class RecordedRequest(Recorded):
    """One request as the server saw it (header names lower-cased), with the API version and model of its path."""

    @property
    def api_version(self) -> str:
        m = _PATH.match(self.path)
        return m.group("version") if m else ""

    @property
    def model(self) -> str:
        m = _PATH.match(self.path)
        return m.group("model") if m else ""


@dataclass(frozen=True)
class Step(ScriptStep):
    """One scripted answer, with Gemini's own fields (``retry_delay`` is a ``google.rpc.RetryInfo`` detail)."""

    thoughts_tokens: int = 0
    cached_tokens: int = 0
    model_version: str | None = None
    finish_reason: str = "STOP"
    block_reason: str | None = None
    """Set: the prompt was blocked (``promptFeedback.blockReason``; no candidates)."""
    retry_delay: str | None = None
    extra_details: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def error_body(status: int, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Google's JSON error envelope."""
    err: dict[str, Any] = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    if details:
        err["details"] = details
    return {"error": err}


def ok_body(step: Step, model: str, model_version: str | None) -> dict[str, Any]:
    """A ``GenerateContentResponse`` in the API's camelCase JSON."""
    usage: dict[str, Any] = {
        "promptTokenCount": step.input_tokens,
        "candidatesTokenCount": step.output_tokens,
        "totalTokenCount": step.input_tokens + step.output_tokens + step.thoughts_tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": step.input_tokens}],
    }
    if step.thoughts_tokens:
        usage["thoughtsTokenCount"] = step.thoughts_tokens
    if step.cached_tokens:
        usage["cachedContentTokenCount"] = step.cached_tokens
    if step.block_reason is not None:
        return {
            "promptFeedback": {"blockReason": step.block_reason},
            "usageMetadata": usage,
            "modelVersion": step.model_version or model_version or model,
        }
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": step.text}], "role": "model"},
                "finishReason": step.finish_reason,
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        "modelVersion": step.model_version or model_version or model,
        "responseId": "fake-response-id",
    }


class _GeminiHandler(LoopbackHandler):
    fake: FakeGeminiServer
    content_type = "application/json; charset=UTF-8"

    def reject(self, body: Any) -> bool:
        if _PATH.match(self.path) is None:
            self.send_json(404, error_body(404, f"fake Gemini server: no route for POST {self.path}"))
            return True
        if self.fake.api_key is not None and self.headers.get("x-goog-api-key") != self.fake.api_key:
            message = "API key not valid. Please pass a valid API key."
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
            self.send_json(400, error_body(400, message, [info]))
            return True
        return False

    def send_step_error(self, step: Step) -> None:
        details = list(step.extra_details)
        if step.retry_delay is not None:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": step.retry_delay})
        extra = {"Retry-After": step.retry_after} if step.retry_after is not None else None
        self.send_json(step.status, error_body(step.status, step.message, details), extra)

    def send_step_ok(self, step: Step, body: Any) -> None:
        m = _PATH.match(self.path)
        self.send_json(200, ok_body(step, m.group("model") if m else "", self.fake.model_version))


class FakeGeminiServer(LoopbackServer[Step]):
    """Scripted Gemini server on 127.0.0.1 (a context manager; see the module doc).

    Args:
        responder: Answers when the script is empty (``request_json -> text``).
        api_key: If set, requests whose ``x-goog-api-key`` differs get the real API's invalid-key error.
        model_version: ``modelVersion`` of answers; default: the model named in the path.
    """

    name = "Gemini"
    handler = _GeminiHandler
    record_type = RecordedRequest  # so :attr:`requests` also tell the API version and model of each call

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        api_key: str | None = None,
        model_version: str | None = None,
    ) -> None:
        super().__init__(responder=responder, api_key=api_key)
        self.model_version = model_version

    # -- script -------------------------------------------------------------------------------------------------
    def ok(
        self,
        text: str,
        input_tokens: int = 10,
        output_tokens: int = 5,
        *,
        thoughts_tokens: int = 0,
        cached_tokens: int = 0,
        model_version: str | None = None,
        finish_reason: str = "STOP",
    ) -> FakeGeminiServer:
        """Queue a 200 answer holding ``text`` and these token counts (``cached_tokens`` are part of the input)."""
        return self.push(
            Step.answer(
                text,
                input_tokens,
                output_tokens,
                thoughts_tokens=thoughts_tokens,
                cached_tokens=cached_tokens,
                model_version=model_version,
                finish_reason=finish_reason,
            )
        )

    def blocked(self, reason: str = "SAFETY", input_tokens: int = 10) -> FakeGeminiServer:
        """Queue a 200 answer that refuses the prompt: ``promptFeedback.blockReason`` and no candidates."""
        return self.push(Step.answer(None, input_tokens, 0, block_reason=reason))

    def raw(
        self, body: str | dict[str, Any], content_type: str = "text/html", status: int = 200
    ) -> FakeGeminiServer:
        """Queue an answer of any body and content type (a proxy's HTML page, JSON without ``candidates``)."""
        return self.push(Step.raw(body, content_type, status))

    def error(
        self,
        status: int,
        retry_after: float | str | None = None,
        *,
        message: str = "",
        retry_delay: str | None = None,
        details: tuple[dict[str, Any], ...] = (),
    ) -> FakeGeminiServer:
        """Queue an error; ``retry_after`` is the header, ``retry_delay`` (e.g. ``"3s"``) a RetryInfo detail."""
        return self.push(
            Step.failure(
                status,
                retry_after,
                message=message or f"fake {_STATUS.get(status, 'error')} for a test",
                retry_delay=retry_delay,
                extra_details=tuple(details),
            )
        )

    def hang(self, seconds: float) -> FakeGeminiServer:
        """Queue a request that gets no answer for ``seconds`` (then the connection is closed)."""
        return self.push(Step.hang(seconds))

    @property
    def base_url(self) -> str:
        """Base URL to hand to the SDK (``http://127.0.0.1:PORT``), as ``GOOGLE_GEMINI_BASE_URL`` expects."""
        return self.url

    # -- answering ----------------------------------------------------------------------------------------------
    def _prompt_chars(self, body: dict[str, Any]) -> int:
        return sum(len(p.get("text", "")) for c in body.get("contents", []) for p in c.get("parts", []))

    def _reply_step(self, text: str, input_tokens: int, output_tokens: int) -> Step:
        return Step.answer(text, input_tokens, output_tokens)

    def _ran_out_step(self, message: str) -> Step:
        return Step.failure(400, message=message)


@pytest.fixture(name="fake_gemini")
def fake_gemini_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGeminiServer]:
    """Fixture ``fake_gemini``: a running server; GOOGLE_GEMINI_BASE_URL points at it, GEMINI_API_KEY is the fake key.

    Use it with ``from fakes.gemini_server import fake_gemini_fixture  # noqa: F401`` in a test module.
    """
    clear_env(
        monkeypatch,
        (
            "GOOGLE_API_KEY",
            "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_GENAI_USE_ENTERPRISE",
            "GOOGLE_GENAI_API_VERSION",
            "GOOGLE_GENAI_HTTP_CLIENT",
        ),
    )
    for var in ("NO_PROXY", "no_proxy"):  # the SDK's HTTP client honours proxy variables (trust_env)
        current = [p for p in os.environ.get(var, "").split(",") if p]
        monkeypatch.setenv(var, ",".join(current + ["127.0.0.1", "localhost"]))
    monkeypatch.setenv("GEMINI_API_KEY", FAKE_GEMINI_KEY)
    with FakeGeminiServer() as server:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
        yield server
