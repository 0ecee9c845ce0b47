"""OpenAIBackend through the real ``openai`` SDK against a loopback fake (OpenAI, compatible servers, Ollama).

The fake (``tests/fakes/openai_server.py``) is imported as ``fakes.*``: pytest puts ``tests/`` on sys.path.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import CHAT_PATH, FAKE_KEY, FakeOpenAIServer, error, hang, ok

from llm_policy_gen.backends import BackendOptions, make_backend
from llm_policy_gen.backends.base import Message, OutputFormat, RetryPolicy, Sampling
from llm_policy_gen.backends.openai_backend import OpenAIBackend, retry_after_seconds
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError
from llm_policy_gen.schema import TableProposal

fake_openai = openai_server.fake_openai  # the fixtures used below
fake_ollama = openai_server.fake_ollama

ANSWER = '{"rationale": "push right when the pole leans right", "rows": [{"state": 0, "action": 1}]}'
SCHEMA = TableProposal.model_json_schema()
TABLE = OutputFormat("table", SCHEMA)
MESSAGES = [Message("system", "You write tabular policies."), Message("user", "Improve the table.")]
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=1.0, jitter=0.0, timeout_s=2.0)


class Sleeps(list[float]):
    """Records the waits the retry policy asks for (instead of sleeping)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def backend(
    model: str = "gpt-6.2-sol", provider: str = "openai", sleep: Sleeps | None = None, **opts: Any
) -> OpenAIBackend:
    opts.setdefault("retry", FAST)
    return OpenAIBackend(
        model, BackendOptions(**opts), provider=provider, sleep=Sleeps() if sleep is None else sleep
    )


def test_structured_answer_text_usage_and_model(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(ANSWER, input_tokens=321, output_tokens=54, model="gpt-6.2-sol-2026-11-17"))
    b = make_backend("openai:gpt-6.2-sol", BackendOptions(retry=FAST))
    out = b.complete(MESSAGES, TABLE)
    assert out.text == ANSWER
    assert (out.input_tokens, out.output_tokens) == (321, 54)
    assert out.model == "gpt-6.2-sol-2026-11-17"
    assert out.transport_attempts == 1
    assert out.latency_s > 0
    assert out.extra["finish_reason"] == "stop"
    (req,) = fake_openai.requests
    assert req.path == CHAT_PATH
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"


def test_request_carries_strict_json_schema_and_messages(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(ANSWER))
    backend().complete(MESSAGES, TABLE)
    body = fake_openai.bodies[0]
    assert body["model"] == "gpt-6.2-sol"
    assert body["messages"] == [
        {"role": "system", "content": "You write tabular policies."},
        {"role": "user", "content": "Improve the table."},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "table", "schema": SCHEMA, "strict": True},
    }
    assert body["response_format"]["json_schema"]["schema"]["$defs"]["Row"]["additionalProperties"] is False
    # a compatible server (not api.openai.com): the classic token cap, temperature left to the server
    assert body["max_tokens"] == Sampling().max_output_tokens
    assert "max_completion_tokens" not in body
    assert "temperature" not in body
    assert body.get("stream") in (None, False)


def test_plain_text_and_sampling(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok("Action: 1", 7, 2))
    out = backend(sampling=Sampling(temperature=0.2, max_output_tokens=64)).complete(
        [Message("user", "act")], OutputFormat("direct")
    )
    assert out.text == "Action: 1"
    body = fake_openai.bodies[0]
    assert "response_format" not in body
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64


def test_openai_own_api_gets_max_completion_tokens(fake_openai: FakeOpenAIServer) -> None:
    b = backend(base_url="https://api.openai.com/v1")
    assert b.describe()["token_parameter"] == "max_completion_tokens"
    b._client = b._client.with_options(
        base_url=fake_openai.base_url
    )  # keep the wire body, reroute to loopback
    fake_openai.push(ok(ANSWER))
    b.complete(MESSAGES, TABLE)
    body = fake_openai.bodies[0]
    assert body["max_completion_tokens"] == Sampling().max_output_tokens
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    ("step", "expected_wait"),
    [
        (error(429, retry_after=0.05), 0.05),
        (error(503, retry_after_ms=20), 0.02),
        (error(408, retry_after=0), 0.0),
    ],
)
def test_retryable_status_with_retry_after_then_success(
    fake_openai: FakeOpenAIServer, step: Any, expected_wait: float
) -> None:
    fake_openai.push(step, ok(ANSWER, 11, 3))
    sleeps = Sleeps()
    out = backend(sleep=sleeps).complete(MESSAGES, TABLE)
    assert out.text == ANSWER
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(expected_wait)]
    assert len(fake_openai.requests) == 2
    assert (out.input_tokens, out.output_tokens) == (11, 3)


def test_429_without_retry_after_uses_backoff(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(error(429), ok(ANSWER))
    sleeps = Sleeps()
    out = backend(sleep=sleeps).complete(MESSAGES, TABLE)
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(FAST.initial_delay_s)]


