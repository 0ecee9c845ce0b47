"""The transport helpers every SDK backend shares: Retry-After, status classification, the retry loop and its timing."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import pytest

from llm_policy_gen.backends import keys
from llm_policy_gen.backends.base import (
    FaultKind,
    RetryPolicy,
    call_with_retries,
    http_status_fault,
    retry_after_seconds,
    timed_call_with_retries,
)
from llm_policy_gen.errors import BackendAuthError, BackendError

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
    started = time.perf_counter()
    result, attempts, latency = timed_call_with_retries(fn, classify, policy, describe="p:m", sleep=time.sleep)
    elapsed = time.perf_counter() - started
    assert (result, attempts) == ("done", 2)
    assert 0.05 <= latency <= elapsed  # the wait between attempts is part of the call's wall time


def test_timed_call_raises_like_the_plain_loop() -> None:
    with pytest.raises(BackendError, match="after 3 attempts"):
        timed_call_with_retries(Script(*[Fault("retry")] * 3), classify, POLICY, describe="p:m", sleep=Sleeps())
