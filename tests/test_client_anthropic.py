"""AnthropicClient through the real ``anthropic`` SDK, pointed at a scripted loopback server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import anthropic_server
from fakes.anthropic_server import FAKE_KEY, FakeAnthropicServer, error, hang, ok, raw
from fakes.loopback import ANSWER_SCHEMA

from llm_policy_gen.clients.anthropic import AnthropicClient, accepts_temperature, to_anthropic_schema
from llm_policy_gen.clients.base import ClientOptions, Message, OutputSpec, Request, Sampling
from llm_policy_gen.clients.retry import RetryPolicy
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError, BackendUnreachable, UserError

MODEL = "claude-sonnet-4-6"
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=0.05, jitter=0.0, timeout_s=2.0)
TABLE = OutputSpec("table", ANSWER_SCHEMA)
MESSAGES = (Message("system", "You write tabular policies."), Message("user", "Propose a table for 2 states."))
ASK = Request(MESSAGES, TABLE)
fake_anthropic = anthropic_server.fake_anthropic  # the fixture, registered in this module
ANSWER = json.dumps(
    {"rationale": "push right", "rows": [{"state": 0, "action": 1}, {"state": 1, "action": 0}], "note": {"text": ""}}
)
#: Anthropic's answer to a model without structured output (the exact body shape).
NO_OUTPUT_CONFIG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "output_config.format: structured outputs are not supported for this model",
    },
    "request_id": "req_fake",
}


def client(
    retry: RetryPolicy = FAST, model: str = MODEL, sleeps: list[float] | None = None, **options: Any
) -> AnthropicClient:
    record = sleeps if sleeps is not None else []
    return AnthropicClient(model, ClientOptions(retry=retry, **options), sleep=record.append)


# --- answers and the wire format -------------------------------------------------------------------------------------
def test_structured_answer_text_and_usage(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(
        ok(ANSWER, 120, 34, cache_creation_input_tokens=7, cache_read_input_tokens=3, model="claude-sonnet-4-6-x")
    )
    c = client()
    assert (c.provider, c.model, c.is_llm) == ("anthropic", MODEL, True)
    done = c.complete(ASK)
    assert done.text == ANSWER
    assert done.input_tokens == 120 + 7 + 3  # uncached + cache writes + cache reads
    assert (done.cached_input_tokens, done.cache_write_tokens, done.output_tokens) == (3, 7, 34)
    assert done.model == "claude-sonnet-4-6-x"  # the model the response names
    assert (done.finish_reason, done.truncated, done.refusal) == ("end_turn", False, None)
    assert done.structured_output == "json_schema" and done.transport_attempts == 1
    assert done.latency_s > 0 and done.extra == {}


def test_request_carries_json_schema_system_and_max_tokens(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok(ANSWER))
    client(sampling=Sampling(max_output_tokens=777)).complete(ASK)
    (req,) = fake_anthropic.requests
    assert req.path == "/v1/messages"
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"  # how SDK 2.x sends an api_key
    assert "anthropic-version" in req.headers
    body = req.body
    assert body["model"] == MODEL and body["max_tokens"] == 777
    assert body["system"] == "You write tabular policies."
    assert body["messages"] == [{"role": "user", "content": "Propose a table for 2 states."}]
    assert "temperature" not in body and "tools" not in body  # Sampling.temperature None: not sent
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["schema"]
    assert schema == to_anthropic_schema(ANSWER_SCHEMA, "table")
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["note", "rationale", "rows"]
    assert schema["properties"]["rows"]["items"] == {"$ref": "#/$defs/Row"}
    row = schema["$defs"]["Row"]
    assert row["additionalProperties"] is False and row["properties"]["state"]["type"] == "integer"
    json.dumps(schema)  # JSON-able as sent


def test_plain_text_when_no_schema(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok("Action: 1"))
    done = client().complete(Request((Message("user", "act"),), OutputSpec("direct", None)))
    assert done.text == "Action: 1" and done.structured_output == "none"
    body = fake_anthropic.bodies[0]
    assert "output_config" not in body and "system" not in body and "tools" not in body


def test_temperature_sent_only_to_models_that_accept_it(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok("a"), ok("b"))
    warm = Sampling(temperature=0.4)
    client(sampling=warm).complete(ASK)
    quiet = client(model="claude-opus-5-5", sampling=warm)
    dropped = quiet.complete(ASK)
    assert fake_anthropic.bodies[0]["temperature"] == 0.4
    assert "temperature" not in fake_anthropic.bodies[1]
    assert dropped.extra["temperature_dropped"] is True and quiet.describe()["temperature_sent"] is False
    assert accepts_temperature("claude-haiku-4-5-20251001") and accepts_temperature("claude-sonnet-4-6")
    assert not any(map(accepts_temperature, ["claude-opus-4-7", "claude-sonnet-5", "claude-fable-5-2"]))


@pytest.mark.parametrize("temperature", [1.5, -0.2])
def test_temperature_outside_0_to_1_is_a_user_error(fake_anthropic: FakeAnthropicServer, temperature: float) -> None:
    with pytest.raises(UserError, match=rf"^temperature {temperature} is outside the range anthropic accepts: 0 to 1$"):
        client(sampling=Sampling(temperature=temperature))
    assert fake_anthropic.requests == []


def test_max_tokens_is_truncated_and_refusal_is_reported(fake_anthropic: FakeAnthropicServer) -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "This looks like malware development."}
    fake_anthropic.push(
        ok('{"rationale": "cu', stop_reason="max_tokens"),
        ok("", stop_reason="refusal", stop_details=details),
        ok("", stop_reason="refusal", stop_details={"type": "refusal", "category": "bio", "explanation": None}),
    )
    c = client()
    cut, declined, bare = (c.complete(ASK) for _ in range(3))
    assert (cut.finish_reason, cut.truncated, cut.refusal) == ("max_tokens", True, None)
    assert (declined.finish_reason, declined.refusal) == ("refusal", "This looks like malware development.")
    assert bare.refusal == "refused (bio)" and not bare.truncated


def test_default_responder_serves_many_calls(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.responder = lambda body: json.dumps({"n": len(body["messages"])})
    c = client()
    answers = [c.complete(ASK).text for _ in range(3)]
    assert answers == ['{"n": 1}'] * 3
    assert all(r.body["model"] == MODEL for r in fake_anthropic.requests)


# --- retries ---------------------------------------------------------------------------------------------------------
def test_429_with_retry_after_then_success(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(429, retry_after="0.04"), ok(ANSWER, 11, 4))
    sleeps: list[float] = []
    done = client(sleeps=sleeps).complete(ASK)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert sleeps == [0.04]  # the server's Retry-After, not the 0.01 s back-off
    assert len(fake_anthropic.requests) == 2
    assert done.input_tokens == 11 and done.output_tokens == 4


@pytest.mark.parametrize("status", [408, 409, 503, 529])
def test_other_retryable_statuses(fake_anthropic: FakeAnthropicServer, status: int) -> None:
    fake_anthropic.push(error(status), ok(ANSWER))
    sleeps: list[float] = []
    done = client(sleeps=sleeps).complete(ASK)
    assert done.transport_attempts == 2 and sleeps == [0.01]  # no Retry-After: the policy's back-off


def test_overloaded_error_type_retries_whatever_the_status(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(400, error_type="overloaded_error", message="Overloaded: tool servers busy"), ok(ANSWER))
    done = client().complete(ASK)
    assert done.transport_attempts == 2 and done.structured_output == "json_schema"  # not a structured refusal


def test_500_until_retries_are_spent(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(*[error(500)] * 3)
    sleeps: list[float] = []
    with pytest.raises(BackendError, match="after 3 attempts") as info:
        client(sleeps=sleeps).complete(ASK)
    assert not isinstance(info.value, (BackendAuthError, BackendUnreachable))
    assert len(fake_anthropic.requests) == 3 and sleeps == [0.01, 0.02]


def test_timeout_on_every_attempt_is_unreachable(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(hang(3), hang(3))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    with pytest.raises(BackendUnreachable, match=r"could not be reached after 2 attempts.*no answer within 0\.3 s"):
        client(retry=policy).complete(ASK)
    assert len(fake_anthropic.requests) == 2


def test_timeout_then_success(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(hang(3), ok(ANSWER))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    done = client(retry=policy).complete(ASK)
    assert done.text == ANSWER and done.transport_attempts == 2 and done.latency_s >= 0.3


# --- unreachable endpoints -------------------------------------------------------------------------------------------
def test_connection_refused_is_unreachable_naming_the_url(fake_anthropic: FakeAnthropicServer) -> None:
    sleeps: list[float] = []
    c = client(base_url="http://gateway-user:pw1234@127.0.0.1:9", sleeps=sleeps)
    c.reached = True  # its server answered before: a refused connection is retried (a fresh client's is not)
    with pytest.raises(BackendUnreachable) as info:
        c.complete(ASK)
    message = str(info.value)
    assert message.startswith(f"anthropic:{MODEL} at http://127.0.0.1:9 could not be reached after 3 attempts")
    assert "Connection refused" in message and "pw1234" not in message and len(sleeps) == 2


def test_unresolvable_host_is_unreachable(fake_anthropic: FakeAnthropicServer) -> None:
    c = client(base_url="http://claude-gateway.invalid", retry=RetryPolicy(max_retries=0, timeout_s=2.0))
    with pytest.raises(BackendUnreachable, match=r"at http://claude-gateway\.invalid could not be reached"):
        c.complete(ASK)


# --- a 200 that is not Anthropic's JSON ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "detail"),
    [
        (raw("<html><body><h1>504 Gateway Time-out</h1></body></html>"), "got '<html><body><h1>504 Gateway"),
        (raw({"type": "message", "role": "assistant"}, "application/json"), "no 'content'"),
        (raw({"content": "just a string"}, "application/json"), "'content' is a str, not a list"),
        (raw({"content": [{"type": "text"}]}, "application/json"), "TypeError"),
        (raw("not json at all", "application/json"), "JSONDecodeError"),
    ],
)
def test_body_that_is_not_anthropic_json_is_retried_then_fails(
    fake_anthropic: FakeAnthropicServer, step: Any, detail: str
) -> None:
    fake_anthropic.push(step, step, step)
    sleeps: list[float] = []
    with pytest.raises(BackendError) as info:
        client(sleeps=sleeps).complete(ASK)
    message = str(info.value)
    assert not isinstance(info.value, BackendUnreachable)
    assert "failed after 3 attempts: MalformedResponse: the body was not Anthropic's JSON" in message
    assert detail in message and len(sleeps) == 2


def test_html_page_then_a_real_answer(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(raw("<html>bad gateway</html>"), ok(ANSWER))
    assert client().complete(ASK).transport_attempts == 2


# --- structured-output fallback --------------------------------------------------------------------------------------
def test_refused_output_config_falls_back_to_a_forced_tool_call(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(raw(NO_OUTPUT_CONFIG, "application/json", status=400), ok(ANSWER, 50, 20), ok(ANSWER))
    sleeps: list[float] = []
    c = client(sleeps=sleeps)
    first = c.complete(ASK)
    assert json.loads(first.text) == json.loads(ANSWER)  # the tool call's input, as JSON text
    assert first.structured_output == "json_mode" and first.finish_reason == "tool_use"
    assert first.transport_attempts == 2 and sleeps == []
    assert first.extra["structured_output_fallback"] == (
        "json_schema -> json_mode: output_config.format: structured outputs are not supported for this model"
    )
    retried = fake_anthropic.bodies[1]
    assert "output_config" not in retried
    assert retried["tools"] == [
        {"name": "table", "description": "Give your answer as this tool's input.", "input_schema": ANSWER_SCHEMA}
    ]
    assert retried["tool_choice"] == {"type": "tool", "name": "table"}
    assert c.structured_mode == "json_mode" and c.describe()["structured_output"] == "json_mode"
    second = c.complete(ASK)
    assert second.structured_output == "json_mode" and "structured_output_fallback" not in second.extra
    assert "tools" in fake_anthropic.bodies[2] and len(fake_anthropic.requests) == 3


def test_forced_tool_refused_too_falls_back_to_the_prompt(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(
        raw(NO_OUTPUT_CONFIG, "application/json", status=400),
        error(400, message="tool_choice: forcing a tool is not supported by this model"),
        ok(ANSWER),
    )
    done = client().complete(ASK)
    assert done.text == ANSWER and done.structured_output == "prompt" and done.transport_attempts == 3
    last = fake_anthropic.bodies[2]
    assert "tools" not in last and "output_config" not in last


def test_other_400_stays_fatal(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(400, message="max_tokens: 100000 > 64000, the maximum for this model"))
    c = client()
    with pytest.raises(BackendError, match="max_tokens: 100000") as info:
        c.complete(ASK)
    assert "attempts" not in str(info.value)
    assert len(fake_anthropic.requests) == 1 and c.structured_mode == "json_schema"


def test_restored_mode_sends_the_tool_at_once(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok(ANSWER))
    c = client()
    c.structured_mode = "json_mode"
    done = c.complete(ASK)
    assert done.structured_output == "json_mode" and "tools" in fake_anthropic.bodies[0]


# --- keys, configuration, errors -------------------------------------------------------------------------------------
def test_401_is_an_auth_error_without_the_key(fake_anthropic: FakeAnthropicServer) -> None:
    # A proxy may echo the key it was given: the error must still not show it.
    fake_anthropic.push(error(401, message=f"invalid x-api-key: {FAKE_KEY}"))
    with pytest.raises(BackendAuthError) as info:
        client().complete(ASK)
    text = str(info.value)
    assert "ANTHROPIC_API_KEY" in text and FAKE_KEY not in text and "[REDACTED]" in text
    assert len(fake_anthropic.requests) == 1  # never retried


def test_wrong_key_is_refused_by_the_server(
    fake_anthropic: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-key-999")
    with pytest.raises(BackendAuthError, match="ANTHROPIC_API_KEY") as info:
        client().complete(ASK)
    assert "sk-ant-wrong-key-999" not in str(info.value)


def test_403_is_auth(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(403))
    with pytest.raises(BackendAuthError):
        client().complete(ASK)
    assert len(fake_anthropic.requests) == 1


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BackendConfigError, match="set ANTHROPIC_API_KEY"):
        client()


def test_base_url_from_the_sdk_variable_and_option(
    fake_anthropic: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_anthropic.push(ok("from env"), ok("from option"))
    from_env = client()
    assert from_env.describe()["base_url"] == fake_anthropic.url
    assert from_env.complete(ASK).text == "from env"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    from_option = client(base_url=fake_anthropic.url)
    assert from_option.complete(ASK).text == "from option"
    assert len(fake_anthropic.requests) == 2


def test_default_base_url_is_anthropics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    assert client().describe()["base_url"] == "https://api.anthropic.com"


def test_describe_and_sdk_settings(fake_anthropic: FakeAnthropicServer) -> None:
    built = client()
    assert built._client.max_retries == 0 and built._client.timeout == FAST.timeout_s
    info = built.describe()
    assert info["provider"] == "anthropic" and info["api"] == "messages"
    assert info["retry"] == FAST.resolved(local=False).to_dict() and info["local"] is False
    assert info["key_source"] == "ANTHROPIC_API_KEY" and info["structured_output"] == "json_schema"
    assert info["temperature_range"] == [0.0, 1.0] and info["token_parameter"] == "max_tokens"
    assert FAKE_KEY not in json.dumps(info)
