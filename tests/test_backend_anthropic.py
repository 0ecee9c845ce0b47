"""The Anthropic backend through the real ``anthropic`` SDK, pointed at a scripted loopback server."""

from __future__ import annotations

import json

import pytest
from fakes import anthropic_server
from fakes.anthropic_server import FAKE_KEY, FakeAnthropicServer, error, hang, ok

from llm_policy_gen.backends import BackendOptions, make_backend
from llm_policy_gen.backends.anthropic_backend import (
    AnthropicBackend,
    accepts_temperature,
    retry_after_seconds,
)
from llm_policy_gen.backends.base import Message, OutputFormat, RetryPolicy, Sampling
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError
from llm_policy_gen.schema import TableProposal

MODEL = "claude-sonnet-4-6"
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=0.05, jitter=0.0, timeout_s=2.0)
TABLE = OutputFormat("table", TableProposal.model_json_schema())
MESSAGES = [
    Message("system", "You write tabular policies."),
    Message("user", "Propose a table for 2 states."),
]
fake_anthropic = anthropic_server.fake_anthropic  # the fixture, registered in this module
ANSWER = '{"rationale": "push right", "rows": [{"state": 0, "action": 1}, {"state": 1, "action": 0}]}'


def backend(
    retry: RetryPolicy = FAST, model: str = MODEL, sleeps: list[float] | None = None, **options: object
) -> AnthropicBackend:
    record = sleeps if sleeps is not None else []
    return AnthropicBackend(model, BackendOptions(retry=retry, **options), sleep=record.append)  # type: ignore[arg-type]


