"""The engine with a real SDK client against loopback servers: K concurrent candidates, the cache's sample index,
resume without re-sending recorded calls, keys echoed by a server, unreachable and misbehaving servers, and the
structured-output fallback, all through ``llm-policy-gen train``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.tables import TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
MODEL = "gpt-4.1-mini"
ROOT = Path(__file__).resolve().parents[1]


#: How long a test waits for an event that should come at once; only a broken run ever waits this long.
PATIENCE_S = 60.0


class GatedResponder:
    """Answers valid CartPole tables and counts the requests in flight, with no clock in the way.

    ``together=N``: each request waits until N requests are in flight at once (a barrier), so calls that overlap
    are proved by the barrier opening, not by wall time; calls that never overlap break it (``broken``).
    ``hold=n``: the n-th request waits, with ``holding`` set, until ``release`` is set.
    """

    def __init__(self, together: int = 1, hold: int | None = None) -> None:
        self.inner = TableResponder()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.barrier = threading.Barrier(together, timeout=PATIENCE_S)
        self.broken = False
        self.hold = hold
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.requests += 1
            number = self.requests
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            text = self.inner(body)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            self.broken = True
        if number == self.hold:
            self.holding.set()
            self.release.wait(PATIENCE_S)
        with self.lock:
            self.in_flight -= 1
        return text


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, Path | None]:
    logs = tmp_path / "logs"
    code = main(["train", "--env", "CartPole-v1", "--backend", f"openai:{MODEL}", "--logs-dir", str(logs),
                 "--no-plots", "--no-progress", "--train-episodes", "2", *args])
    out = capsys.readouterr()
    dirs = sorted((logs / "CartPole-v1").iterdir()) if (logs / "CartPole-v1").is_dir() else []
    return code, out.out, out.err, (dirs[-1] if dirs else None)


def test_eight_candidates_are_asked_at_once(fake_openai, tmp_path, capsys):
    responder = GatedResponder(together=8)  # each call answers only once all 8 of its iteration are in flight
    fake_openai.responder = responder
    # the fake listens on a loopback address, so it is a local server: allow it eight calls at once
    code, out, err, run = _train(tmp_path, capsys, "--candidates", "8", "--iterations", "2", "--local-concurrency", "8")
    assert code == 0, err
    assert run is not None
    tr = read_jsonl(run / "transcripts.jsonl")
    assert {(t["iteration"], t["candidate"]) for t in tr} == {(i, c) for i in (1, 2) for c in range(1, 9)}
    assert len(fake_openai.bodies) == 16
    assert responder.max_in_flight == 8
    assert not responder.broken, "the 8 calls of an iteration were not in flight at once"
    ev = read_jsonl(run / "events.jsonl")
    assert all(len(e["candidate_means"]) == 8 for e in ev)


def test_max_concurrent_calls_bounds_calls_in_flight(fake_openai, tmp_path, capsys):
    responder = GatedResponder(together=2)  # pairs: a third call in flight would show in max_in_flight
    fake_openai.responder = responder
    code, _, err, _ = _train(tmp_path, capsys, "--candidates", "6", "--iterations", "1", "--max-concurrent-calls", "2",
                             "--local-concurrency", "6")  # the loopback fake is a local server
    assert code == 0, err
    assert responder.max_in_flight == 2 and len(fake_openai.bodies) == 6
    assert not responder.broken, "two calls were never in flight at once"


def test_cache_keys_carry_the_sample_index(fake_openai, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fake_openai.responder = TableResponder()
    code, _, err, first = _train(tmp_path, capsys, "--candidates", "3", "--iterations", "2", "--run-id", "a")
    assert code == 0, err
    assert len(fake_openai.bodies) == 6  # three distinct samples per iteration, not one call cached thrice
    entries = list((tmp_path / "cache").rglob("*.json"))
    assert len(entries) == 6
    code, _, err, second = _train(tmp_path, capsys, "--candidates", "3", "--iterations", "2", "--run-id", "b")
    assert code == 0, err
    assert len(fake_openai.bodies) == 6  # the second run came from the cache, candidate by candidate
    assert first is not None and second is not None
    tr = read_jsonl(second / "transcripts.jsonl")
    assert all(t["cached"] for t in tr)
    a = {(t["iteration"], t["candidate"]): t["response_text"] for t in read_jsonl(first / "transcripts.jsonl")}
    b = {(t["iteration"], t["candidate"]): t["response_text"] for t in tr}
    assert a == b


def test_a_key_echoed_by_the_server_is_scrubbed_everywhere(fake_openai, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    inner = TableResponder()

    def echo(body: dict[str, Any]) -> str:
        header = fake_openai.requests[-1].headers.get("authorization", "")
        table = json.loads(inner(body))
        table["rationale"] = f"your header was {header}"
        return json.dumps(table)

    fake_openai.responder = echo
    code, out, err, run = _train(tmp_path, capsys, "--candidates", "2", "--iterations", "2")
    assert code == 0, err
    assert run is not None
    key = openai_server.FAKE_KEY
    files = [p for p in [*run.rglob("*"), *(tmp_path / "cache").rglob("*")] if p.is_file()]
    assert any("transcripts" in p.name for p in files) and any(p.is_relative_to(tmp_path / "cache") for p in files)
    assert [str(p) for p in files if key.encode() in p.read_bytes()] == []
    assert any("[REDACTED]" in t["response_text"] for t in read_jsonl(run / "transcripts.jsonl"))
    assert key not in out + err


def test_an_unreachable_endpoint_stops_the_run_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x-key-for-nobody")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    code, out, err, run = _train(tmp_path, capsys, "--iterations", "2", "--timeout", "2", "--max-retries", "1",
                                 "--candidates", "2")
    assert code == 2  # the URL is the user's own setting
    (line,) = err.strip().splitlines()[-1:]
    # a refused connection at the run's first call is a definite answer: not retried (issue 29, item 14)
    assert "127.0.0.1:9" in line and "could not be reached: " in line and "Traceback" not in err
    assert run is not None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "backend unreachable" and summary["iterations"] == 0
    failed = [t for t in read_jsonl(run / "transcripts.jsonl") if t.get("failed")]
    assert failed and summary["unfinished_iteration_failed_calls"] == len(failed)


def test_a_backend_that_stops_answering_ends_the_run_after_n_iterations(fake_openai, tmp_path, capsys):
    fake_openai.push(openai_server.ok(TableResponder().answer(0), 10, 10))
    for _ in range(10):
        fake_openai.push(openai_server.hang(5.0))
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "8", "--candidates", "1", "--timeout", "0.2",
                               "--max-retries", "0", "--unreachable-after", "3")
    assert code == 1 and "answered no call for 3 iterations" in err
    assert run is not None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "backend unreachable" and summary["iterations"] == 4


def test_html_from_a_proxy_is_a_failed_attempt_not_a_crash(fake_openai, tmp_path, capsys):
    fake_openai.responder = TableResponder()
    page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    fake_openai.push(openai_server.Step.raw(page), openai_server.Step.raw(page))
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "2", "--candidates", "1", "--max-retries", "1")
    assert code == 0, err
    assert run is not None
    tr = read_jsonl(run / "transcripts.jsonl")
    assert tr[0]["failed"] is True and "was not the" in tr[0]["error"] and "JSON" in tr[0]["error"]
    assert tr[1]["valid"] is True


def _refuse_json_schema_once(server: Any) -> None:
    """The next call gets OpenAI's 400 for a model without JSON-schema output."""
    server.push(openai_server.error(
        400, param="response_format",
        message="Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."))


