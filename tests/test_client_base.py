"""The transport helpers every SDK client shares.

``clients/retry.py``: Retry-After, status classification, the retry loop and its timing; ``clients/faults.py``,
``clients/structured.py`` and ``clients/sdk.py``: the fault helpers, the structured-output fallback and the request
helpers; ``clients/profiles.py``: the provider profiles.
"""

from __future__ import annotations

import random
import socket
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import openai
import pytest
from fakes.loopback import ANSWER_SCHEMA, PROXY_VARIABLES, SilentServer, clear_env

from llm_policy_gen.backends import all_profiles, get_profile
from llm_policy_gen.clients import keys
from llm_policy_gen.clients.anthropic import AnthropicClient
from llm_policy_gen.clients.base import STRUCTURED_MODES, ClientOptions, Message, OutputSpec, Request, Sampling
from llm_policy_gen.clients.faults import unreachable_reason
from llm_policy_gen.clients.gemini import GeminiClient
from llm_policy_gen.clients.openai import OpenAIClient
from llm_policy_gen.clients.retry import (
    FaultKind,
    RetryPolicy,
    call_with_retries,
    http_status_fault,
    retry_after_seconds,
    timed_call_with_retries,
)
from llm_policy_gen.clients.sdk import public_url, split_system
from llm_policy_gen.clients.structured import StructuredOutput, schema_name, structured_refusal
from llm_policy_gen.errors import (
    BackendAuthError,
    BackendConfigError,
    BackendError,
    BackendUnreachable,
    UserError,
)

POLICY = RetryPolicy(max_retries=2, initial_delay_s=0.5, max_delay_s=4.0, jitter=0.0)


def http_date(offset_s: float) -> str:
    """An HTTP date ``offset_s`` seconds from now (whole seconds, GMT)."""
    return format_datetime(datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=offset_s), usegmt=True)


class Sleeps(list[float]):
    """Records the waits the retry loop asks for (instead of sleeping)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class Script:
    """A callable that raises the scripted exceptions in turn, then returns ``"done"``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


class Fault(Exception):
    """An exception that says how it should be classified."""

    def __init__(self, kind: FaultKind, retry_after: float | None = None, text: str = "") -> None:
        super().__init__(text or kind)
        self.kind = kind
        self.retry_after = retry_after


def classify(exc: BaseException) -> tuple[FaultKind, float | None]:
    if isinstance(exc, Fault):
        return exc.kind, exc.retry_after
    return "fatal", None


# --- retry_after_seconds ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": " 2 "}, 2.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer header wins
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),  # an unusable one is skipped
        ({"retry-after-ms": "-5", "retry-after": "2"}, 2.0),
        ({"retry-after-ms": "", "retry-after": "4"}, 4.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: go now
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, 0.0),
    ],
)
def test_retry_after_forms(headers: dict[str, str], expected: float) -> None:
    assert retry_after_seconds(headers) == pytest.approx(expected)


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"x-request-id": "req_1"},
        {"retry-after": ""},
        {"retry-after": "soon"},
        {"retry-after": "-5"},
        {"retry-after": "inf"},
        {"retry-after": "nan"},
        {"retry-after-ms": "-1"},
        {"retry-after-ms": "inf"},
        {"retry-after": "Wed, 99 Oct 2015 07:28:00 GMT"},
    ],
)
def test_unusable_retry_after_is_none(headers: dict[str, str] | None) -> None:
    assert retry_after_seconds(headers) is None


def test_retry_after_http_date_in_the_future() -> None:
    assert 28 <= (retry_after_seconds({"retry-after": http_date(30)}) or 0) <= 30


def test_retry_after_names_match_any_case_with_sdk_headers() -> None:
    assert retry_after_seconds(httpx2.Headers({"Retry-After": "7"})) == 7.0
    assert retry_after_seconds(httpx2.Headers({"Retry-After-Ms": "20", "Retry-After": "7"})) == pytest.approx(0.02)


# --- http_status_fault -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, 599])
def test_retryable_statuses_carry_the_server_wait(status: int) -> None:
    assert http_status_fault(status, {"retry-after": "2"}) == ("retry", 2.0)
    assert http_status_fault(status) == ("retry", None)  # no header: the policy's backoff


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_auth_faults(status: int) -> None:
    assert http_status_fault(status, {"retry-after": "2"}) == ("auth", None)


