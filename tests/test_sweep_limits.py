"""The sweep's shared limits: call slots per provider, the rate limit, the budget with calls in flight, what a dead
attempt held, and the same object served to other processes by a manager."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm_policy_gen.clients.usage import Budget
from llm_policy_gen.sweep.limits import SharedBudget, SharedLimiter, SweepLimits, managed_limits, provider_key


def peak_in_flight(limits: SweepLimits, key: str, holders: int, calls: int, seconds: float = 0.05) -> int:
    """Run ``calls`` calls of ``seconds`` each from ``holders`` threads; the most that were ever in flight."""
    lock, now, peak = threading.Lock(), [0], [0]

    def call(k: int) -> None:
        with SharedLimiter(limits, key, f"run{k % holders}").slot():
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            time.sleep(seconds)
            with lock:
                now[0] -= 1

    with ThreadPoolExecutor(max_workers=calls) as pool:
        list(pool.map(call, range(calls)))
    return peak[0]


def test_calls_in_flight_are_bounded_per_provider_across_holders() -> None:
    limits = SweepLimits(max_concurrent=3)
    assert peak_in_flight(limits, "openai", holders=4, calls=16) == 3
    assert limits.report()["peak_calls_in_flight"] == {"openai": 3}
    # Another provider has its own slots.
    assert all(limits.try_acquire("openai", "a") for _ in range(3)) and not limits.try_acquire("openai", "b")
    assert all(limits.try_acquire("gemini", "a") for _ in range(3))


def test_a_dead_attempt_gives_back_what_it_held() -> None:
    limits = SweepLimits(max_concurrent=2, budget_usd=1.0)
    assert limits.try_acquire("openai", "run#1") and limits.try_acquire("openai", "run#1")
    assert not limits.try_acquire("openai", "run#2")
    assert limits.reserve("run#1", 0.6) and not limits.reserve("run#2", 0.6)
    limits.forget("run#1")
    assert limits.try_acquire("openai", "run#2") and limits.reserve("run#2", 0.6)


def test_the_budget_counts_calls_in_flight_and_refunds() -> None:
    limits = SweepLimits(budget_usd=1.0, spent_usd=0.25)
    assert limits.reserve("a", 0.5)
    assert not limits.reserve("b", 0.5)  # 0.25 spent + 0.5 in flight + 0.5 > 1.0
    assert limits.settle("a", 0.5, 0.125) == pytest.approx(0.375)
    assert limits.reserve("b", 0.5) and not limits.reserve("c", 0.25)
    limits.refund(0.125)  # a resumed run will count a recorded call again
    assert limits.reserve("c", 0.25)
    report = limits.report()
    assert report["spent_usd"] == pytest.approx(0.25) and report["calls_refused_by_budget"] == 2
    assert SweepLimits().reserve("x", 1e9)  # no ceiling


def test_shared_budget_plugs_into_the_session_seam() -> None:
    limits = SweepLimits(budget_usd=1.0)
    a, b = SharedBudget(limits, "a#1"), SharedBudget(limits, "b#1")
    assert isinstance(a, Budget)
    assert a.reserve(0.75) and not b.reserve(0.5)
    a.settle(0.75, 0.5)
    assert a.spent == pytest.approx(0.5) and b.reserve(0.5)
    b.settle(0.5, 0.5)
    assert b.spent == pytest.approx(1.0) and not a.reserve(0.01)


def test_the_rate_limit_spaces_call_starts_per_provider() -> None:
    limits = SweepLimits(max_concurrent=8, rpm=600)  # one start every 0.1 s
    delays = [limits.start_delay("openai") for _ in range(4)]
    assert delays[0] == pytest.approx(0.0, abs=0.01)
    assert [round(b - a, 2) for a, b in zip(delays, delays[1:], strict=False)] == [0.1, 0.1, 0.1]
    assert limits.start_delay("gemini") == pytest.approx(0.0, abs=0.01)
    t0 = time.monotonic()
    assert peak_in_flight(SweepLimits(max_concurrent=8, rpm=1200), "x", holders=2, calls=4, seconds=0.0) >= 1
    assert time.monotonic() - t0 >= 3 * 0.05 * 0.9


def test_a_manager_serves_the_limits_to_other_processes() -> None:
    with managed_limits(max_concurrent=1, budget_usd=0.5) as proxy:
        assert proxy.try_acquire("openai", "a") and not proxy.try_acquire("openai", "b")
        proxy.release("openai", "a")
        assert proxy.try_acquire("openai", "b")
        assert proxy.reserve("b", 0.5) and not proxy.reserve("c", 0.01)
        assert proxy.settle("b", 0.5, 0.25) == pytest.approx(0.25)
        assert proxy.report()["spent_usd"] == pytest.approx(0.25)


def test_provider_keys_separate_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert provider_key("openai:gpt-4.1-mini") == provider_key("openai:gpt-4.1") == "openai"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert provider_key("openai:gpt-4.1") == "openai http://127.0.0.1:8000/v1"
    assert provider_key("openai", "http://127.0.0.1:9000/v1") == "openai http://127.0.0.1:9000/v1"
    assert provider_key("ollama:llama3.1:8b") == "ollama"
