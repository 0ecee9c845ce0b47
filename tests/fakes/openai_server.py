"""A scripted loopback server that speaks OpenAI's Chat Completions API (``POST /v1/chat/completions``).

Only 127.0.0.1 is used. Each request takes the next scripted step (:func:`ok`, :func:`error`, :func:`hang`);
when the queue is empty the server answers with ``responder(request_json) -> text`` if one is set, else with a
400 ``invalid_request_error`` that says the script ran out. Every request is recorded (method, path, headers,
JSON body). The same server stands in for Ollama, vLLM and other OpenAI-compatible servers, which share this
wire format.

Wire format, as the ``openai`` SDK parses it (``openai/types/chat/chat_completion.py``,
``openai/types/completion_usage.py``, ``_make_status_error`` in ``openai/_client.py`` and
``openai/_exceptions.py``):

* success: ``{"id", "object": "chat.completion", "created", "model", "choices": [{"index", "message": {"role":
  "assistant", "content", "refusal", "annotations"}, "logprobs", "finish_reason"}], "usage": {"prompt_tokens",
  "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"}, "service_tier",
  "system_fingerprint"}`` with an ``x-request-id`` header;
* error: ``{"error": {"message", "type", "param", "code"}}`` with ``x-request-id``, plus ``retry-after`` (and
  ``retry-after-ms``) when scripted.

A wrong bearer token gets OpenAI's 401 ``invalid_api_key``. Unlike OpenAI, which masks the middle of the key,
the fake echoes the whole token in the message, so a test can prove that the client redacts it.

Use :class:`FakeOpenAIServer` as a context manager, or the fixtures: ``fake_openai`` points
``OPENAI_BASE_URL`` at the server and sets a fake ``OPENAI_API_KEY`` (:data:`FAKE_KEY`); ``fake_ollama``
points ``OLLAMA_BASE_URL`` at it with no key set anywhere (the server then checks no key, as Ollama does not).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

import pytest

__all__ = [
    "FAKE_KEY",
    "FakeOpenAIServer",
    "Recorded",
    "Step",
    "error",
    "fake_ollama",
    "fake_openai",
    "hang",
    "ok",
]

FAKE_KEY = "sk-proj-fake-0123456789abcdef"
CHAT_PATH = "/v1/chat/completions"

#: HTTP status -> (OpenAI ``error.type``, ``error.code``).
ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout", None),
    409: ("invalid_request_error", "conflict"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", "overloaded"),
}

#: Messages the real API sends for these statuses.
ERROR_MESSAGES: dict[int, str] = {
    429: "Rate limit reached for requests. Please try again in 20ms.",
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The engine is currently overloaded, please try again later.",
}


@dataclass(frozen=True)
class Step:
    """One scripted answer."""

    kind: Literal["ok", "error", "hang"]
    text: str | None = ""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    finish_reason: str = "stop"
    refusal: str | None = None
    status: int = 200
    retry_after: str | None = None
    retry_after_ms: str | None = None
    error_type: str | None = None
    code: str | None = None
    message: str = ""
    seconds: float = 0.0


def ok(
    text: str | None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    model: str | None = None,
    finish_reason: str = "stop",
    refusal: str | None = None,
) -> Step:
    """A 200 answer whose single choice says ``text``; ``model`` defaults to the requested model."""
    return Step(
        "ok",
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=model,
        finish_reason=finish_reason,
        refusal=refusal,
    )


def error(
    status: int,
    retry_after: float | str | None = None,
    *,
    retry_after_ms: float | str | None = None,
    error_type: str | None = None,
    code: str | None = None,
    message: str = "",
) -> Step:
    """An error answer in OpenAI's format; ``retry_after`` (seconds) becomes the ``retry-after`` header."""
    default_type, default_code = ERROR_KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return Step(
        "error",
        status=status,
        retry_after=None if retry_after is None else str(retry_after),
        retry_after_ms=None if retry_after_ms is None else str(retry_after_ms),
        error_type=error_type or default_type,
        code=code if code is not None else default_code,
        message=message or ERROR_MESSAGES.get(status, f"scripted {status}"),
    )