@pytest.mark.parametrize("status", [400, 402, 404, 405, 413, 418, 422])
def test_other_client_errors_are_fatal(status: int) -> None:
    assert http_status_fault(status, {"retry-after": "2"}) == ("fatal", None)


# --- RetryPolicy.delay -----------------------------------------------------------------------------------------------
def test_delay_doubles_up_to_the_cap_without_jitter() -> None:
    assert [POLICY.delay(k) for k in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_delay_with_jitter_stays_within_bounds() -> None:
    policy = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0, jitter=0.5)
    rng = random.Random(7)
    for attempt in range(6):
        base = min(8.0, 2.0**attempt)
        waits = [policy.delay(attempt, rng=rng) for _ in range(200)]
        assert all(base * 0.5 <= w <= base for w in waits)
        assert max(waits) - min(waits) > base * 0.3  # the jitter really spreads the waits


def test_server_wait_replaces_the_backoff_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0, jitter=0.5)
    assert policy.delay(3, retry_after_s=0.0) == 0.0
    assert policy.delay(0, retry_after_s=5.0) == 5.0
    assert policy.delay(0, retry_after_s=60.0) == 8.0
    assert policy.delay(0, retry_after_s=-1.0, rng=random.Random(1)) <= 1.0  # a negative wait is ignored


# --- call_with_retries -----------------------------------------------------------------------------------------------
def test_first_success_needs_no_wait() -> None:
    sleeps = Sleeps()
    assert call_with_retries(Script(), classify, POLICY, describe="p:m", sleep=sleeps) == ("done", 1)
    assert sleeps == []


def test_retries_wait_for_the_server_then_back_off() -> None:
    fn, sleeps = Script(Fault("retry", 0.25), Fault("retry")), Sleeps()
    assert call_with_retries(fn, classify, POLICY, describe="p:m", sleep=sleeps) == ("done", 3)
    assert sleeps == [0.25, 1.0]  # Retry-After first, then the second backoff step
    assert fn.calls == 3


def test_auth_fault_stops_at_once_and_names_the_variable() -> None:
    fn, sleeps = Script(Fault("auth", text="401 invalid key")), Sleeps()
    with pytest.raises(BackendAuthError) as info:
        call_with_retries(fn, classify, POLICY, describe="openai:gpt", key_variable="OPENAI_API_KEY", sleep=sleeps)
    message = str(info.value)
    assert message == ("openai:gpt refused the credentials (Fault: 401 invalid key); set OPENAI_API_KEY to a valid key")
    assert fn.calls == 1 and sleeps == []
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no SDK traceback chained


def test_auth_fault_without_a_variable_gives_no_hint() -> None:
    with pytest.raises(BackendAuthError, match=r"refused the credentials \(Fault: auth\)$"):
        call_with_retries(Script(Fault("auth")), classify, POLICY, describe="ollama:m", sleep=Sleeps())


def test_fatal_fault_is_not_retried() -> None:
    fn, sleeps = Script(Fault("fatal", text="400 bad schema")), Sleeps()
    with pytest.raises(BackendError) as info:
        call_with_retries(fn, classify, POLICY, describe="p:m", sleep=sleeps)
    assert str(info.value) == "p:m failed: Fault: 400 bad schema"
    assert not isinstance(info.value, BackendAuthError)
    assert fn.calls == 1 and sleeps == []


def test_unknown_exception_is_fatal_for_this_call() -> None:
    with pytest.raises(BackendError, match=r"^p:m failed: KeyError: 'choices'$"):
        call_with_retries(Script(KeyError("choices")), classify, POLICY, describe="p:m", sleep=Sleeps())


def test_spent_retries_say_how_many_attempts() -> None:
    fn, sleeps = Script(*[Fault("retry", text="503 overloaded")] * 3), Sleeps()
    with pytest.raises(BackendError) as info:
        call_with_retries(fn, classify, POLICY, describe="p:m", sleep=sleeps)
    assert str(info.value) == "p:m failed after 3 attempts: Fault: 503 overloaded"
    assert fn.calls == 3 and sleeps == [0.5, 1.0]


