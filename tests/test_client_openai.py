"""OpenAIClient through the real ``openai`` SDK against a loopback fake (OpenAI, compatible servers, Ollama).

The fakes (``tests/fakes/``) are imported as ``fakes.*``: pytest puts ``tests/`` on sys.path.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fakes import openai_server
from fakes.loopback import ANSWER_SCHEMA, SilentServer
from fakes.openai_server import CHAT_PATH, FAKE_KEY, MODELS_PATH, FakeOpenAIServer, error, hang, ok, raw

from llm_policy_gen.clients.base import ClientOptions, Message, OutputSpec, Request, Sampling
from llm_policy_gen.clients.ollama import OllamaClient
from llm_policy_gen.clients.openai import OpenAIClient, _strict_schema, server_answers
from llm_policy_gen.clients.retry import RetryPolicy
from llm_policy_gen.errors import BackendAuthError, BackendConfigError, BackendError, BackendUnreachable, UserError

fake_openai = openai_server.fake_openai  # the fixtures used below
fake_ollama = openai_server.fake_ollama

ANSWER = json.dumps(
    {"rationale": "push right when the pole leans right", "rows": [{"state": 0, "action": 1}], "note": {"text": ""}}
)
TABLE = OutputSpec("table", ANSWER_SCHEMA)
MESSAGES = (Message("system", "You write tabular policies as JSON."), Message("user", "Improve the table."))
ASK = Request(MESSAGES, TABLE)
FAST = RetryPolicy(max_retries=2, initial_delay_s=0.01, max_delay_s=1.0, jitter=0.0, timeout_s=2.0)
#: OpenAI's answer to a model without json_schema structured output (the exact body).
NO_JSON_SCHEMA = {
    "message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
    "type": "invalid_request_error",
    "param": "response_format",
    "code": None,
}


class Sleeps(list[float]):
    """Records the waits the retry policy asks for (instead of sleeping)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(
    model: str = "gpt-6.2-sol", provider: str = "openai", sleep: Sleeps | None = None, **opts: Any
) -> OpenAIClient:
    opts.setdefault("retry", FAST)
    cls = {"openai": OpenAIClient, "ollama": OllamaClient}[provider]
    return cls(model, ClientOptions(**opts), sleep=Sleeps() if sleep is None else sleep)


def refused(body: dict[str, Any] = NO_JSON_SCHEMA) -> Any:
    """A 400 whose body is exactly ``{"error": body}``."""
    return raw({"error": body}, "application/json", status=400)


# --- answers and the wire format -------------------------------------------------------------------------------------
def test_structured_answer_text_usage_and_model(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(ANSWER, input_tokens=321, output_tokens=54, cached_tokens=256, model="gpt-6.2-sol-2026-11-17"))
    c = client()
    assert (c.provider, c.model, c.is_llm) == ("openai", "gpt-6.2-sol", True)
    out = c.complete(ASK)
    assert out.text == ANSWER
    assert (out.input_tokens, out.output_tokens, out.cached_input_tokens, out.cache_write_tokens) == (321, 54, 256, 0)
    assert out.model == "gpt-6.2-sol-2026-11-17"
    assert (out.finish_reason, out.truncated, out.refusal) == ("stop", False, None)
    assert out.structured_output == "json_schema" and out.transport_attempts == 1
    assert out.latency_s > 0 and out.extra == {}
    (req,) = fake_openai.requests
    assert req.path == CHAT_PATH
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"


def test_request_carries_strict_json_schema_and_messages(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(ANSWER))
    client().complete(ASK)
    body = fake_openai.bodies[0]
    assert body["model"] == "gpt-6.2-sol"
    assert body["messages"] == [
        {"role": "system", "content": "You write tabular policies as JSON."},
        {"role": "user", "content": "Improve the table."},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "table", "schema": _strict_schema(ANSWER_SCHEMA), "strict": True},
    }
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["$defs"]["Row"]["additionalProperties"] is False
    assert "$ref" not in schema["properties"]["note"]  # a $ref with a sibling description is inlined for strict mode
    # a compatible server (not api.openai.com): the classic token cap, temperature left to the server
    assert body["max_tokens"] == Sampling().max_output_tokens
    assert "max_completion_tokens" not in body and "temperature" not in body
    assert body.get("stream") in (None, False)


