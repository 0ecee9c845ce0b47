"""The LLM session with a scripted in-process client: concurrent candidates, repairs, the budget with calls in flight,
cached-token pricing, truncation and refusal in the transcript, recorded calls, and key scrubbing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_policy_gen.clients.base import Completion, Message, Request
from llm_policy_gen.clients.session import LLMSession
from llm_policy_gen.clients.transcript import RecordedCalls, Transcript
from llm_policy_gen.clients.usage import Budget
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import BackendError
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.table import TableFormat
from llm_policy_gen.storage.runlog import read_jsonl

SPEC = get_spec("FrozenLake-v1")
CTX = FormatContext(SPEC.observation_discretizer(), SPEC.action_discretizer(), np.zeros(16, dtype=np.int64),
                    Target("action", n_actions=4), SPEC)
GOOD = json.dumps({"rationale": "r", "rows": [{"state": s, "action": s % 4} for s in range(16)]})
BAD = json.dumps({"rationale": "r", "rows": [{"state": 99, "action": 0}]})
MESSAGES = [Message("system", "sys"), Message("user", "make a table")]
#: How long a test waits for an event that should come at once; only a broken session ever waits this long.
PATIENCE_S = 60.0


class Scripted:
    """An LLMClient whose answers come from ``answer(request) -> Completion`` (thread-safe, records requests)."""

    provider = "anthropic"
    model = "claude-haiku-4-5"
    is_llm = True

    def __init__(self, answer: Any, together: int = 1, hold: threading.Event | None = None) -> None:
        """``together=N``: each call answers only once N calls are in flight at once (a barrier: overlap is shown
        by events, not by wall time; calls that never overlap break it). ``hold``: calls wait until it is set."""
        self.answer = answer
        self.requests: list[Request] = []
        self.lock = threading.Condition()
        self.in_flight = 0
        self.max_in_flight = 0
        self.barrier = threading.Barrier(together, timeout=PATIENCE_S)
        self.broken = False
        self.hold = hold

    def wait_in_flight(self, n: int) -> bool:
        """Wait until ``n`` calls are in flight at once."""
        with self.lock:
            return self.lock.wait_for(lambda: self.in_flight >= n, timeout=PATIENCE_S)

    def complete(self, request: Request) -> Completion:
        with self.lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.lock.notify_all()
        try:
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                self.broken = True
            if self.hold is not None:
                self.hold.wait(PATIENCE_S)
            result = self.answer(request)
            if isinstance(result, BaseException):
                raise result
            return result  # type: ignore[no-any-return]
        finally:
            with self.lock:
                self.in_flight -= 1

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}


def session(client: Scripted, tmp_path: Path, **kw: Any) -> LLMSession:
    return LLMSession(client, Transcript(tmp_path / "t.jsonl", {"env_id": "FrozenLake-v1"}), **kw)


def ask(s: LLMSession, k: int, iteration: int = 1) -> list[Any]:
    return s.sample(MESSAGES, TableFormat(), CTX, iteration=iteration, k=k, repair=lambda e: "fix: " + "; ".join(e))


def test_k_candidates_are_asked_concurrently_and_keyed(tmp_path):
    client = Scripted(lambda r: Completion(GOOD, 100, 50), together=4)  # each answers once all 4 are in flight
    s = session(client, tmp_path)
    answers = ask(s, 4)
    assert client.max_in_flight == 4 and not client.broken
    assert [a.candidate for a in answers] == [1, 2, 3, 4] and all(a.ok for a in answers)
    assert sorted(r.key.candidate for r in client.requests) == [1, 2, 3, 4]
    lines = read_jsonl(tmp_path / "t.jsonl")
    assert sorted((t["iteration"], t["candidate"], t["attempt"]) for t in lines) == [(1, c, 1) for c in (1, 2, 3, 4)]
    assert all(t["env_id"] == "FrozenLake-v1" for t in lines)


class CountingLimiter:
    """A CallLimiter with no bound that counts the slots held at once; ``second`` is set once two are held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = self.peak = 0
        self.second = threading.Event()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self.lock:
            self.held += 1
            self.peak = max(self.peak, self.held)
            if self.held >= 2:
                self.second.set()
        try:
            yield
        finally:
            with self.lock:
                self.held -= 1


def test_a_client_serving_one_call_at_a_time_holds_one_slot_of_a_shared_limit(tmp_path):
    """A local server's client serves one call at a time (``serves_at_once``): the session asks its candidates one
    after another, and none waits in the client while holding a slot of the limit it shares with other runs."""
    limiter = CountingLimiter()

    def answer(r: Request) -> Completion:
        limiter.second.wait(1.0)  # a session that started more candidates than the client serves shows it here
        return Completion(GOOD, 10, 10)

    client = Scripted(answer)
    client.serves_at_once = 1  # type: ignore[attr-defined]  # as SDKClient sets it for a server on this machine
    s = session(client, tmp_path, limiter=limiter, max_concurrent=8)
    assert s.max_concurrent == 1
    answers = ask(s, 3)
    assert all(a.ok for a in answers) and limiter.peak == 1 and client.max_in_flight == 1