def test_no_retries_means_one_attempt() -> None:
    policy = RetryPolicy(max_retries=0)
    with pytest.raises(BackendError, match="after 1 attempt: "):
        call_with_retries(Script(Fault("retry")), classify, policy, describe="p:m", sleep=Sleeps())


def test_long_error_text_is_one_short_line() -> None:
    text = "upstream said:\n" + " ".join(f"word{i}" for i in range(200))
    with pytest.raises(BackendError) as info:
        call_with_retries(Script(Fault("fatal", text=text)), classify, POLICY, describe="p:m", sleep=Sleeps())
    reason = str(info.value).removeprefix("p:m failed: ")
    assert "\n" not in reason and reason.startswith("Fault: upstream said: word0 word1")
    assert reason.endswith(" ...") and len(reason) <= 240 + len(" ...")
    assert reason.removesuffix(" ...").split()[-1].startswith("word")  # cut between words


def test_no_key_reaches_an_error_message(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-proj-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    echo = f"Incorrect API key provided: {key}."
    cases: list[tuple[FaultKind, type[Exception]]] = [
        ("auth", BackendAuthError),
        ("fatal", BackendError),
        ("retry", BackendError),
    ]
    for kind, error_type in cases:
        fn = Script(*[Fault(kind, text=echo)] * 3)
        with pytest.raises(error_type) as info:
            call_with_retries(
                fn,
                classify,
                POLICY,
                describe="openai:m",
                key_variable="OPENAI_API_KEY",
                sleep=Sleeps(),
                redact=keys.redact,
            )
        assert key not in str(info.value) and "[REDACTED]" in str(info.value)


# --- timed_call_with_retries -----------------------------------------------------------------------------------------
def test_timed_call_counts_attempts_and_waits() -> None:
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.05, jitter=0.0)
    fn = Script(Fault("retry"))
    now = [100.0]  # an injected clock that only the injected sleep moves: the attempts themselves take no time

    def sleep(seconds: float) -> None:
        now[0] += seconds

    result, attempts, latency = timed_call_with_retries(fn, classify, policy, describe="p:m", sleep=sleep,
                                                        clock=lambda: now[0])
    assert (result, attempts) == ("done", 2)
    assert latency == pytest.approx(0.05)  # the wait between attempts is part of the call's wall time


def test_timed_call_raises_like_the_plain_loop() -> None:
    with pytest.raises(BackendError, match="after 3 attempts"):
        timed_call_with_retries(Script(*[Fault("retry")] * 3), classify, POLICY, describe="p:m", sleep=Sleeps())


# --- the "unreachable" fault kind ------------------------------------------------------------------------------------
def test_no_attempt_reaching_the_server_is_unreachable() -> None:
    fn, sleeps = Script(*[Fault("unreachable", text="ConnectError: refused")] * 3), Sleeps()
    with pytest.raises(BackendUnreachable) as info:
        call_with_retries(fn, classify, POLICY, describe="p:m at http://h/v1", sleep=sleeps)
    assert str(info.value) == "p:m at http://h/v1 could not be reached after 3 attempts: Fault: ConnectError: refused"
    assert fn.calls == 3 and sleeps == [0.5, 1.0]  # retried like any transient fault


def test_one_answer_makes_it_a_plain_backend_error() -> None:
    fn = Script(Fault("retry", text="503"), Fault("unreachable"), Fault("unreachable"))
    with pytest.raises(BackendError) as info:
        call_with_retries(fn, classify, POLICY, describe="p:m", sleep=Sleeps())
    assert not isinstance(info.value, BackendUnreachable)
    assert "failed after 3 attempts" in str(info.value)


def test_unreachable_then_success() -> None:
    assert call_with_retries(Script(Fault("unreachable")), classify, POLICY, describe="p:m", sleep=Sleeps()) == (
        "done",
        2,
    )


