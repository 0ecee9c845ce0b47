"""A loopback server that speaks the Gemini Developer API's ``generateContent`` wire protocol.

``POST /{version}/models/{model}:generateContent`` with the key in ``x-goog-api-key``; answers are
``GenerateContentResponse`` JSON (``candidates``, ``usageMetadata``, ``modelVersion``), errors are Google's
``{"error": {"code", "message", "status", "details"}}`` with an optional ``Retry-After`` header and/or a
``google.rpc.RetryInfo`` detail (what the real API sends with a 429). A wrong key gets the real API's answer:
HTTP 400 ``INVALID_ARGUMENT`` with ErrorInfo reason ``API_KEY_INVALID``.

The server is scripted: :meth:`FakeGeminiServer.ok`, :meth:`~FakeGeminiServer.error` and
:meth:`~FakeGeminiServer.hang` queue one step each; once the queue is empty a ``responder(request_json) -> text``
answers (so a multi-iteration run can talk to it), and without one the server answers 400 ``FAILED_PRECONDITION``.
Every request is recorded (:attr:`FakeGeminiServer.requests`). Only 127.0.0.1 is used.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest

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

Responder = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def api_version(self) -> str:
        m = _PATH.match(self.path)
        return m.group("version") if m else ""

    @property
    def model(self) -> str:
        m = _PATH.match(self.path)
        return m.group("model") if m else ""


@dataclass(frozen=True)
class Step:
    """One scripted answer: ``kind`` is ``"ok"``, ``"error"`` or ``"hang"``."""

    kind: str
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    thoughts_tokens: int = 0
    model_version: str | None = None
    finish_reason: str = "STOP"
    status: int = 200
    message: str = ""
    retry_after: str | None = None
    retry_delay: str | None = None
    seconds: float = 0.0
    extra_details: tuple[dict[str, Any], ...] = field(default_factory=tuple)


class FakeGeminiServer:
    """Scripted Gemini server on 127.0.0.1 (a context manager; see the module doc).

    Args:
        responder: Answers when the script is empty (``request_json -> text``).
        api_key: If set, requests whose ``x-goog-api-key`` differs get the real API's invalid-key error.
        model_version: ``modelVersion`` of answers; default: the model named in the path.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        api_key: str | None = None,
        model_version: str | None = None,
    ) -> None:
        self.responder = responder
        self.api_key = api_key
        self.model_version = model_version
        self.requests: list[RecordedRequest] = []
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script -------------------------------------------------------------------------------------------------
    def ok(
        self,
        text: str,
        input_tokens: int = 10,
        output_tokens: int = 5,
        *,
        thoughts_tokens: int = 0,
        model_version: str | None = None,
        finish_reason: str = "STOP",
    ) -> FakeGeminiServer:
        """Queue a 200 answer holding ``text`` and these token counts."""
        return self._push(
            Step(
                "ok",
                text=text,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                thoughts_tokens=thoughts_tokens,
                model_version=model_version,
                finish_reason=finish_reason,
            )
        )

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
        return self._push(
            Step(
                "error",
                status=status,
                message=message or f"fake {_STATUS.get(status, 'error')} for a test",
                retry_after=None if retry_after is None else str(retry_after),
                retry_delay=retry_delay,
                extra_details=tuple(details),
            )
        )

    def hang(self, seconds: float) -> FakeGeminiServer:
        """Queue a request that gets no answer for ``seconds`` (then the connection is closed)."""
        return self._push(Step("hang", seconds=seconds))

    def _push(self, step: Step) -> FakeGeminiServer:
        with self._lock:
            self._steps.append(step)
        return self

    @property
    def pending(self) -> int:
        """Scripted steps not used yet."""
        with self._lock:
            return len(self._steps)

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake Gemini server is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> Self:
        handler = type("_Handler", (_GeminiHandler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-gemini", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- answering ----------------------------------------------------------------------------------------------
    def _next_step(self, body: Any) -> Step:
        with self._lock:
            if self._steps:
                return self._steps.popleft()
        if self.responder is not None:
            text = self.responder(body if isinstance(body, dict) else {})
            prompt_chars = sum(
                len(p.get("text", "")) for c in body.get("contents", []) for p in c.get("parts", [])
            )
            return Step(
                "ok", text=text, input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4)
            )
        return Step("error", status=400, message="fake Gemini server: no scripted step left and no responder")


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


class _GeminiHandler(BaseHTTPRequestHandler):
    fake: FakeGeminiServer  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        return

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = raw.decode(errors="replace")
        fake = self.fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        with fake._lock:
            fake.requests.append(RecordedRequest("POST", self.path, headers, body))
        m = _PATH.match(self.path)
        if m is None:
            self._send_json(404, error_body(404, f"fake Gemini server: no route for POST {self.path}"))
            return
        if fake.api_key is not None and headers.get("x-goog-api-key") != fake.api_key:
            message = "API key not valid. Please pass a valid API key."
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
            self._send_json(400, error_body(400, message, [info]))
            return
        step = fake._next_step(body)
        if step.kind == "hang":
            fake._stopping.wait(step.seconds)
            self.close_connection = True
            return
        if step.kind == "error":
            details = list(step.extra_details)
            if step.retry_delay is not None:
                details.append(
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": step.retry_delay}
                )
            extra = {"Retry-After": step.retry_after} if step.retry_after is not None else None
            self._send_json(step.status, error_body(step.status, step.message, details), extra)
            return
        self._send_json(200, ok_body(step, m.group("model"), fake.model_version))


@pytest.fixture(name="fake_gemini")
def fake_gemini_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGeminiServer]:
    """Fixture ``fake_gemini``: a running server; GOOGLE_GEMINI_BASE_URL points at it, GEMINI_API_KEY is the fake key.

    Use it with ``from fakes.gemini_server import fake_gemini_fixture  # noqa: F401`` in a test module.
    """
    for var in (
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
        "GOOGLE_GENAI_API_VERSION",
        "GOOGLE_GENAI_HTTP_CLIENT",
    ):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy"):  # the SDK's HTTP client honours proxy variables (trust_env)
        current = [p for p in os.environ.get(var, "").split(",") if p]
        monkeypatch.setenv(var, ",".join(current + ["127.0.0.1", "localhost"]))
    monkeypatch.setenv("GEMINI_API_KEY", FAKE_GEMINI_KEY)
    with FakeGeminiServer() as server:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
        yield server