def test_500_until_retries_exhausted(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(*[error(500)] * 3, ok(ANSWER))
    sleeps = Sleeps()
    with pytest.raises(BackendError) as info:
        backend(sleep=sleeps).complete(MESSAGES, TABLE)
    assert not isinstance(info.value, BackendAuthError)
    assert "after 3 attempts" in str(info.value)
    assert "InternalServerError" in str(info.value)
    assert len(fake_openai.requests) == 3
    assert sleeps == [pytest.approx(0.01), pytest.approx(0.02)]


def test_timeout_is_retried_then_fails(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(hang(3.0), hang(3.0), ok(ANSWER))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    t0 = time.perf_counter()
    with pytest.raises(BackendError) as info:
        backend(retry=policy).complete(MESSAGES, TABLE)
    elapsed = time.perf_counter() - t0
    assert "after 2 attempts" in str(info.value)
    assert "APITimeoutError" in str(info.value)
    assert len(fake_openai.requests) == 2
    assert 0.5 < elapsed < 2.5


def test_timeout_then_success_counts_wall_time(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(hang(3.0), ok(ANSWER))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3)
    out = backend(retry=policy).complete(MESSAGES, TABLE)
    assert out.transport_attempts == 2
    assert out.latency_s >= 0.3


def test_401_is_auth_error_naming_variable_without_key(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "sk-proj-wrong-key-77777777"
    monkeypatch.setenv("OPENAI_API_KEY", wrong)
    fake_openai.push(ok(ANSWER))
    with pytest.raises(BackendAuthError) as info:
        backend().complete(MESSAGES, TABLE)
    message = str(info.value)
    assert "OPENAI_API_KEY" in message
    assert wrong not in message and FAKE_KEY not in message
    assert "[REDACTED]" in message  # the fake echoed the whole key; it was removed
    assert len(fake_openai.requests) == 1  # never retried


def test_400_is_fatal_without_retry(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(error(400, message="Invalid schema for response_format 'table'"), ok(ANSWER))
    with pytest.raises(BackendError, match="Invalid schema"):
        backend().complete(MESSAGES, TABLE)
    assert len(fake_openai.requests) == 1


def test_missing_key_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BackendConfigError, match="OPENAI_API_KEY"):
        make_backend("openai:gpt-6.2-sol", BackendOptions())
    with pytest.raises(BackendConfigError, match="OPENAI_API_KEY"):
        backend(base_url="https://api.openai.com/v1")


def test_base_url_from_sdk_variable(fake_openai: FakeOpenAIServer) -> None:
    b = backend()
    assert b.describe()["base_url"] == fake_openai.base_url
    fake_openai.push(ok(ANSWER))
    assert b.complete(MESSAGES, TABLE).text == ANSWER
    assert len(fake_openai.requests) == 1


def test_base_url_option_overrides_variable(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # discard port: nothing listens
    fake_openai.push(ok(ANSWER))
    out = backend(base_url=fake_openai.base_url).complete(MESSAGES, TABLE)
    assert out.text == ANSWER


def test_compatible_server_without_key_gets_placeholder(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    fake_openai.api_key = None  # a vLLM / llama.cpp server started without --api-key
    fake_openai.push(ok(ANSWER))
    b = backend(model="Qwen/Qwen3-8B")
    assert b.describe()["key_source"] == "placeholder"
    assert b.complete(MESSAGES, TABLE).text == ANSWER
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-no-key-required"


def test_ollama_through_make_backend(fake_ollama: FakeOpenAIServer) -> None:
    fake_ollama.push(ok(ANSWER, 40, 12))
    b = make_backend("ollama:llama3.1:8b", BackendOptions(retry=FAST))
    assert (b.name, b.model) == ("ollama", "llama3.1:8b")
    out = b.complete(MESSAGES, TABLE)
    assert (out.text, out.input_tokens, out.output_tokens, out.model) == (ANSWER, 40, 12, "llama3.1:8b")
    (req,) = fake_ollama.requests
    assert req.path == CHAT_PATH
    assert req.headers["authorization"] == "Bearer ollama"
    assert req.body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert req.body["max_tokens"] == Sampling().max_output_tokens
    assert "max_completion_tokens" not in req.body
    assert b.describe()["base_url"] == fake_ollama.base_url


def test_ollama_retries_like_the_others(fake_ollama: FakeOpenAIServer) -> None:
    fake_ollama.push(error(503, retry_after=0.03), ok(ANSWER))
    sleeps = Sleeps()
    out = backend("llama3.1:8b", provider="ollama", sleep=sleeps).complete(MESSAGES, TABLE)
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(0.03)]


def test_ollama_base_url_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    assert backend("llama3.1:8b", provider="ollama").base_url == "http://localhost:11434/v1"
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434/")
    assert backend("llama3.1:8b", provider="ollama").base_url == "http://gpu-box:11434/v1"
    assert backend("llama3.1:8b", provider="ollama", base_url="http://x:1/v1").base_url == "http://x:1/v1"


def test_default_responder_serves_many_calls(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.responder = lambda body: json.dumps({"rationale": body["model"], "rows": []})
    b = backend()
    texts = [b.complete(MESSAGES, TABLE).text for _ in range(3)]
    assert texts == ['{"rationale": "gpt-6.2-sol", "rows": []}'] * 3
    assert len(fake_openai.requests) == 3


def test_refusal_gives_empty_text(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(None, refusal="I can't help with that."))
    out = backend().complete(MESSAGES, TABLE)
    assert out.text == ""
    assert out.extra["refusal"] == "I can't help with that."


def test_describe_never_holds_the_key(fake_openai: FakeOpenAIServer) -> None:
    d = backend().describe()
    text = json.dumps(d)
    assert FAKE_KEY not in text
    assert d["provider"] == "openai" and d["model"] == "gpt-6.2-sol" and d["is_llm"] is True
    assert d["key_source"] == "OPENAI_API_KEY"
    assert d["retry"] == FAST.to_dict()


def test_bad_provider_and_model() -> None:
    with pytest.raises(BackendConfigError, match="provider"):
        OpenAIBackend("m", BackendOptions(), provider="anthropic")
    with pytest.raises(BackendConfigError, match="model"):
        OpenAIBackend(" ", BackendOptions(), provider="ollama")


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    http_date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_seconds({"retry-after": http_date}) or 0) <= 31