def test_structured_output_refused_falls_back_once_and_says_so(fake_openai, tmp_path, capsys):
    fake_openai.responder = TableResponder()
    _refuse_json_schema_once(fake_openai)
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "3", "--candidates", "2")
    assert code == 0, err
    assert err.count("json_schema -> json_mode") == 1
    assert run is not None
    tr = read_jsonl(run / "transcripts.jsonl")
    assert sum(1 for t in tr if t.get("notice")) == 1
    assert all(t["valid"] for t in tr), [(t.get("errors"), t.get("error"), t["response_text"][:200]) for t in tr
                                         if not t["valid"]]
    # iteration 1: the refused call, its resend, and the other candidate's call (sent at the same time, so it may
    # have left in either mode); every later call asks in JSON mode
    later = fake_openai.bodies[3:]
    assert later and all(b["response_format"]["type"] == "json_object" and b["response_format"]["schema"]
                         for b in later)  # a server other than OpenAI's own gets the schema in JSON mode


def test_a_structured_output_fallback_holds_on_resume(fake_openai, tmp_path, capsys):
    """The fallback is part of the run's state: a resumed run does not ask in the refused mode again."""
    fake_openai.responder = TableResponder()
    _refuse_json_schema_once(fake_openai)
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "1", "--candidates", "1")
    assert code == 0, err
    assert run is not None
    sent = len(fake_openai.bodies)
    assert main(["train", "--resume", str(run), "--iterations", "2", "--no-progress"]) == 0, capsys.readouterr().err
    later = fake_openai.bodies[sent:]
    assert later and all(b["response_format"]["type"] == "json_object" and b["response_format"]["schema"]
                         for b in later)  # a server other than OpenAI's own gets the schema in JSON mode