def hang(seconds: float) -> Step:
    """Say nothing for ``seconds`` (longer than the client's timeout), then drop the connection."""
    return Step("hang", seconds=seconds)


@dataclass
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeOpenAIServer:
    """The scripted server.

    ``api_key``: when set, a request without ``Authorization: Bearer <api_key>`` gets a 401.
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

    # --- scripting -----------------------------------------------------------------------------------------
    def push(self, *steps: Step) -> FakeOpenAIServer:
        """Append steps to the script."""
        with self._lock:
            self.queue.extend(steps)
        return self

    @property
    def url(self) -> str:
        """Root URL of the server (``http://127.0.0.1:PORT``)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """Base URL to hand to the SDK (``http://127.0.0.1:PORT/v1``), as ``OPENAI_BASE_URL`` expects."""
        return self.url + "/v1"

    @property
    def bodies(self) -> list[Any]:
        """JSON bodies of the recorded requests."""
        with self._lock:
            return [r.body for r in self.requests]

    # --- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
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

    # --- answering -----------------------------------------------------------------------------------------
    def _next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            text = self.responder(body)
            return ok(text, max(1, len(json.dumps(body.get("messages", ""))) // 4), max(1, len(text) // 4))
        return error(400, message="fake openai server: no scripted step left and no responder")

    def _request_id(self) -> str:
        return f"req_fake{next(self._ids):06d}"


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid the 40 ms delayed-ACK stall

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
        if self.path.split("?")[0] != CHAT_PATH:
            self._send_error(
                error(404, code="unknown_url", message=f"Unknown request URL: POST {self.path}."), request_id
            )
            return
        auth = self.headers.get("authorization") or ""
        token = auth.removeprefix("Bearer ")
        if fake.api_key is not None and token != fake.api_key:
            msg = (
                f"Incorrect API key provided: {token}. "
                "You can find your API key at https://platform.openai.com/account/api-keys."
            )
            self._send_error(error(401, message=msg), request_id)
            return
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            self._send_error(
                error(400, message="you must provide a model parameter and messages"), request_id
            )
            return
        step = fake._next_step(body)
        if step.kind == "hang":
            fake._closing.wait(step.seconds)
            self.close_connection = True
            return
        if step.kind == "error":
            self._send_error(step, request_id)
            return
        usage = {
            "prompt_tokens": step.input_tokens,
            "completion_tokens": step.output_tokens,
            "total_tokens": step.input_tokens + step.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake{request_id[8:]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": step.model or body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": step.text,
                        "refusal": step.refusal,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": step.finish_reason,
                }
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
        self._send_json(200, completion, {"x-request-id": request_id, "openai-processing-ms": "1"})

    def do_GET(self) -> None:
        self._send_error(
            error(404, code="unknown_url", message=f"Unknown request URL: GET {self.path}."),
            self.fake._request_id(),
        )

    def _send_error(self, step: Step, request_id: str) -> None:
        payload = {
            "error": {"message": step.message, "type": step.error_type, "param": None, "code": step.code}
        }
        headers = {"x-request-id": request_id}
        if step.retry_after is not None:
            headers["retry-after"] = step.retry_after
        if step.retry_after_ms is not None:
            headers["retry-after-ms"] = step.retry_after_ms
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


_CLEARED = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ADMIN_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_CUSTOM_HEADERS",
    "OLLAMA_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
)


def _clear_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A started server; ``OPENAI_BASE_URL`` points at it and ``OPENAI_API_KEY`` is :data:`FAKE_KEY`."""
    _clear_env(monkeypatch)
    with FakeOpenAIServer(api_key=FAKE_KEY) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield server


@pytest.fixture
def fake_ollama(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A started server standing in for Ollama: ``OLLAMA_BASE_URL`` points at it; no key is set or checked."""
    _clear_env(monkeypatch)
    with FakeOpenAIServer(api_key=None) as server:
        monkeypatch.setenv("OLLAMA_BASE_URL", server.base_url)
        yield server