def test_each_candidate_is_repaired_on_its_own(tmp_path):
    def answer(r: Request) -> Completion:
        return Completion(BAD if r.key.candidate == 2 and r.key.attempt == 1 else GOOD, 10, 10)

    s = session(Scripted(answer), tmp_path, repair_attempts=1)
    answers = ask(s, 3)
    assert all(a.ok for a in answers)
    keys = sorted((t["candidate"], t["attempt"], t["valid"]) for t in read_jsonl(tmp_path / "t.jsonl"))
    assert keys == [(1, 1, True), (2, 1, False), (2, 2, True), (3, 1, True)]
    repaired = next(t for t in read_jsonl(tmp_path / "t.jsonl") if t["attempt"] == 2)
    assert repaired["messages"][-1]["content"].startswith("fix: rows[0]: state 99 out of range")


def test_the_budget_counts_calls_in_flight(tmp_path, monkeypatch):
    prices = tmp_path / "p.toml"
    prices.write_text('[anthropic]\n"claude-haiku-4-5" = { input = 0.0, output = 1.0 }\n')
    monkeypatch.setenv("LLM_POLICY_GEN_PRICES", str(prices))
    # each call is estimated at 2,000 output tokens = 0.002 USD (and costs that); 0.005 lets two start, not three
    release = threading.Event()
    client = Scripted(lambda r: Completion(GOOD, 10, 2000), hold=release)
    s = session(client, tmp_path, budget=Budget(0.005))
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(ask, s, 4)
        assert client.wait_in_flight(2)
        # nothing is spent yet: only the two calls in flight keep a third from starting
        assert s.budget.spent == 0 and s.budget.reserved == pytest.approx(0.004)
        assert not s.budget.reserve(0.002)
        release.set()
        answers = asked.result(timeout=PATIENCE_S)
    assert len(client.requests) == 2
    assert sum(a.ok for a in answers) == 2 and sum(a.stop == "budget reached" for a in answers) == 2
    assert s.budget.spent == pytest.approx(0.004) and s.budget.reserved == 0


def test_cached_prompt_tokens_are_priced_as_cache_reads(tmp_path):
    # claude-haiku-4-5 in the shipped table: input 1.00, cache_read 0.10, cache_write 1.25, output 5.00 per Mtok
    client = Scripted(lambda r: Completion(GOOD, 1_000_000, 0, cached_input_tokens=800_000,
                                           cache_write_tokens=100_000))
    s = session(client, tmp_path)
    ask(s, 1)
    (line,) = read_jsonl(tmp_path / "t.jsonl")
    assert line["cost_usd"] == pytest.approx(0.1 * 1.0 + 0.8 * 0.10 + 0.1 * 1.25)
    assert line["cached_input_tokens"] == 800_000 and line["cache_write_tokens"] == 100_000
    assert s.usage.cached_input_tokens == 800_000


def test_truncation_and_refusal_reach_the_transcript(tmp_path):
    answers = iter([Completion(GOOD[:40], 10, 10, finish_reason="max_tokens", truncated=True),
                    Completion("", 10, 0, finish_reason="refusal", refusal="I can't help with that")])
    s = session(Scripted(lambda r: next(answers)), tmp_path, repair_attempts=1)
    (a,) = ask(s, 1)
    assert not a.ok
    first, second = read_jsonl(tmp_path / "t.jsonl")
    assert first["truncated"] is True and first["finish_reason"] == "max_tokens"
    assert any("output-token limit" in e for e in first["errors"])
    assert second["refusal"] == "I can't help with that" and second["valid"] is False


def test_a_failed_call_is_recorded_as_a_failure(tmp_path):
    s = session(Scripted(lambda r: BackendError("anthropic:m failed after 3 attempts: 529")), tmp_path)
    (a,) = ask(s, 1)
    assert a.failed and not a.ok
    (line,) = read_jsonl(tmp_path / "t.jsonl")
    assert line["failed"] is True and "529" in line["error"] and line["response_text"] == ""
    assert s.usage.failed_calls == 1 and s.usage.calls == 0


def test_recorded_calls_are_not_sent_again_and_count_once(tmp_path):
    first = session(Scripted(lambda r: Completion(GOOD, 100, 20)), tmp_path / "a")
    ask(first, 2)
    lines = read_jsonl(tmp_path / "a" / "t.jsonl")
    client = Scripted(lambda r: Completion(GOOD, 7, 7))
    again = session(client, tmp_path / "b", recorded=RecordedCalls([lines[0]]))
    ask(again, 2)
    assert len(client.requests) == 1  # the recorded candidate was answered from the record
    out = read_jsonl(tmp_path / "b" / "t.jsonl")
    assert sorted(t.get("reused", False) for t in out) == [False, True]
    assert again.usage.input_tokens == 100 + 7


def test_keys_are_scrubbed_from_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-0123456789")
    leaked = json.dumps({"rationale": "header was sk-ant-secret-0123456789",
                         "rows": [{"state": s, "action": 0} for s in range(16)]})
    s = session(Scripted(lambda r: Completion(leaked, 1, 1)), tmp_path)
    (a,) = ask(s, 1)
    assert a.ok and "secret" not in a.parsed.rationale
    assert b"sk-ant-secret" not in (tmp_path / "t.jsonl").read_bytes()