@pytest.mark.slow
def test_a_killed_llm_run_resumes_without_sending_recorded_calls(fake_openai, tmp_path, monkeypatch):
    """kill -9 in the middle of iteration 3 of 4 (K = 2): the calls of iteration 3 already in the transcript are
    answered from the record on resume, never sent again, and their tokens are counted once."""
    responder = GatedResponder(hold=6)  # calls 1-4 are iterations 1-2; the 6th, candidate 2 of iteration 3, waits
    fake_openai.responder = responder
    logs = tmp_path / "logs"
    env = {**os.environ, "LLM_POLICY_GEN_WORKERS": "1"}
    args = [sys.executable, "-m", "llm_policy_gen", "train", "--env", "CartPole-v1", "--backend", f"openai:{MODEL}",
            "--iterations", "4", "--candidates", "2", "--max-concurrent-calls", "1", "--logs-dir", str(logs),
            "--run-id", "cut", "--no-plots", "--quiet", "--train-episodes", "2"]
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tr_path = logs / "CartPole-v1" / "cut" / "transcripts.jsonl"
    assert responder.holding.wait(PATIENCE_S), "the run never sent the second call of iteration 3"
    deadline = time.monotonic() + PATIENCE_S  # the first call's line is written before the next call is sent
    while not any(t["iteration"] == 3 for t in read_jsonl(tr_path)) and time.monotonic() < deadline:
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=PATIENCE_S)
    responder.release.set()
    before = read_jsonl(tr_path)
    recorded = [t for t in before if t["iteration"] >= 3]
    assert len(recorded) == 1, "the kill came after the first call of iteration 3 was recorded"
    sent_before = len(fake_openai.bodies)
    q = subprocess.run([sys.executable, "-m", "llm_policy_gen", "train", "--resume", str(tr_path.parent), "--quiet"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    after = read_jsonl(tr_path)
    assert {(t["iteration"], t["candidate"]) for t in after} == {(i, c) for i in range(1, 5) for c in (1, 2)}
    reused = [t for t in after if t.get("reused")]
    assert [(t["iteration"], t["candidate"]) for t in reused] == [(3, 1)]
    assert reused[0]["response_text"] == recorded[0]["response_text"]
    # every call after the resume that was not reused reached the server; the reused one did not
    fresh = [t for t in after if t["iteration"] >= 3 and not t.get("reused")]
    assert len(fake_openai.bodies) - sent_before == len(fresh)
    summary = json.loads((tr_path.parent / "summary.json").read_text())
    assert summary["input_tokens"] == sum(t["input_tokens"] for t in after)
    assert summary["llm_calls"] == len(after) and summary["iterations"] == 4
