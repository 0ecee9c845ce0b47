"""GeminiClient through the real google-genai client, against the loopback server in fakes/gemini_server.py."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from fakes.gemini_server import FAKE_GEMINI_KEY, FakeGeminiServer, RecordedRequest, fake_gemini_fixture  # noqa: F401
from fakes.loopback import ANSWER_SCHEMA
from google.genai import errors as genai_errors

from llm_policy_gen.clients.base import ClientOptions, Message, OutputSpec, Request, Sampling
from llm_policy_gen.clients.faults import MalformedResponse, Unreachable
from llm_policy_gen.clients.gemini import GeminiClient, gemini_json_schema
from llm_policy_gen.clients.retry import RetryPolicy
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError, BackendUnreachable, UserError

MODEL = "gemini-3.8-flash"
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=30.0, jitter=0.0, timeout_s=2.0)
TABLE = OutputSpec("table", ANSWER_SCHEMA)
ANSWER = json.dumps(
    {"rationale": "push right when the pole leans right", "rows": [{"state": 0, "action": 1}], "note": {"text": ""}}
)
MESSAGES = (Message("system", "You write tabular policies."), Message("user", "Propose a table."))
ASK = Request(MESSAGES, TABLE)
#: Gemini's answer to a request whose API version has no responseJsonSchema (the exact message).
NO_JSON_SCHEMA = (
    'Invalid JSON payload received. Unknown name "responseJsonSchema" at \'generation_config\': Cannot find field.'
)


def client(
    retry: RetryPolicy = FAST, sampling: Sampling | None = None, **kw: Any
) -> tuple[GeminiClient, list[float]]:
    """A client whose retry sleeps are recorded instead of slept."""
    sleeps: list[float] = []
    opts = ClientOptions(retry=retry, sampling=sampling or Sampling(), **kw)
    return GeminiClient(MODEL, opts, sleep=sleeps.append), sleeps


# --- answers and the wire format -------------------------------------------------------------------------------------
def test_structured_answer_text_and_usage(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok(
        ANSWER,
        input_tokens=120,
        output_tokens=30,
        thoughts_tokens=7,
        cached_tokens=64,
        model_version="gemini-3.8-flash-001",
    )
    c, _ = client()
    done = c.complete(ASK)
    assert done.text == ANSWER
    assert (done.input_tokens, done.output_tokens) == (120, 37)  # thinking tokens count as output
    assert (done.cached_input_tokens, done.cache_write_tokens) == (64, 0)
    assert done.model == "gemini-3.8-flash-001"
    assert (done.finish_reason, done.truncated, done.refusal) == ("STOP", False, None)
    assert done.structured_output == "json_schema" and done.transport_attempts == 1
    assert 0 < done.latency_s < 2
    assert done.extra == {"thoughts_tokens": 7}
    assert (c.provider, c.model, c.is_llm) == ("gemini", MODEL, True)


def test_request_carries_schema_system_roles_and_key(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok(ANSWER)
    c, _ = client(sampling=Sampling(temperature=0.3, max_output_tokens=2048))
    chat = (*MESSAGES, Message("assistant", "{}"), Message("user", "rows is empty; try again"))
    c.complete(Request(chat, TABLE))
    (req,) = fake_gemini.requests
    assert isinstance(req, RecordedRequest)
    assert req.path.endswith(f"/models/{MODEL}:generateContent") and req.model == MODEL
    assert req.headers["x-goog-api-key"] == FAKE_GEMINI_KEY
    body = req.body
    gen = body["generationConfig"]
    assert gen["responseMimeType"] == "application/json"
    # $defs/$ref, additionalProperties and required are sent as they are; a $ref loses its sibling keywords
    assert gen["responseJsonSchema"] == gemini_json_schema(ANSWER_SCHEMA)
    assert gen["responseJsonSchema"]["properties"]["note"] == {"$ref": "#/$defs/Note"}
    assert "responseSchema" not in gen
    assert (gen["temperature"], gen["maxOutputTokens"]) == (0.3, 2048)
    assert body["systemInstruction"]["parts"] == [{"text": "You write tabular policies."}]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"] == [{"text": "{}"}]


def test_plain_text_and_default_temperature(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok("Action: 1")
    c, _ = client()
    done = c.complete(Request((Message("user", "Which action?"),), OutputSpec("direct")))
    assert done.text == "Action: 1" and done.structured_output == "none"
    body = fake_gemini.requests[0].body
    gen = body["generationConfig"]
    assert "responseJsonSchema" not in gen and "responseMimeType" not in gen
    assert "temperature" not in gen and gen["maxOutputTokens"] == Sampling().max_output_tokens
    assert "systemInstruction" not in body
    assert set(body) == {"contents", "generationConfig"} and set(gen) == {"maxOutputTokens"}


def test_max_tokens_is_truncated_and_blocks_are_refusals(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.ok('{"rationale": "cu', finish_reason="MAX_TOKENS").ok("", finish_reason="SAFETY")
    fake_gemini.blocked("PROHIBITED_CONTENT", input_tokens=33)
    c, _ = client()
    cut, unsafe, blocked = (c.complete(ASK) for _ in range(3))
    assert (cut.finish_reason, cut.truncated, cut.refusal) == ("MAX_TOKENS", True, None)
    assert (unsafe.finish_reason, unsafe.refusal) == ("SAFETY", "answer blocked: SAFETY")
    assert (blocked.text, blocked.finish_reason, blocked.input_tokens) == ("", None, 33)
    assert blocked.refusal == "prompt blocked: PROHIBITED_CONTENT"
    assert blocked.extra["block_reason"] == "PROHIBITED_CONTENT"


@pytest.mark.parametrize("temperature", [2.01, -0.5])
def test_temperature_outside_0_to_2_is_a_user_error(fake_gemini: FakeGeminiServer, temperature: float) -> None:
    with pytest.raises(UserError, match=rf"^temperature {temperature} is outside the range gemini accepts: 0 to 2$"):
        client(sampling=Sampling(temperature=temperature))


def test_responder_answers_when_the_script_is_empty(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.responder = lambda body: f"turn {len(body['contents'])}"
    c, _ = client()
    assert c.complete(ASK).text == "turn 1"
    assert c.complete(Request((*MESSAGES, Message("assistant", "x"), Message("user", "y")), TABLE)).text == "turn 3"


# --- retries ---------------------------------------------------------------------------------------------------------
def test_429_retry_after_header_then_success(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(429, retry_after=7).ok(ANSWER)
    c, sleeps = client()
    done = c.complete(ASK)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert sleeps == [7.0]  # the server's Retry-After, not the 0.01 s backoff
    assert len(fake_gemini.requests) == 2  # the SDK's own retries are off


def test_429_retry_info_detail_is_used_without_header(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(429, retry_delay="3s").ok(ANSWER)
    c, sleeps = client()
    assert c.complete(ASK).transport_attempts == 2
    assert sleeps == [3.0]


def test_500_until_retries_are_spent(fake_gemini: FakeGeminiServer) -> None:
    for _ in range(3):
        fake_gemini.error(500)
    c, sleeps = client()
    with pytest.raises(BackendError, match="after 3 attempts") as info:
        c.complete(ASK)
    assert "500" in str(info.value) and not isinstance(info.value, (BackendAuthError, BackendUnreachable))
    assert len(fake_gemini.requests) == 3 and sleeps == pytest.approx([0.01, 0.02])


def test_timeout_on_every_attempt_is_unreachable(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.hang(60.0).hang(60.0)
    c, sleeps = client(RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3))
    with pytest.raises(BackendUnreachable, match=r"after 2 attempts: TimedOut: no answer within 0\.3 s \(Read"):
        c.complete(ASK)
    # both attempts gave up at their 0.3 s (milliseconds to the SDK) while the server still hung: neither 60 s hang
    # ran its course, which the server counts (no clock read here, so a busy machine cannot break it)
    assert fake_gemini.outlasted == 0
    assert len(fake_gemini.requests) == 2 and len(sleeps) == 1


def test_timeout_then_success(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.hang(2.0).ok(ANSWER)
    c, _ = client(RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3))
    done = c.complete(ASK)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert done.latency_s >= 0.3  # wall time of the whole call, retries included


# --- unreachable endpoints -------------------------------------------------------------------------------------------
def test_connection_refused_is_unreachable_naming_the_url(fake_gemini: FakeGeminiServer) -> None:
    c, sleeps = client(base_url="http://127.0.0.1:9")
    c.reached = True  # its server answered before: a refused connection is retried (a fresh client's is not)
    with pytest.raises(BackendUnreachable) as info:
        c.complete(ASK)
    message = str(info.value)
    assert message.startswith(f"gemini:{MODEL} at http://127.0.0.1:9 could not be reached after 3 attempts")
    assert "ConnectError" in message and "Connection refused" in message
    assert len(sleeps) == 2


def test_unresolvable_host_is_unreachable(fake_gemini: FakeGeminiServer) -> None:
    c, _ = client(RetryPolicy(max_retries=0, timeout_s=2.0), base_url="http://gemini-proxy.invalid")
    with pytest.raises(BackendUnreachable, match=r"at http://gemini-proxy\.invalid could not be reached"):
        c.complete(ASK)


# --- a 200 that is not Gemini's JSON ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        ("<html><body>Service Unavailable (proxy)</body></html>", "text/html", "JSONDecodeError"),
        ({"usageMetadata": {"promptTokenCount": 3}}, "application/json", "'candidates' and no prompt feedback"),
        ({"candidates": []}, "application/json", "an empty 'candidates' list"),
    ],
)
def test_body_that_is_not_gemini_json_is_retried_then_fails(
    fake_gemini: FakeGeminiServer, body: Any, content_type: str, detail: str
) -> None:
    for _ in range(3):
        fake_gemini.raw(body, content_type)
    c, sleeps = client()
    with pytest.raises(BackendError) as info:
        c.complete(ASK)
    message = str(info.value)
    assert not isinstance(info.value, BackendUnreachable)
    assert "failed after 3 attempts: MalformedResponse: the body was not Gemini's JSON" in message
    assert detail in message and len(sleeps) == 2


def test_html_page_then_a_real_answer(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.raw("<html>bad gateway</html>").ok(ANSWER)
    c, _ = client()
    assert c.complete(ASK).transport_attempts == 2


# --- structured-output fallback --------------------------------------------------------------------------------------
def test_refused_json_schema_falls_back_to_json_mime_type(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(400, message=NO_JSON_SCHEMA).ok(ANSWER).ok(ANSWER)
    c, sleeps = client()
    first = c.complete(ASK)
    assert first.text == ANSWER and first.structured_output == "json_mode"
    assert first.transport_attempts == 2 and sleeps == []
    assert first.extra["structured_output_fallback"] == f"json_schema -> json_mode: {NO_JSON_SCHEMA}"
    retried = fake_gemini.requests[1].body["generationConfig"]
    assert retried["responseMimeType"] == "application/json" and "responseJsonSchema" not in retried
    assert c.structured_mode == "json_mode" and c.describe()["structured_output"] == "json_mode"
    second = c.complete(ASK)
    assert second.structured_output == "json_mode" and "structured_output_fallback" not in second.extra
    assert len(fake_gemini.requests) == 3


def test_json_mime_type_refused_too_falls_back_to_the_prompt(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(400, message=NO_JSON_SCHEMA)
    fake_gemini.error(400, message="JSON mode is not enabled for models/gemini-3.8-flash (response_mime_type).")
    fake_gemini.ok(ANSWER)
    c, _ = client()
    done = c.complete(ASK)
    assert done.structured_output == "prompt" and done.transport_attempts == 3
    assert set(fake_gemini.requests[2].body["generationConfig"]) == {"maxOutputTokens"}


def test_other_4xx_is_fatal_without_retry(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(400, message="Invalid JSON payload received.")
    c, sleeps = client()
    with pytest.raises(BackendError, match="Invalid JSON payload") as info:
        c.complete(ASK)
    assert "attempts" not in str(info.value) and not isinstance(info.value, BackendAuthError)
    assert len(fake_gemini.requests) == 1 and sleeps == [] and c.structured_mode == "json_schema"


# --- keys, configuration, errors -------------------------------------------------------------------------------------
def test_401_is_an_auth_error_naming_the_variable_without_the_key(fake_gemini: FakeGeminiServer) -> None:
    fake_gemini.error(401, message=f"key {FAKE_GEMINI_KEY} is not allowed")  # a server echoing the key
    c, sleeps = client()
    with pytest.raises(BackendAuthError) as info:
        c.complete(ASK)
    msg = str(info.value)
    assert "GEMINI_API_KEY" in msg and FAKE_GEMINI_KEY not in msg and "[REDACTED]" in msg
    assert len(fake_gemini.requests) == 1 and sleeps == []


def test_invalid_key_400_is_an_auth_error(fake_gemini: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real API answers a wrong key with 400 INVALID_ARGUMENT + ErrorInfo API_KEY_INVALID, not 401.
    fake_gemini.api_key = "the-real-key"
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", FAKE_GEMINI_KEY)
    c, _ = client()
    with pytest.raises(BackendAuthError, match="set GOOGLE_API_KEY to a valid key") as info:
        c.complete(ASK)
    assert FAKE_GEMINI_KEY not in str(info.value)
    assert len(fake_gemini.requests) == 1 and c.structured_mode == "json_schema"


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(BackendConfigError, match="set GEMINI_API_KEY or GOOGLE_API_KEY"):
        GeminiClient(MODEL, ClientOptions())


def test_base_url_from_sdk_variable_and_option_override(
    fake_gemini: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gemini.ok(ANSWER).ok(ANSWER)
    c, _ = client()  # GOOGLE_GEMINI_BASE_URL was set by the fixture
    assert c.describe()["base_url"] == fake_gemini.base_url
    c.complete(ASK)
    assert len(fake_gemini.requests) == 1
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    c2, _ = client(base_url=fake_gemini.base_url)
    assert c2.complete(ASK).text == ANSWER
    assert len(fake_gemini.requests) == 2


def test_default_base_url_is_googles(fake_gemini: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL")
    assert client()[0].describe()["base_url"] == "https://generativelanguage.googleapis.com"


def test_describe_has_no_key(fake_gemini: FakeGeminiServer) -> None:
    c, _ = client()
    d = c.describe()
    assert d["provider"] == "gemini" and d["model"] == MODEL and d["is_llm"] is True
    assert d["retry"] == FAST.resolved(local=False).to_dict() and d["key_source"] == "GEMINI_API_KEY"
    assert d["base_url"] == fake_gemini.base_url and d["sampling"]["max_output_tokens"] == 16384
    assert d["structured_output"] == "json_schema" and d["token_parameter"] == "max_output_tokens"
    assert FAKE_GEMINI_KEY not in json.dumps(d)


# --- classification --------------------------------------------------------------------------------------------------
def _api_error(code: int, status: str, details: list[Any] | None = None) -> genai_errors.APIError:
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
        (httpx2.RemoteProtocolError("Server disconnected without sending a response."), "retry"),
        (Unreachable("ConnectError: refused"), "unreachable"),
        (MalformedResponse("the body was not Gemini's JSON"), "retry"),
        (ValueError("bug"), "fatal"),
    ],
)
def test_classify(fake_gemini: FakeGeminiServer, exc: BaseException, kind: str) -> None:
    assert client()[0].classify(exc)[0] == kind


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
    assert gemini_json_schema(ANSWER_SCHEMA)["properties"]["rows"] == ANSWER_SCHEMA["properties"]["rows"]