def test_plain_text_and_sampling(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok("Action: 1", 7, 2))
    c = client(sampling=Sampling(temperature=0.2, max_output_tokens=64))
    out = c.complete(Request((Message("user", "act"),), OutputSpec("direct")))
    assert out.text == "Action: 1" and out.structured_output == "none"
    body = fake_openai.bodies[0]
    assert "response_format" not in body
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64


def test_openai_own_api_gets_max_completion_tokens(fake_openai: FakeOpenAIServer) -> None:
    c = client(base_url="https://api.openai.com/v1")
    assert c.describe()["token_parameter"] == "max_completion_tokens"
    c._client = c._client.with_options(base_url=fake_openai.base_url)  # keep the wire body, reroute to loopback
    fake_openai.push(ok(ANSWER))
    c.complete(ASK)
    body = fake_openai.bodies[0]
    assert body["max_completion_tokens"] == Sampling().max_output_tokens
    assert "max_tokens" not in body


def test_length_is_truncated_and_refusals_are_reported(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(
        ok('{"rationale": "cut', finish_reason="length"),
        ok(None, refusal="I can't help with that."),
        ok(None, finish_reason="content_filter"),
    )
    c = client()
    cut, declined, filtered = (c.complete(ASK) for _ in range(3))
    assert (cut.finish_reason, cut.truncated, cut.refusal) == ("length", True, None)
    assert (declined.text, declined.refusal, declined.truncated) == ("", "I can't help with that.", False)
    assert (filtered.finish_reason, filtered.refusal) == ("content_filter", "content filter")


def test_default_responder_serves_many_calls(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.responder = lambda body: json.dumps({"rationale": body["model"], "rows": []})
    c = client()
    texts = [c.complete(ASK).text for _ in range(3)]
    assert texts == ['{"rationale": "gpt-6.2-sol", "rows": []}'] * 3
    assert len(fake_openai.requests) == 3


def test_concurrent_calls_share_one_client(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.responder = lambda body: body["messages"][-1]["content"]
    c = client()
    answers: dict[int, str] = {}

    def ask(k: int) -> None:
        answers[k] = c.complete(Request((Message("user", f"candidate {k}"),), TABLE)).text

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert answers == {k: f"candidate {k}" for k in range(6)}


# --- retries ---------------------------------------------------------------------------------------------------------
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
    out = client(sleep=sleeps).complete(ASK)
    assert out.text == ANSWER
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(expected_wait)]
    assert len(fake_openai.requests) == 2
    assert (out.input_tokens, out.output_tokens) == (11, 3)


def test_429_without_retry_after_uses_backoff(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(error(429), ok(ANSWER))
    sleeps = Sleeps()
    out = client(sleep=sleeps).complete(ASK)
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(FAST.initial_delay_s)]


def test_500_until_retries_exhausted(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(*[error(500)] * 3, ok(ANSWER))
    sleeps = Sleeps()
    with pytest.raises(BackendError) as info:
        client(sleep=sleeps).complete(ASK)
    assert not isinstance(info.value, (BackendAuthError, BackendUnreachable))
    assert "after 3 attempts" in str(info.value)
    assert "InternalServerError" in str(info.value)
    assert len(fake_openai.requests) == 3
    assert sleeps == [pytest.approx(0.01), pytest.approx(0.02)]


def test_timeout_on_every_attempt_is_unreachable(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(hang(60.0), hang(60.0), ok(ANSWER))
    # retry_timeouts: as a remote server is treated (the loopback fake would be a local server, see below)
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3, retry_timeouts=True)
    with pytest.raises(BackendUnreachable) as info:
        client(retry=policy).complete(ASK)
    assert f"at {fake_openai.base_url} could not be reached after 2 attempts" in str(info.value)
    assert "no answer within 0.3 s (ReadTimeout)" in str(info.value)
    assert len(fake_openai.requests) == 2
    assert fake_openai.outlasted == 0  # both attempts gave up while the server still hung (the hangs last 60 s)


def test_timeout_then_success_counts_wall_time(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(hang(3.0), ok(ANSWER))
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.01, jitter=0.0, timeout_s=0.3, retry_timeouts=True)
    out = client(retry=policy).complete(ASK)
    assert out.transport_attempts == 2
    assert out.latency_s >= 0.3


# --- unreachable endpoints -------------------------------------------------------------------------------------------
def test_connection_refused_is_unreachable_naming_the_url_without_userinfo() -> None:
    sleeps = Sleeps()
    c = client(base_url="http://proxyuser:s3cret@127.0.0.1:9/v1", sleep=sleeps)  # port 9: nothing listens
    c.reached = True  # its server answered before: a refused connection is retried (a fresh client's is not)
    with pytest.raises(BackendUnreachable) as info:
        c.complete(ASK)
    message = str(info.value)
    assert message.startswith("openai:gpt-6.2-sol at http://127.0.0.1:9/v1 could not be reached after 3 attempts")
    assert "Connection refused" in message and "s3cret" not in message and "\n" not in message
    assert len(sleeps) == 2  # retried under the policy
    assert c.describe()["base_url"] == "http://127.0.0.1:9/v1"


def test_unresolvable_host_is_unreachable() -> None:
    c = client(base_url="http://llm-policy-gen-test.invalid/v1", retry=RetryPolicy(max_retries=0, timeout_s=2.0))
    with pytest.raises(BackendUnreachable, match=r"at http://llm-policy-gen-test\.invalid/v1 could not be reached"):
        c.complete(ASK)


# --- a 200 that is not OpenAI's JSON ---------------------------------------------------------------------------------
HTML = "<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>"


@pytest.mark.parametrize(
    ("step", "detail"),
    [
        (raw(HTML, "text/html"), "got '<html><head><title>502 Bad Gateway"),
        (raw({"id": "x", "object": "chat.completion"}, "application/json"), "no 'choices'"),
        (raw({"choices": []}, "application/json"), "empty 'choices'"),
        (raw({"choices": [{"index": 0}]}, "application/json"), "no 'choices[0].message'"),
        (raw('{"choices": [', "application/json"), "JSONDecodeError"),
    ],
)
def test_body_that_is_not_openai_json_is_retried_then_fails(
    fake_openai: FakeOpenAIServer, step: Any, detail: str
) -> None:
    fake_openai.push(step, step, step)
    sleeps = Sleeps()
    with pytest.raises(BackendError) as info:
        client(sleep=sleeps).complete(ASK)
    message = str(info.value)
    assert not isinstance(info.value, BackendUnreachable)
    assert "failed after 3 attempts: MalformedResponse: the body was not the OpenAI-compatible server's JSON" in message
    assert detail in message
    assert len(fake_openai.requests) == 3 and len(sleeps) == 2


def test_html_page_then_a_real_answer(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(raw(HTML), ok(ANSWER))
    out = client().complete(ASK)
    assert out.text == ANSWER and out.transport_attempts == 2


# --- structured-output fallback --------------------------------------------------------------------------------------
def test_refused_json_schema_falls_back_to_json_object_once(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(refused(), ok(ANSWER), ok(ANSWER))
    sleeps = Sleeps()
    c = client(sleep=sleeps)
    first = c.complete(ASK)
    assert first.text == ANSWER and first.structured_output == "json_mode"
    assert first.transport_attempts == 2 and sleeps == []  # sent again at once, not after a backoff
    note = first.extra["structured_output_fallback"]
    assert note.startswith("json_schema -> json_mode: Error code: 400 - Invalid parameter: 'response_format'")
    assert fake_openai.bodies[0]["response_format"]["type"] == "json_schema"
    # a server other than OpenAI's own gets the schema beside json_object (llama_cpp.server enforces it)
    assert fake_openai.bodies[1]["response_format"] == {"type": "json_object", "schema": ANSWER_SCHEMA}
    assert c.structured_mode == "json_mode" and c.describe()["structured_output"] == "json_mode"
    second = c.complete(ASK)  # the mode sticks, and the fallback is reported once
    assert second.structured_output == "json_mode" and "structured_output_fallback" not in second.extra
    assert fake_openai.bodies[2]["response_format"] == {"type": "json_object", "schema": ANSWER_SCHEMA}
    assert len(fake_openai.requests) == 3


def test_concurrent_calls_fall_back_once(fake_openai: FakeOpenAIServer) -> None:
    def gate(body: dict[str, Any]) -> Any:
        return refused() if body["response_format"]["type"] == "json_schema" else None

    fake_openai.gate = gate  # every json_schema request is refused, whichever thread sends it
    fake_openai.responder = lambda body: body["messages"][-1]["content"]
    c = client()
    answers: list[Any] = []

    def ask(k: int) -> None:
        answers.append(c.complete(Request((Message("user", f"candidate {k}"),), TABLE)))

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(a.text for a in answers) == [f"candidate {k}" for k in range(6)]
    assert {a.structured_output for a in answers} == {"json_mode"} and c.structured_mode == "json_mode"
    assert sum("structured_output_fallback" in a.extra for a in answers) == 1  # said once, whatever the interleaving
    kinds = [body["response_format"]["type"] for body in fake_openai.bodies]
    assert kinds.count("json_object") == 6 and 1 <= kinds.count("json_schema") <= 6


def test_json_object_refused_too_falls_back_to_the_prompt(fake_openai: FakeOpenAIServer) -> None:
    no_json_object = {
        "message": "'messages' must contain the word 'json' in some form, to use 'response_format' of type "
        "'json_object'.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": None,
    }
    fake_openai.push(refused(), refused(no_json_object), ok(ANSWER))
    out = client().complete(ASK)
    assert out.text == ANSWER and out.structured_output == "prompt" and out.transport_attempts == 3
    assert out.extra["structured_output_fallback"].count(" -> ") == 2
    assert "response_format" not in fake_openai.bodies[2]


def test_schema_feature_refused_by_the_provider_falls_back(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(
        error(400, message="Invalid schema for response_format 'table': In context=('properties', 'rows'), "
              "'minItems' is not permitted.", param="response_format"),
        ok(ANSWER),
    )  # fmt: skip
    out = client().complete(ASK)
    assert out.structured_output == "json_mode" and "minItems" in out.extra["structured_output_fallback"]


def test_other_400_stays_fatal(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(
        error(400, message="max_tokens is too large: 16384. This model supports at most 4096 completion tokens."),
        ok(ANSWER),
    )
    c = client()
    with pytest.raises(BackendError, match="max_tokens is too large") as info:
        c.complete(ASK)
    assert "attempts" not in str(info.value)
    assert len(fake_openai.requests) == 1 and c.structured_mode == "json_schema"


def test_plain_text_requests_never_fall_back(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(refused())
    c = client()
    with pytest.raises(BackendError, match="response_format"):
        c.complete(Request((Message("user", "act"),), OutputSpec("direct")))
    assert c.structured_mode == "json_schema" and len(fake_openai.requests) == 1


def test_restored_mode_is_used_from_the_first_call(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(ok(ANSWER))
    c = client()
    c.structured_mode = "prompt"  # what a resumed run restores
    out = c.complete(ASK)
    assert out.structured_output == "prompt" and "structured_output_fallback" not in out.extra
    assert "response_format" not in fake_openai.bodies[0]
    with pytest.raises(BackendConfigError):
        c.structured_mode = "function_calling"


# --- keys, configuration, errors -------------------------------------------------------------------------------------
def test_401_is_auth_error_naming_variable_without_key(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "sk-proj-wrong-key-77777777"
    monkeypatch.setenv("OPENAI_API_KEY", wrong)
    fake_openai.push(ok(ANSWER))
    with pytest.raises(BackendAuthError) as info:
        client().complete(ASK)
    message = str(info.value)
    assert "OPENAI_API_KEY" in message
    assert wrong not in message and FAKE_KEY not in message
    assert "[REDACTED]" in message  # the fake echoed the whole key; it was removed
    assert len(fake_openai.requests) == 1  # never retried


def test_missing_key_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BackendConfigError, match="OPENAI_API_KEY"):
        OpenAIClient("gpt-6.2-sol", ClientOptions())
    with pytest.raises(BackendConfigError, match="OPENAI_API_KEY"):
        client(base_url="https://api.openai.com/v1")


@pytest.mark.parametrize(("provider", "temperature"), [("openai", 2.5), ("openai", -1.0), ("ollama", 3.0)])
def test_temperature_outside_the_range_is_a_user_error(
    fake_openai: FakeOpenAIServer, provider: str, temperature: float
) -> None:
    with pytest.raises(UserError, match=rf"temperature {temperature} is outside .* 0 to 2$"):
        client(provider=provider, sampling=Sampling(temperature=temperature))
    assert client(sampling=Sampling(temperature=2.0)).options.sampling.temperature == 2.0


def test_base_url_from_sdk_variable(fake_openai: FakeOpenAIServer) -> None:
    c = client()
    assert c.describe()["base_url"] == fake_openai.base_url
    fake_openai.push(ok(ANSWER))
    assert c.complete(ASK).text == ANSWER
    assert len(fake_openai.requests) == 1


def test_base_url_option_overrides_variable(fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # discard port: nothing listens
    fake_openai.push(ok(ANSWER))
    out = client(base_url=fake_openai.base_url).complete(ASK)
    assert out.text == ANSWER


def test_compatible_server_without_key_gets_placeholder(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    fake_openai.api_key = None  # a vLLM / llama.cpp server started without --api-key
    fake_openai.push(ok(ANSWER))
    c = client(model="Qwen/Qwen3-8B")
    assert c.describe()["key_source"] == "placeholder"
    assert c.complete(ASK).text == ANSWER
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-no-key-required"


def test_describe_never_holds_the_key(fake_openai: FakeOpenAIServer) -> None:
    d = client().describe()
    assert FAKE_KEY not in json.dumps(d)
    assert d["provider"] == "openai" and d["model"] == "gpt-6.2-sol" and d["is_llm"] is True
    assert d["api"] == "chat.completions" and d["structured_output"] == "json_schema"
    assert d["key_source"] == "OPENAI_API_KEY" and d["token_parameter"] == "max_tokens"
    assert d["retry"] == FAST.resolved(local=True).to_dict() and d["local"] is True
    assert d["sampling"] == {"temperature": None, "max_output_tokens": 16384}


def test_bad_model() -> None:
    with pytest.raises(BackendConfigError, match="model"):
        OllamaClient(" ", ClientOptions())


# --- Ollama ----------------------------------------------------------------------------------------------------------
def test_ollama(fake_ollama: FakeOpenAIServer) -> None:
    fake_ollama.push(ok(ANSWER, 40, 12))
    c = client("llama3.1:8b", provider="ollama")
    assert (c.provider, c.model) == ("ollama", "llama3.1:8b")
    out = c.complete(ASK)
    assert (out.text, out.input_tokens, out.output_tokens, out.model) == (ANSWER, 40, 12, "llama3.1:8b")
    (req,) = fake_ollama.requests
    assert req.path == CHAT_PATH
    assert req.headers["authorization"] == "Bearer ollama"
    assert req.body["response_format"]["json_schema"]["schema"] == _strict_schema(ANSWER_SCHEMA)
    assert req.body["max_tokens"] == Sampling().max_output_tokens
    assert "max_completion_tokens" not in req.body
    d = c.describe()
    assert d["base_url"] == fake_ollama.base_url and d["key_source"] == "placeholder"


def test_ollama_retries_like_the_others(fake_ollama: FakeOpenAIServer) -> None:
    fake_ollama.push(error(503, retry_after=0.03), ok(ANSWER))
    sleeps = Sleeps()
    out = client("llama3.1:8b", provider="ollama", sleep=sleeps).complete(ASK)
    assert out.transport_attempts == 2
    assert sleeps == [pytest.approx(0.03)]


def test_ollama_base_url_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    assert client("llama3.1:8b", provider="ollama").base_url == "http://localhost:11434/v1"
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434/")
    assert client("llama3.1:8b", provider="ollama").base_url == "http://gpu-box:11434/v1"
    assert client("llama3.1:8b", provider="ollama", base_url="http://x:1/v1").base_url == "http://x:1/v1"


def test_server_answers(fake_ollama: FakeOpenAIServer) -> None:
    assert server_answers(fake_ollama.base_url) is True
    assert fake_ollama.requests[-1].method == "GET" and fake_ollama.requests[-1].path == MODELS_PATH
    assert server_answers(fake_ollama.url + "/nowhere") is True  # a 404 is an answer too
    assert server_answers("http://127.0.0.1:9/v1", timeout_s=0.5) is False
    with SilentServer() as silent:
        assert server_answers(silent.url + "/v1", timeout_s=0.3) is False
        # the probe gave up by itself (its 0.3 s timeout): it closed its connection while the server still held it
        assert silent.connections == 1 and silent.closed_by_client() == 1