# --- faults: unreachable_reason --------------------------------------------------------------------------------------
def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` as an SDK raises it: ``raise outer from inner``."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:
        return exc


REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ConnectError("[Errno 111] Connection refused"), "ConnectError: [Errno 111] Connection refused"),
        (
            _raised_from(openai.APIConnectionError(request=REQUEST), httpx2.ConnectError("[Errno -2] Name unknown")),
            "ConnectError: [Errno -2] Name unknown",
        ),
        (_raised_from(openai.APITimeoutError(REQUEST), httpx2.ReadTimeout("timed out")), "no answer within 0.5 s"),
        (httpx2.ConnectTimeout("timed out"), "no answer within 0.5 s (ConnectTimeout)"),
        (socket.gaierror(-2, "Name or service not known"), "gaierror: [Errno -2] Name or service not known"),
        (ConnectionRefusedError(111, "Connection refused"), "ConnectionRefusedError"),
    ],
)
def test_unreachable_reason_names_the_underlying_error(exc: BaseException, expected: str) -> None:
    reason = unreachable_reason(exc, 0.5)
    assert reason is not None and reason.startswith(expected)


@pytest.mark.parametrize(
    "exc",
    [
        httpx2.RemoteProtocolError("Server disconnected without sending a response."),  # it was reached
        openai.APIConnectionError(request=REQUEST),  # no cause: nothing says the server was never reached
        ValueError("bug"),
    ],
)
def test_other_faults_are_not_unreachable(exc: BaseException) -> None:
    assert unreachable_reason(exc, 0.5) is None


# --- structured: structured_refusal ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        "output_config.format: the schema is not supported by this model",
        'Invalid JSON payload received. Unknown name "responseJsonSchema" at \'generation_config\': Cannot find field.',
        "Invalid schema for response_format 'table': 'minItems' is not permitted.",
        "Invalid JSON payload received. Unknown name \"const\" at 'generation_config.response_json_schema.items'",
        "tool_choice: forced tool use is not supported with extended thinking",
        "Error code: 400 - {'detail': [{'loc': ['body', 'response_format'], 'msg': 'extra fields not permitted'}]}",
    ],
)
def test_structured_output_refusals_are_recognised(text: str) -> None:
    reason = structured_refusal(text)
    assert reason is not None and len(reason) <= 160


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
        "Invalid JSON payload received.",
        "messages: roles must alternate between user and assistant",
    ],
)
def test_other_bad_requests_are_not_structured_refusals(text: str | None) -> None:
    assert structured_refusal(text) is None


# --- structured: StructuredOutput ------------------------------------------------------------------------------------
class Refused(Exception):
    pass


def refusal(exc: BaseException) -> str | None:
    return "no json_schema here" if isinstance(exc, Refused) else None


def test_fallback_steps_once_and_reports_once() -> None:
    modes = StructuredOutput(STRUCTURED_MODES)
    seen: list[str] = []

    def attempt(mode: str) -> str:
        seen.append(mode)
        if mode == "json_schema":
            raise Refused()
        return f"answered in {mode}"

    assert modes.send(attempt, refusal) == "answered in json_mode"
    assert seen == ["json_schema", "json_mode"] and modes.mode == "json_mode"
    assert modes.take_notes() == "json_schema -> json_mode: no json_schema here"
    assert modes.take_notes() is None  # said once
    assert modes.send(attempt, refusal) == "answered in json_mode"  # the mode sticks
    assert seen[-1] == "json_mode" and len(seen) == 3


def test_fallback_goes_on_to_prompt_then_gives_up() -> None:
    modes = StructuredOutput(("json_schema", "json_mode", "prompt"))
    assert modes.send(lambda mode: mode if mode == "prompt" else (_ for _ in ()).throw(Refused()), refusal) == "prompt"
    assert modes.take_notes() == (
        "json_schema -> json_mode: no json_schema here; json_mode -> prompt: no json_schema here"
    )
    one = StructuredOutput(("json_schema",))  # nothing to fall back to: the refusal is raised
    with pytest.raises(Refused):
        one.send(lambda mode: (_ for _ in ()).throw(Refused()), refusal)


def test_other_errors_pass_through_without_fallback() -> None:
    modes = StructuredOutput(STRUCTURED_MODES)
    with pytest.raises(KeyError):
        modes.send(lambda mode: (_ for _ in ()).throw(KeyError("x")), refusal)
    assert modes.mode == "json_schema" and modes.take_notes() is None


def test_concurrent_refusals_step_down_once() -> None:
    modes = StructuredOutput(STRUCTURED_MODES)
    barrier = threading.Barrier(8)
    results: list[str] = []

    def attempt(mode: str) -> str:
        if mode == "json_schema":
            barrier.wait(timeout=5)  # all eight are refused in json_schema at once
            raise Refused()
        return mode

    threads = [threading.Thread(target=lambda: results.append(modes.send(attempt, refusal))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    assert results == ["json_mode"] * 8
    assert modes.take_notes() == "json_schema -> json_mode: no json_schema here"


def test_mode_is_settable_within_the_offered_modes() -> None:
    modes = StructuredOutput(("json_schema", "prompt"))
    modes.mode = "prompt"
    assert modes.mode == "prompt" and modes.take_notes() is None  # a restored mode is not a new fallback
    with pytest.raises(BackendConfigError, match="json_mode"):
        modes.mode = "json_mode"


# --- sdk: small helpers ----------------------------------------------------------------------------------------------
def test_public_url_drops_userinfo_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-secret-123456")
    assert public_url("https://user:pw@proxy.example/v1") == "https://proxy.example/v1"
    assert public_url("https://h/v1?key=sk-proj-secret-123456") == "https://h/v1?key=[REDACTED]"


def test_schema_name_and_split_system() -> None:
    assert schema_name("table edits/v2") == "table_edits_v2" and schema_name("") == "answer"
    assert len(schema_name("x" * 100)) == 64
    system, turns = split_system((Message("system", "a"), Message("user", "u"), Message("system", "b")))
    assert system == "a\n\nb" and turns == [Message("user", "u")]
    assert split_system((Message("user", "u"),))[0] is None
    with pytest.raises(ValueError, match="user message"):
        split_system((Message("system", "only"),))


# --- profiles --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "high"),
    [("openai", 2.0), ("openai-compatible", 2.0), ("ollama", 2.0), ("anthropic", 1.0), ("gemini", 2.0)],
)
def test_temperature_ranges(name: str, high: float) -> None:
    profile = get_profile(name)
    assert profile.temperature_range == (0.0, high)
    for ok in (None, 0.0, high / 2, high):
        profile.check_sampling(Sampling(temperature=ok))
    for bad in (-0.1, high + 0.1, float("nan"), float("inf")):
        with pytest.raises(UserError) as info:
            profile.check_sampling(Sampling(temperature=bad))
        assert isinstance(info.value, BackendConfigError)
        message = str(info.value)
        assert "\n" not in message and repr(bad) in message and f"0 to {high:g}" in message


def test_profiles_name_their_token_parameter_and_modes() -> None:
    parameters = {p.token_parameter for p in all_profiles().values()}
    assert parameters == {"max_completion_tokens", "max_tokens", "max_output_tokens"}
    assert all(p.structured_modes == STRUCTURED_MODES for p in all_profiles().values())
    with pytest.raises(KeyError, match="known: .*openai"):
        get_profile("mistral")


# --- every SDK client: a server that accepts the connection and never answers ----------------------------------------
@pytest.mark.parametrize(
    ("client_type", "model", "key_variable"),
    [
        (OpenAIClient, "gpt-6.2-sol", "OPENAI_API_KEY"),
        (AnthropicClient, "claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        (GeminiClient, "gemini-3.8-flash", "GEMINI_API_KEY"),
    ],
)
def test_silent_server_costs_at_most_timeout_per_attempt(
    monkeypatch: pytest.MonkeyPatch, client_type: type, model: str, key_variable: str
) -> None:
    clear_env(monkeypatch, PROXY_VARIABLES)
    monkeypatch.setenv(key_variable, "fake-key-0123456789")
    # retry_timeouts as for a remote server (an OpenAI-compatible server on loopback would not retry a timeout)
    policy = RetryPolicy(max_retries=1, initial_delay_s=0.0, jitter=0.0, timeout_s=0.5, retry_timeouts=True)
    request = Request((Message("user", "Propose a table."),), OutputSpec("table", ANSWER_SCHEMA))
    with SilentServer() as silent:
        client = client_type(model, ClientOptions(base_url=silent.url, retry=policy), sleep=Sleeps())
        with pytest.raises(BackendUnreachable) as info:
            client.complete(request)
        # each attempt gave up by itself and closed its connection while the server, which never answers, still held
        # it: the per-attempt timeout works (an SDK's default of minutes would not have returned yet)
        assert silent.connections == 2 and silent.closed_by_client() == 2
    message = str(info.value)
    assert message.startswith(f"{client.provider}:{model} at {silent.url} could not be reached after 2 attempts")
    assert "TimedOut: no answer within 0.5 s" in message
