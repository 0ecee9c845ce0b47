"""A scripted loopback server that speaks OpenAI's Chat Completions API (``POST /v1/chat/completions``).

A :class:`fakes.loopback.LoopbackServer` on 127.0.0.1. Each request takes the next scripted step (:func:`ok`,
:func:`error`, :func:`hang`); when the queue is empty the server answers with ``responder(request_json) -> text`` if
one is set, else with a 400 ``invalid_request_error`` that says the script ran out. Every request is recorded
(method, path, headers, JSON body). The same server stands in for Ollama, vLLM and other OpenAI-compatible servers,
which share this wire format.

Wire format, as the ``openai`` SDK parses it (``openai/types/chat/chat_completion.py``,
``openai/types/completion_usage.py``, ``_make_status_error`` in ``openai/_client.py`` and
``openai/_exceptions.py``):

* success: ``{"id", "object": "chat.completion", "created", "model", "choices": [{"index", "message": {"role":
  "assistant", "content", "refusal", "annotations"}, "logprobs", "finish_reason"}], "usage": {"prompt_tokens",
  "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"}, "service_tier",
  "system_fingerprint"}`` with an ``x-request-id`` header;
* error: ``{"error": {"message", "type", "param", "code"}}`` with ``x-request-id``, plus ``retry-after`` (and
  ``retry-after-ms``) when scripted;
* ``GET /v1/models``: ``{"object": "list", "data": [...]}`` (what Ollama and OpenAI list);
* :func:`raw`: any body and content type (a proxy's HTML page, JSON without ``choices``).

Two behaviours of real servers:

* :func:`behave_like_llama_cpp` makes the server answer as ``llama_cpp.server`` (llama-cpp-python) does: a request
  with ``response_format={"type": "json_schema", ...}`` gets HTTP 500 with the validation error its request model
  raises (naming ``response_format``), ``{"type": "json_object", "schema": ...}`` is accepted, and the server counts
  how many requests it holds at once (:attr:`FakeOpenAIServer.max_in_flight`; llama_cpp.server serves one at a
  time).
* :func:`trickle`: the headers at once, then the body one byte every 0.2 s (a server no per-read timeout catches); it
  stops by itself after the given seconds, or when the server closes.

A wrong bearer token gets OpenAI's 401 ``invalid_api_key``. Unlike OpenAI, which masks the middle of the key,
the fake echoes the whole token in the message, so a test can prove that the client redacts it.

Use :class:`FakeOpenAIServer` as a context manager, or the fixtures: ``fake_openai`` points
``OPENAI_BASE_URL`` at the server and sets a fake ``OPENAI_API_KEY`` (:data:`FAKE_KEY`); ``fake_ollama``
points ``OLLAMA_BASE_URL`` at it with no key set anywhere (the server then checks no key, as Ollama does not).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from .loopback import PROXY_VARIABLES, LoopbackHandler, LoopbackServer, Recorded, ScriptStep, clear_env

__all__ = [
    "FAKE_KEY",
    "FakeOpenAIServer",
    "LLAMA_CPP_JSON_SCHEMA_ERROR",
    "Recorded",
    "Step",
    "behave_like_llama_cpp",
    "error",
    "fake_ollama",
    "fake_openai",
    "hang",
    "ok",
    "raw",
    "trickle",
]

FAKE_KEY = "sk-proj-fake-0123456789abcdef"
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

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
class Step(ScriptStep):
    """One scripted answer, with OpenAI's own fields."""

    model: str | None = None
    finish_reason: str = "stop"
    refusal: str | None = None
    retry_after_ms: str | None = None
    error_type: str | None = None
    code: str | None = None
    param: str | None = None
    cached_tokens: int = 0
    trickle_s: float = 0.0
    """When > 0: the headers at once, then the body one byte every :data:`TRICKLE_GAP_S` for at most this long (then
    hang up)."""


