"""The Gemini backend through the real google-genai client, against the loopback server in fakes/gemini_server.py."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import pytest
from fakes.gemini_server import FAKE_GEMINI_KEY, FakeGeminiServer, fake_gemini_fixture  # noqa: F401
from google.genai import errors as genai_errors

from llm_policy_gen.backends import BackendOptions, make_backend
from llm_policy_gen.backends.base import Message, OutputFormat, RetryPolicy, Sampling
from llm_policy_gen.backends.gemini_backend import GeminiBackend, gemini_json_schema
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError
from llm_policy_gen.schema import TableProposal

MODEL = "gemini-3.8-flash"
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=30.0, jitter=0.0, timeout_s=2.0)
SCHEMA = TableProposal.model_json_schema()
TABLE = OutputFormat("table", SCHEMA)
ANSWER = '{"rationale": "push right when the pole leans right", "rows": [{"state": 0, "action": 1}]}'
MESSAGES = [Message("system", "You write tabular policies."), Message("user", "Propose a table.")]


def backend(
    retry: RetryPolicy = FAST, sampling: Sampling | None = None, **kw: object
) -> tuple[GeminiBackend, list[float]]:
    """A backend whose retry sleeps are recorded instead of slept."""
    sleeps: list[float] = []
    opts = BackendOptions(retry=retry, sampling=sampling or Sampling(), **kw)  # type: ignore[arg-type]
    return GeminiBackend(MODEL, opts, sleep=sleeps.append), sleeps


def test_structured_answer_text_and_usage(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok(
        ANSWER, input_tokens=120, output_tokens=30, thoughts_tokens=7, model_version="gemini-3.8-flash-001"
    )
    b = make_backend(f"gemini:{MODEL}", BackendOptions(retry=FAST))
    done = b.complete(MESSAGES, TABLE)
    assert done.text == ANSWER
    assert (done.input_tokens, done.output_tokens) == (120, 37)  # thinking tokens count as output
    assert done.model == "gemini-3.8-flash-001"
    assert done.transport_attempts == 1
    assert 0 < done.latency_s < 2
    assert done.extra["finish_reason"] == "STOP" and done.extra["thoughts_tokens"] == 7
    assert (b.name, b.model, b.is_llm) == ("gemini", MODEL, True)


def test_request_carries_schema_system_roles_and_key(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok(ANSWER)
    b, _ = backend(sampling=Sampling(temperature=0.3, max_output_tokens=2048))
    chat = [*MESSAGES, Message("assistant", "{}"), Message("user", "rows is empty; try again")]
    b.complete(chat, TABLE)
    (req,) = fake_gemini.requests
    assert req.path.endswith(f"/models/{MODEL}:generateContent") and req.model == MODEL
    assert req.headers["x-goog-api-key"] == FAKE_GEMINI_KEY
    body = req.body
    gen = body["generationConfig"]
    assert gen["responseMimeType"] == "application/json"
    # $defs/$ref, additionalProperties and required are sent as they are
    assert gen["responseJsonSchema"] == SCHEMA
    assert "responseSchema" not in gen
    assert (gen["temperature"], gen["maxOutputTokens"]) == (0.3, 2048)
    assert body["systemInstruction"]["parts"] == [{"text": "You write tabular policies."}]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"] == [{"text": "{}"}]


def test_plain_text_and_default_temperature(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok("Action: 1")
    b, _ = backend()
    assert b.complete([Message("user", "Which action?")], OutputFormat("direct")).text == "Action: 1"
    body = fake_gemini.requests[0].body
    gen = body["generationConfig"]
    assert "responseJsonSchema" not in gen and "responseMimeType" not in gen
    assert "temperature" not in gen and gen["maxOutputTokens"] == Sampling().max_output_tokens
    assert "systemInstruction" not in body
    assert set(body) == {"contents", "generationConfig"} and set(gen) == {"maxOutputTokens"}


def test_429_retry_after_header_then_success(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(429, retry_after=7).ok(ANSWER)
    b, sleeps = backend()
    done = b.complete(MESSAGES, TABLE)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert sleeps == [7.0]  # the server's Retry-After, not the 0.01 s backoff
    assert len(fake_gemini.requests) == 2  # the SDK's own retries are off


def test_429_retry_info_detail_is_used_without_header(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(429, retry_delay="3s").ok(ANSWER)
    b, sleeps = backend()
    assert b.complete(MESSAGES, TABLE).transport_attempts == 2
    assert sleeps == [3.0]


def test_500_until_retries_are_spent(fake_gemini: FakeGeminiServer) -> None:
    for _ in range(3):
        fake_gemini.error(500)
    b, sleeps = backend()
    with pytest.raises(BackendError, match="after 3 attempts") as info:
        b.complete(MESSAGES, TABLE)
    assert "500" in str(info.value) and not isinstance(info.value, BackendAuthError)
    assert len(fake_gemini.requests) == 3 and len(sleeps) == 2
    assert sleeps == pytest.approx([0.01, 0.02])


def test_timeout_is_retried_then_fails(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.hang(2.0).hang(2.0)
    b, sleeps = backend(RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3))
    started = time.perf_counter()
    with pytest.raises(BackendError, match="after 2 attempts.*Timeout"):
        b.complete(MESSAGES, TABLE)
    assert 0.5 < time.perf_counter() - started < 1.8  # two 0.3 s timeouts, not the 2 s hangs
    assert len(fake_gemini.requests) == 2 and len(sleeps) == 1


def test_timeout_then_success(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.hang(2.0).ok(ANSWER)
    b, _ = backend(RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3))
    done = b.complete(MESSAGES, TABLE)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert done.latency_s >= 0.3  # wall time of the whole call, retries included


def test_401_is_an_auth_error_naming_the_variable_without_the_key(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(401, message=f"key {FAKE_GEMINI_KEY} is not allowed")  # a server echoing the key
    b, sleeps = backend()
    with pytest.raises(BackendAuthError) as info:
        b.complete(MESSAGES, TABLE)
    msg = str(info.value)
    assert "GEMINI_API_KEY" in msg and FAKE_GEMINI_KEY not in msg and "[REDACTED]" in msg
    assert len(fake_gemini.requests) == 1 and sleeps == []


def test_invalid_key_400_is_an_auth_error(
    fake_gemini: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real API answers a wrong key with 400 INVALID_ARGUMENT + ErrorInfo API_KEY_INVALID, not 401.
    fake_gemini.api_key = "the-real-key"
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", FAKE_GEMINI_KEY)
    b, _ = backend()
    with pytest.raises(BackendAuthError, match="set GOOGLE_API_KEY to a valid key") as info:
        b.complete(MESSAGES, TABLE)
    assert FAKE_GEMINI_KEY not in str(info.value)
    assert len(fake_gemini.requests) == 1


def test_other_4xx_is_fatal_without_retry(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(400, message="Invalid JSON payload received.")
    b, sleeps = backend()
    with pytest.raises(BackendError, match="Invalid JSON payload") as info:
        b.complete(MESSAGES, TABLE)
    assert "attempts" not in str(info.value) and not isinstance(info.value, BackendAuthError)
    assert len(fake_gemini.requests) == 1 and sleeps == []


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(BackendConfigError, match="set GEMINI_API_KEY or GOOGLE_API_KEY"):
        make_backend("gemini", BackendOptions())


def test_base_url_from_sdk_variable_and_option_override(
    fake_gemini: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gemini.ok(ANSWER).ok(ANSWER)
    b, _ = backend()  # GOOGLE_GEMINI_BASE_URL was set by the fixture
    assert b.describe()["base_url"] == fake_gemini.base_url
    b.complete(MESSAGES, TABLE)
    assert len(fake_gemini.requests) == 1
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    b2, _ = backend(base_url=fake_gemini.base_url)
    assert b2.complete(MESSAGES, TABLE).text == ANSWER
    assert len(fake_gemini.requests) == 2


def test_connection_refused_is_retried(fake_gemini: FakeGeminiServer) -> None:
    b, sleeps = backend(base_url="http://127.0.0.1:9")
    with pytest.raises(BackendError, match="after 3 attempts.*ConnectError"):
        b.complete(MESSAGES, TABLE)
    assert len(sleeps) == 2


def test_responder_answers_when_the_script_is_empty(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.responder = lambda body: f"turn {len(body['contents'])}"
    b, _ = backend()
    assert b.complete(MESSAGES, TABLE).text == "turn 1"
    assert b.complete([*MESSAGES, Message("assistant", "x"), Message("user", "y")], TABLE).text == "turn 3"


def test_describe_has_no_key(fake_gemini: FakeGeminiServer) -> None:
    b, _ = backend()
    d = b.describe()
    assert d["provider"] == "gemini" and d["model"] == MODEL and d["is_llm"] is True
    assert d["retry"] == FAST.to_dict() and d["key_source"] == "GEMINI_API_KEY"
    assert d["base_url"] == fake_gemini.base_url and d["sampling"]["max_output_tokens"] == 16384
    assert FAKE_GEMINI_KEY not in json.dumps(d)


def _api_error(code: int, status: str, details: list | None = None) -> genai_errors.APIError:
    body = {"error": {"code": code, "message": "m", "status": status, "details": details or []}}
    cls = genai_errors.ClientError if code < 500 else genai_errors.ServerError
    return cls(code, body)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (_api_error(400, "INVALID_ARGUMENT"), "fatal"),
        (_api_error(404, "NOT_FOUND"), "fatal"),
        (_api_error(401, "UNAUTHENTICATED"), "auth"),
        (_api_error(403, "PERMISSION_DENIED"), "auth"),
        (_api_error(400, "INVALID_ARGUMENT", [{"reason": "API_KEY_INVALID"}]), "auth"),
        (_api_error(408, "DEADLINE_EXCEEDED"), "retry"),
        (_api_error(409, "ABORTED"), "retry"),
        (_api_error(429, "RESOURCE_EXHAUSTED"), "retry"),
        (_api_error(500, "INTERNAL"), "retry"),
        (_api_error(503, "UNAVAILABLE"), "retry"),
        (httpx2.ReadTimeout("timed out"), "retry"),
        (httpx2.ConnectError("refused"), "retry"),
        (ValueError("bug"), "fatal"),
    ],
)
def test_classify(exc: BaseException, kind: str) -> None:
    assert GeminiBackend.classify(exc)[0] == kind


def test_schema_drops_siblings_of_ref_only() -> None:
    schema: dict[str, Any] = {
        "$defs": {"Row": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        "properties": {"row": {"$ref": "#/$defs/Row", "description": "d"}, "n": {"type": "integer"}},
        "type": "object",
    }
    out = gemini_json_schema(schema, "table")
    assert out["properties"]["row"] == {"$ref": "#/$defs/Row"}
    assert out["properties"]["n"] == {"type": "integer"} and out["title"] == "table"
    assert schema["properties"]["row"]["description"] == "d"  # the input is not changed
    assert gemini_json_schema(SCHEMA, "table") == SCHEMA  # TableProposal needs no change