def test_structured_answer_text_and_usage(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(
        ok(
            ANSWER,
            120,
            34,
            cache_creation_input_tokens=7,
            cache_read_input_tokens=3,
            model="claude-sonnet-4-6-x",
        )
    )
    done = backend().complete(MESSAGES, TABLE)
    assert done.text == ANSWER
    assert done.input_tokens == 120 + 7 + 3  # uncached + cache writes + cache reads
    assert done.output_tokens == 34
    assert done.extra["usage"] == {
        "input_tokens": 120,
        "cache_creation_input_tokens": 7,
        "cache_read_input_tokens": 3,
        "output_tokens": 34,
    }
    assert done.model == "claude-sonnet-4-6-x"  # the model the response names
    assert done.transport_attempts == 1
    assert done.latency_s > 0
    assert done.extra["stop_reason"] == "end_turn"


def test_request_carries_json_schema_system_and_max_tokens(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok(ANSWER))
    backend(sampling=Sampling(max_output_tokens=777)).complete(MESSAGES, TABLE)
    (req,) = fake_anthropic.requests
    assert req.path == "/v1/messages"
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"  # how SDK 2.x sends an api_key
    assert "anthropic-version" in req.headers
    body = req.body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 777
    assert body["system"] == "You write tabular policies."
    assert body["messages"] == [{"role": "user", "content": "Propose a table for 2 states."}]
    assert "temperature" not in body  # Sampling.temperature None: not sent
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["rationale", "rows"]
    assert schema["properties"]["rows"]["items"] == {"$ref": "#/$defs/Row"}
    row = schema["$defs"]["Row"]
    assert row["additionalProperties"] is False and row["properties"]["state"]["type"] == "integer"
    assert schema["properties"]["rationale"]["type"] == "string"
    json.dumps(schema)  # JSON-able as sent


def test_plain_text_when_no_schema(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok("Action: 1"))
    done = backend().complete([Message("user", "act")], OutputFormat("direct", None))
    assert done.text == "Action: 1"
    body = fake_anthropic.bodies[0]
    assert "output_config" not in body and "system" not in body


def test_temperature_sent_only_to_models_that_accept_it(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(ok("a"), ok("b"))
    warm = Sampling(temperature=0.4)
    backend(sampling=warm).complete(MESSAGES, TABLE)
    dropped = backend(model="claude-opus-5-5", sampling=warm).complete(MESSAGES, TABLE)
    assert fake_anthropic.bodies[0]["temperature"] == 0.4
    assert "temperature" not in fake_anthropic.bodies[1]
    assert dropped.extra["temperature_dropped"] is True
    assert accepts_temperature("claude-haiku-4-5-20251001") and accepts_temperature("claude-sonnet-4-6")
    assert not any(map(accepts_temperature, ["claude-opus-4-7", "claude-sonnet-5", "claude-fable-5-2"]))


def test_429_with_retry_after_then_success(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(429, retry_after="0.04"), ok(ANSWER, 11, 4))
    sleeps: list[float] = []
    done = backend(sleeps=sleeps).complete(MESSAGES, TABLE)
    assert done.text == ANSWER and done.transport_attempts == 2
    assert sleeps == [0.04]  # the server's Retry-After, not the 0.01 s back-off
    assert len(fake_anthropic.requests) == 2
    assert done.input_tokens == 11 and done.output_tokens == 4


@pytest.mark.parametrize("status", [408, 409, 503, 529])
def test_other_retryable_statuses(fake_anthropic: FakeAnthropicServer, status: int) -> None:
    fake_anthropic.push(error(status), ok(ANSWER))
    sleeps: list[float] = []
    done = backend(sleeps=sleeps).complete(MESSAGES, TABLE)
    assert done.transport_attempts == 2 and sleeps == [0.01]  # no Retry-After: the policy's back-off


def test_overloaded_error_type_retries_whatever_the_status(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(400, error_type="overloaded_error"), ok(ANSWER))
    assert backend().complete(MESSAGES, TABLE).transport_attempts == 2


def test_500_until_retries_are_spent(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(*[error(500)] * 3)
    sleeps: list[float] = []
    with pytest.raises(BackendError, match="after 3 attempts") as info:
        backend(sleeps=sleeps).complete(MESSAGES, TABLE)
    assert not isinstance(info.value, BackendAuthError)
    assert len(fake_anthropic.requests) == 3 and sleeps == [0.01, 0.02]


def test_timeout_is_retried_then_fails(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(hang(3), hang(3))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    with pytest.raises(BackendError, match="after 2 attempts.*APITimeoutError"):
        backend(retry=policy).complete(MESSAGES, TABLE)
    assert len(fake_anthropic.requests) == 2


def test_timeout_then_success(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(hang(3), ok(ANSWER))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    done = backend(retry=policy).complete(MESSAGES, TABLE)
    assert done.text == ANSWER and done.transport_attempts == 2 and done.latency_s >= 0.3


def test_401_is_an_auth_error_without_the_key(fake_anthropic: FakeAnthropicServer) -> None:
    # A proxy may echo the key it was given: the error must still not show it.
    fake_anthropic.push(error(401, message=f"invalid x-api-key: {FAKE_KEY}"))
    with pytest.raises(BackendAuthError) as info:
        backend().complete(MESSAGES, TABLE)
    text = str(info.value)
    assert "ANTHROPIC_API_KEY" in text and FAKE_KEY not in text and "[REDACTED]" in text
    assert len(fake_anthropic.requests) == 1  # never retried


def test_wrong_key_is_refused_by_the_server(
    fake_anthropic: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-key-999")
    with pytest.raises(BackendAuthError, match="ANTHROPIC_API_KEY") as info:
        backend().complete(MESSAGES, TABLE)
    assert "sk-ant-wrong-key-999" not in str(info.value)


def test_403_is_auth_and_400_is_fatal(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.push(error(403), error(400, message="max_tokens: too large"))
    with pytest.raises(BackendAuthError):
        backend().complete(MESSAGES, TABLE)
    with pytest.raises(BackendError, match="max_tokens: too large") as info:
        backend().complete(MESSAGES, TABLE)
    assert "attempts" not in str(info.value)
    assert len(fake_anthropic.requests) == 2


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BackendConfigError, match="set ANTHROPIC_API_KEY"):
        backend()


def test_base_url_from_the_sdk_variable_and_option(
    fake_anthropic: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_anthropic.push(ok("from env"), ok("from option"))
    from_env = backend()
    assert from_env.describe()["base_url"] == fake_anthropic.url
    assert from_env.complete(MESSAGES, TABLE).text == "from env"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    from_option = backend(base_url=fake_anthropic.url)
    assert from_option.complete(MESSAGES, TABLE).text == "from option"
    assert len(fake_anthropic.requests) == 2


def test_make_backend_describe_and_sdk_settings(fake_anthropic: FakeAnthropicServer) -> None:
    built = make_backend(f"anthropic:{MODEL}", BackendOptions(retry=FAST))
    assert isinstance(built, AnthropicBackend)
    assert (built.name, built.model, built.is_llm) == ("anthropic", MODEL, True)
    assert built._client.max_retries == 0 and built._client.timeout == FAST.timeout_s
    info = built.describe()
    assert info["provider"] == "anthropic" and info["retry"] == FAST.to_dict()
    assert FAKE_KEY not in json.dumps(info)


def test_default_responder_serves_many_calls(fake_anthropic: FakeAnthropicServer) -> None:
    fake_anthropic.responder = lambda body: json.dumps({"n": len(body["messages"])})
    b = backend()
    answers = [b.complete(MESSAGES, TABLE).text for _ in range(3)]
    assert answers == ['{"n": 1}'] * 3
    assert all(r.body["model"] == MODEL for r in fake_anthropic.requests)


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