def ok(
    text: str | None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    model: str | None = None,
    finish_reason: str = "stop",
    refusal: str | None = None,
    cached_tokens: int = 0,
) -> Step:
    """A 200 answer whose single choice says ``text``; ``model`` defaults to the requested model.

    ``cached_tokens`` is ``usage.prompt_tokens_details.cached_tokens`` (part of ``input_tokens``).
    """
    return Step.answer(
        text,
        input_tokens,
        output_tokens,
        model=model,
        finish_reason=finish_reason,
        refusal=refusal,
        cached_tokens=cached_tokens,
    )


def error(
    status: int,
    retry_after: float | str | None = None,
    *,
    retry_after_ms: float | str | None = None,
    error_type: str | None = None,
    code: str | None = None,
    param: str | None = None,
    message: str = "",
) -> Step:
    """An error answer in OpenAI's format; ``retry_after`` (seconds) becomes the ``retry-after`` header."""
    default_type, default_code = ERROR_KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return Step.failure(
        status,
        retry_after,
        retry_after_ms=None if retry_after_ms is None else str(retry_after_ms),
        error_type=error_type or default_type,
        code=code if code is not None else default_code,
        param=param,
        message=message or ERROR_MESSAGES.get(status, f"scripted {status}"),
    )


#: The gap between two bytes of a trickled body: well under any read timeout a test sets (1 s and up), so that only
#: the whole-attempt deadline can end the attempt, however busy the machine.
TRICKLE_GAP_S = 0.2


def trickle(seconds: float, text: str = "{}") -> Step:
    """A 200 whose headers come at once and whose body (an answer saying ``text``) then comes one byte every
    :data:`TRICKLE_GAP_S`, for at most ``seconds`` (the body is never finished when it is longer than that); the
    connection is then dropped."""
    return Step.answer(text, 10, 5, trickle_s=seconds)


