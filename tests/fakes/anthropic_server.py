"""A scripted loopback server that speaks Anthropic's Messages API (``POST /v1/messages``).

Only 127.0.0.1 is used. Each request takes the next scripted step (:func:`ok`, :func:`error`, :func:`hang`); when
the queue is empty the server answers with ``responder(request_json) -> text`` if one is set, else with a 400
``invalid_request_error`` that says the script ran out. Every request is recorded (path, headers, JSON body).

Wire format, as the ``anthropic`` SDK parses it (``anthropic/types/message.py``, ``usage.py``, ``_exceptions.py``):

* success: ``{"id", "type": "message", "role": "assistant", "model", "content": [{"type": "text", "text"}],
  "stop_reason", "stop_sequence", "usage": {"input_tokens", "output_tokens", "cache_creation_input_tokens",
  "cache_read_input_tokens"}}`` with a ``request-id`` header;
* error: ``{"type": "error", "error": {"type", "message"}, "request_id"}``, plus ``retry-after`` when scripted.

Use :class:`FakeAnthropicServer` as a context manager, or the ``fake_anthropic`` pytest fixture, which also points
``ANTHROPIC_BASE_URL`` at the server and sets a fake ``ANTHROPIC_API_KEY`` (:data:`FAKE_KEY`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

import pytest

__all__ = [
    "FAKE_KEY",
    "FakeAnthropicServer",
    "Recorded",
    "Step",
    "error",
    "fake_anthropic",
    "hang",
    "ok",
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
class Step:
    """One scripted answer."""

    kind: Literal["ok", "error", "hang"]
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    model: str | None = None
    stop_reason: str = "end_turn"
    status: int = 200
    retry_after: str | None = None
    error_type: str | None = None
    message: str = ""
    seconds: float = 0.0


def ok(
    text: str,
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    model: str | None = None,
    stop_reason: str = "end_turn",
) -> Step:
    """A 200 answer whose single text block is ``text``; ``model`` defaults to the requested model."""
    return Step(
        "ok",
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_creation_input_tokens=cache_creation_input_tokens,
        cache_read_input_tokens=cache_read_input_tokens,
        model=model,
        stop_reason=stop_reason,
    )


def error(
    status: int,
    retry_after: float | str | None = None,
    *,
    error_type: str | None = None,
    message: str = "",
) -> Step:
    """An error answer in Anthropic's format; ``retry_after`` becomes the ``retry-after`` header."""
    return Step(
        "error",
        status=status,
        retry_after=None if retry_after is None else str(retry_after),
        error_type=error_type
        or ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error"),
        message=message or f"scripted {status}",
    )


def hang(seconds: float) -> Step:
    """Say nothing for ``seconds`` (longer than the client's timeout), then drop the connection."""
    return Step("hang", seconds=seconds)


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeAnthropicServer:
    """The scripted server.

    ``api_key``: when set, a request presenting another key gets a 401. The key is read from ``x-api-key`` or
    ``Authorization: Bearer`` (the SDK 2.x sends an ``api_key`` as a bearer token, ``anthropic/_client.py``).
    """

    steps: list[Step] = field(default_factory=list)
    responder: Callable[[dict[str, Any]], str] | None = None
    api_key: str | None = None

    def __post_init__(self) -> None:
        self.queue: deque[Step] = deque(self.steps)
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting -------------------------------------------------------------------------------------------------
    def push(self, *steps: Step) -> Self:
        """Append steps to the script."""
        with self._lock:
            self.queue.extend(steps)
        return self

    @property
    def url(self) -> str:
        """Base URL to hand to the SDK (``http://127.0.0.1:PORT``)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def bodies(self) -> list[Any]:
        """JSON bodies of the recorded requests."""
        return [r.body for r in self.requests]

    # --- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-anthropic",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- answering -------------------------------------------------------------------------------------------------
    def _next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            text = self.responder(body)
            return ok(text, max(1, len(json.dumps(body.get("messages", ""))) // 4), max(1, len(text) // 4))
        return error(400, message="fake anthropic server: no scripted step left and no responder")

    def _request_id(self) -> str:
        return f"req_fake{next(self._ids):06d}"


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropicServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        return

    def do_POST(self) -> None:  # http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        fake = self.fake
        with fake._lock:
            fake.requests.append(
                Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
        request_id = fake._request_id()
        if self.path.split("?")[0] != MESSAGES_PATH:
            self._send_error(error(404, message=f"Not found: {self.path}"), request_id)
            return
        key = self.headers.get("x-api-key")
        if key is None and self.headers.get("authorization", "").startswith("Bearer "):
            key = self.headers["authorization"][len("Bearer ") :]
        if fake.api_key is not None and key != fake.api_key:
            self._send_error(error(401, message="invalid x-api-key"), request_id)
            return
        step = fake._next_step(body if isinstance(body, dict) else {})
        if step.kind == "hang":
            fake._closing.wait(step.seconds)
            self.close_connection = True
            return
        if step.kind == "error":
            self._send_error(step, request_id)
            return
        usage = {
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "cache_creation_input_tokens": step.cache_creation_input_tokens,
            "cache_read_input_tokens": step.cache_read_input_tokens,
            "service_tier": "standard",
        }
        model = step.model or (body.get("model") if isinstance(body, dict) else None) or "claude-fake"
        message = {
            "id": f"msg_fake{request_id[8:]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": step.text}],
            "stop_reason": step.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        self._send_json(200, message, {"request-id": request_id})

    def do_GET(self) -> None:
        self._send_error(error(404, message=f"Not found: {self.path}"), self.fake._request_id())

    def _send_error(self, step: Step, request_id: str) -> None:
        payload = {
            "type": "error",
            "error": {"type": step.error_type, "message": step.message},
            "request_id": request_id,
        }
        headers = {"request-id": request_id}
        if step.retry_after is not None:
            headers["retry-after"] = step.retry_after
        self._send_json(step.status, payload, headers)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True


@pytest.fixture
def fake_anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    """A started server; ``ANTHROPIC_BASE_URL`` points at it and ``ANTHROPIC_API_KEY`` is :data:`FAKE_KEY`."""
    for name in (
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_CUSTOM_HEADERS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with FakeAnthropicServer(api_key=FAKE_KEY) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        yield server