#: The body ``llama_cpp.server`` sends, with HTTP 500, to ``response_format={"type": "json_schema", ...}``: its
#: request model allows ``text`` and ``json_object`` only, and its error handler turns the validation error into a 500
#: (as llama-cpp-python 0.3.36 answered; it also appends the server's stack frame to the message).
LLAMA_CPP_JSON_SCHEMA_ERROR: dict[str, Any] = {
    "error": {
        "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
        "'json_object'\"}}\n",
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}


def behave_like_llama_cpp(server: FakeOpenAIServer) -> FakeOpenAIServer:
    """Make ``server`` refuse ``json_schema`` output as ``llama_cpp.server`` does (HTTP 500, see
    :data:`LLAMA_CPP_JSON_SCHEMA_ERROR`) and accept ``json_object`` with or without a ``schema``."""

    def gate(body: Any) -> Step | None:
        fmt = body.get("response_format") if isinstance(body, dict) else None
        if isinstance(fmt, dict) and fmt.get("type") not in ("text", "json_object"):
            return Step.raw(LLAMA_CPP_JSON_SCHEMA_ERROR, "application/json", status=500)
        return None

    server.gate = gate
    return server


#: ``hang(seconds)``: say nothing for ``seconds`` (longer than the client's timeout), then drop the connection.
hang = Step.hang
#: ``raw(body, content_type="text/html", status=200)``: any body, whatever the wire format.
raw = Step.raw


class _Handler(LoopbackHandler):
    fake: FakeOpenAIServer

    def do_POST(self) -> None:
        with self.fake.counting():
            super().do_POST()

    def reject(self, body: Any) -> bool:
        if self.path.split("?")[0] != CHAT_PATH:
            self.send_step_error(error(404, code="unknown_url", message=f"Unknown request URL: POST {self.path}."))
            return True
        token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        if self.fake.api_key is not None and token != self.fake.api_key:
            msg = (
                f"Incorrect API key provided: {token}. "
                "You can find your API key at https://platform.openai.com/account/api-keys."
            )
            self.send_step_error(error(401, message=msg))
            return True
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            self.send_step_error(error(400, message="you must provide a model parameter and messages"))
            return True
        return False

    def send_step_ok(self, step: Step, body: Any) -> None:
        echo = self.headers.get("authorization") or "" if self.fake.echo_auth else None
        text = step.text if echo is None or step.text is None else step.text.replace("{authorization}", echo)
        usage = {
            "prompt_tokens": step.input_tokens,
            "completion_tokens": step.output_tokens,
            "total_tokens": step.input_tokens + step.output_tokens,
            "prompt_tokens_details": {"cached_tokens": step.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake{self.request_id[8:]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": echo or step.model or body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "refusal": step.refusal,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": step.finish_reason,
                }
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": f"fp_fake {echo}" if echo else "fp_fake",
        }
        headers = {"x-request-id": self.request_id, "openai-processing-ms": "1"}
        if step.trickle_s > 0:
            self._trickle(json.dumps(completion).encode(), headers, step.trickle_s)
            return
        self.send_json(200, completion, headers)

    def _trickle(self, data: bytes, headers: dict[str, str], seconds: float) -> None:
        """The headers, then ``data`` one byte every :data:`TRICKLE_GAP_S` for at most ``seconds``; then the connection
        is dropped."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("content-type", self.content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.flush()
            stop = time.monotonic() + seconds
            for k in range(len(data)):
                if time.monotonic() >= stop:
                    self.fake.note_outlasted()
                    return
                if self.fake._closing.wait(TRICKLE_GAP_S):
                    return
                self.wfile.write(data[k : k + 1])
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_GET(self) -> None:
        self.request_id = self.fake.request_id()
        self.fake.record("GET", self.path, self.headers.items(), None)
        if self.path.split("?")[0] == MODELS_PATH:
            model = {"id": "llama3.1:8b", "object": "model", "created": 0, "owned_by": "library"}
            self.send_json(200, {"object": "list", "data": [model]})
            return
        self.send_step_error(error(404, code="unknown_url", message=f"Unknown request URL: GET {self.path}."))

    def send_step_error(self, step: Step) -> None:
        payload = {
            "error": {"message": step.message, "type": step.error_type, "param": step.param, "code": step.code}
        }
        headers = {"x-request-id": self.request_id}
        if step.retry_after is not None:
            headers["retry-after"] = step.retry_after
        if step.retry_after_ms is not None:
            headers["retry-after-ms"] = step.retry_after_ms
        self.send_json(step.status, payload, headers)


class FakeOpenAIServer(LoopbackServer[Step]):
    """The scripted server (see :class:`~fakes.loopback.LoopbackServer` for the arguments).

    ``api_key``: when set, a request without ``Authorization: Bearer <api_key>`` gets a 401.
    ``echo_auth``: a hostile server: every answer carries the request's ``Authorization`` header in its ``model``
    and ``system_fingerprint`` fields, and in its text where a scripted text says ``{authorization}``.
    """

    name = "openai"
    handler = _Handler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = 0
        self.max_in_flight = 0
        """The most chat requests the server held at once."""
        self._count_lock = threading.Lock()

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Counts one request in flight while the block runs."""
        with self._count_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._count_lock:
                self.in_flight -= 1
    echo_auth: bool = False

    @property
    def base_url(self) -> str:
        """Base URL to hand to the SDK (``http://127.0.0.1:PORT/v1``), as ``OPENAI_BASE_URL`` expects."""
        return self.url + "/v1"

    def _reply_step(self, text: str, input_tokens: int, output_tokens: int) -> Step:
        return ok(text, input_tokens, output_tokens)

    def _ran_out_step(self, message: str) -> Step:
        return error(400, message=message)


_CLEARED = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ADMIN_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_CUSTOM_HEADERS",
    "OLLAMA_BASE_URL",
    *PROXY_VARIABLES,
)


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A started server; ``OPENAI_BASE_URL`` points at it and ``OPENAI_API_KEY`` is :data:`FAKE_KEY`."""
    clear_env(monkeypatch, _CLEARED)
    with FakeOpenAIServer(api_key=FAKE_KEY) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield server


@pytest.fixture
def fake_ollama(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A started server standing in for Ollama: ``OLLAMA_BASE_URL`` points at it; no key is set or checked."""
    clear_env(monkeypatch, _CLEARED)
    with FakeOpenAIServer(api_key=None) as server:
        monkeypatch.setenv("OLLAMA_BASE_URL", server.base_url)
        yield server
