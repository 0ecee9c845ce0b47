"""Local servers as they are, failures that are said, seeds, a whole-attempt deadline and token-measured prompts.

Issue 18 (items 3, 4, 5 and repairs) and issue 19 (items 14 and 23), through the real SDKs against the loopback
fakes of ``tests/fakes/`` and through ``llm-policy-gen train``:

* a server that behaves like ``llama_cpp.server`` (HTTP 500 naming ``response_format`` for ``json_schema``) makes the
  client step down to JSON mode at once, without retries, sending the schema the way that server takes it;
* a local server (loopback ``--base-url``, Ollama) gets 600 s per attempt, no retry of a timed-out attempt, and one
  call at a time;
* failed calls are counted on every console line and in the summary, and a run in which no call succeeded ends with
  exit 1 and one line naming the error and the URL;
* every call carries a seed that is a pure function of (run seed, iteration, candidate, attempt), in the request, the
  transcript and the cache key; a repair at temperature 0 to a provider without seeds goes warmer;
* ``--timeout`` bounds a whole attempt, however slowly the body trickles in;
* prompts measured in tokens keep under ``--max-prompt-tokens`` with the character cap's cuts.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import anthropic_server, openai_server
from fakes.loopback import ANSWER_SCHEMA
from fakes.openai_server import FakeOpenAIServer, behave_like_llama_cpp, error, hang, ok, trickle
from fakes.tables import TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.clients.anthropic import AnthropicClient
from llm_policy_gen.clients.base import (
    CallKey,
    ClientOptions,
    Message,
    OutputSpec,
    Request,
    Sampling,
    call_seed,
)
from llm_policy_gen.clients.cache import cache_key
from llm_policy_gen.clients.ollama import OllamaClient
from llm_policy_gen.clients.openai import OpenAIClient
from llm_policy_gen.clients.retry import LOCAL_TIMEOUT_S, RetryPolicy
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.errors import BackendError, BackendUnreachable
from llm_policy_gen.prompting.builder import PromptBuilder, default_token_cap
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
fake_ollama = openai_server.fake_ollama
fake_anthropic = anthropic_server.fake_anthropic

MODEL = "qwen2.5-coder-0.5b"
ASK = Request((Message("system", "Answer in JSON."), Message("user", "Propose a table.")),
              OutputSpec("table", ANSWER_SCHEMA))
ANSWER = json.dumps({"rationale": "r", "rows": [{"state": 0, "action": 1}], "note": {"text": ""}})


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, Path | None]:
    """``train`` on CartPole with the openai backend (the fixture's loopback URL), per-iteration lines on stderr."""
    logs = tmp_path / "logs"
    code = main(["train", "--env", "CartPole-v1", "--backend", f"openai:{MODEL}", "--logs-dir", str(logs),
                 "--no-plots", "--train-episodes", "2", *args])
    out = capsys.readouterr()
    dirs = sorted((logs / "CartPole-v1").iterdir()) if (logs / "CartPole-v1").is_dir() else []
    return code, out.out, out.err, (dirs[-1] if dirs else None)


# --- a server like llama_cpp.server --------------------------------------------------------------------------------
def test_llama_cpp_refusal_steps_down_at_once_and_sends_the_schema_its_way(fake_openai: FakeOpenAIServer) -> None:
    behave_like_llama_cpp(fake_openai).push(ok(ANSWER), ok(ANSWER))
    sleeps = Sleeps()
    retry = RetryPolicy(max_retries=4, initial_delay_s=0.01, jitter=0.0)
    client = OpenAIClient(MODEL, ClientOptions(retry=retry), sleep=sleeps)
    first = client.complete(ASK)
    assert first.text == ANSWER and first.structured_output == "json_mode"
    assert first.transport_attempts == 2 and sleeps == []  # the 500 was a refusal: no retry, no backoff
    assert "json_schema -> json_mode" in first.extra["structured_output_fallback"]
    assert "response_format" in first.extra["structured_output_fallback"]
    second = client.complete(ASK)
    assert "structured_output_fallback" not in second.extra  # said once
    refused, *accepted = fake_openai.bodies
    assert refused["response_format"]["type"] == "json_schema"
    assert [b["response_format"] for b in accepted] == [{"type": "json_object", "schema": ANSWER_SCHEMA}] * 2


def test_a_500_that_names_no_structured_field_is_still_retried(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(error(500), ok(ANSWER))
    sleeps = Sleeps()
    client = OpenAIClient(MODEL, ClientOptions(retry=RetryPolicy(max_retries=2, initial_delay_s=0.01, jitter=0.0)),
                          sleep=sleeps)
    out = client.complete(ASK)
    assert out.structured_output == "json_schema" and out.transport_attempts == 2 and len(sleeps) == 1


def test_train_against_a_llama_cpp_server_steps_down_once_and_trains(fake_openai, tmp_path, capsys):
    behave_like_llama_cpp(fake_openai).responder = TableResponder()
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "2", "--candidates", "2", "--no-progress")
    assert code == 0, err
    assert err.count("json_schema -> json_mode") == 1
    assert run is not None
    tr = read_jsonl(run / "transcripts.jsonl")
    assert len(tr) == 4 and all(t["valid"] and not t["failed"] for t in tr)
    # one refused request, then four answered ones: the refusal was never retried
    kinds = [b["response_format"]["type"] for b in fake_openai.bodies]
    assert kinds == ["json_schema"] + ["json_object"] * 4


# --- the local profile ---------------------------------------------------------------------------------------------
def test_a_loopback_server_is_local_a_remote_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    local = OpenAIClient(MODEL, ClientOptions(base_url="http://127.0.0.1:8088/v1")).describe()
    assert local["local"] is True and local["local_concurrency"] == 1
    assert local["retry"]["timeout_s"] == LOCAL_TIMEOUT_S == 600 and local["retry"]["retry_timeouts"] is False
    remote = OpenAIClient(MODEL, ClientOptions(base_url="http://llm.example.invalid/v1")).describe()
    assert remote["local"] is False and remote["retry"]["timeout_s"] == 120 and remote["retry"]["retry_timeouts"]
    given = OpenAIClient(MODEL, ClientOptions(base_url="http://localhost:8088/v1",
                                              retry=RetryPolicy(timeout_s=30.0))).describe()
    assert given["retry"]["timeout_s"] == 30.0  # --timeout wins over the local default


def test_ollama_is_local(fake_ollama: FakeOpenAIServer) -> None:
    d = OllamaClient("llama3.1:8b", ClientOptions()).describe()
    assert d["local"] is True and d["retry"]["timeout_s"] == LOCAL_TIMEOUT_S


def test_a_timed_out_call_to_a_local_server_is_not_retried(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(hang(5.0), ok(ANSWER))
    sleeps = Sleeps()
    client = OpenAIClient(MODEL, ClientOptions(retry=RetryPolicy(max_retries=3, timeout_s=0.3)), sleep=sleeps)
    with pytest.raises(BackendUnreachable, match=r"after 1 attempt: TimedOut: no answer within 0\.3 s"):
        client.complete(ASK)
    assert len(fake_openai.requests) == 1 and sleeps == []  # the server is still busy with it: not sent again


class OverlapResponder:
    """Answers tables; a request waits up to ``wait_s`` for another one to arrive while it is held, so that calls
    the client lets overlap do overlap (the fake counts the most it held at once)."""

    def __init__(self, wait_s: float = 1.0) -> None:
        self.inner = TableResponder()
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.wait_s = wait_s

    def __call__(self, body: dict[str, Any]) -> str:
        with self.arrived:
            text = self.inner(body)
            self.arrived.notify_all()
            self.arrived.wait(self.wait_s)
        return text


def test_a_local_server_is_sent_one_call_at_a_time(fake_openai, tmp_path, capsys):
    fake_openai.responder = OverlapResponder(wait_s=0.5)
    code, _, err, _ = _train(tmp_path, capsys, "--iterations", "1", "--candidates", "3", "--no-progress")
    assert code == 0, err
    assert len(fake_openai.bodies) == 3 and fake_openai.max_in_flight == 1


def test_local_concurrency_is_a_setting(fake_openai, tmp_path, capsys):
    fake_openai.responder = OverlapResponder(wait_s=5.0)
    code, _, err, _ = _train(tmp_path, capsys, "--iterations", "1", "--candidates", "3", "--no-progress",
                             "--local-concurrency", "3")
    assert code == 0, err
    assert fake_openai.max_in_flight >= 2


# --- no silent failure ---------------------------------------------------------------------------------------------
def test_a_run_whose_calls_all_fail_ends_with_exit_1_naming_the_error_and_the_url(fake_openai, tmp_path, capsys):
    fake_openai.gate = lambda body: error(500)  # every call: a 500 that is not a structured-output refusal
    code, out, err, run = _train(tmp_path, capsys, "--iterations", "2", "--candidates", "2", "--max-retries", "0",
                                 "--unreachable-after", "3")
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("llm-policy-gen train: failed: no call of this run succeeded (4 failed calls)")
    assert fake_openai.base_url in last and "InternalServerError" in last and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("iter ")]
    assert len(lines) == 2 and all("2 calls (2 failed: first error " in line for line in lines), lines
    assert "0 calls" not in err + out
    assert run is not None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["failed_calls"] == 4 and summary["stop_reason"] == "failed: no call succeeded"
    assert "InternalServerError" in summary["first_call_error"]


def test_failed_calls_are_counted_on_the_console_and_in_the_summary_line(fake_openai, tmp_path, capsys):
    responder = TableResponder()
    fake_openai.push(error(500))  # the first call of iteration 1 fails; the other candidate answers
    fake_openai.responder = responder
    code, out, err, _ = _train(tmp_path, capsys, "--iterations", "2", "--candidates", "2", "--max-retries", "0",
                               "--local-concurrency", "1")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("iter ")]
    assert "2 calls (1 failed: first error openai:" in lines[0] and "InternalServerError" in lines[0]
    assert "2 calls, " in lines[1] and "failed" not in lines[1]
    assert "4 calls (1 failed: first error " in out


# --- seeds ---------------------------------------------------------------------------------------------------------
def test_call_seed_is_a_pure_function_of_run_seed_and_key() -> None:
    key = CallKey(3, 2, 1)
    assert call_seed(0, key) == call_seed(0, CallKey(3, 2, 1))
    seeds = {call_seed(s, k) for s in (0, 1) for k in (CallKey(3, 1, 1), CallKey(3, 2, 1), CallKey(3, 2, 2),
                                                        CallKey(4, 2, 1), CallKey(3, 2, 1, state=5))}
    assert len(seeds) == 10 and all(0 <= s < 2**31 for s in seeds)


def test_the_cache_key_carries_the_seed() -> None:
    sampling = Sampling(temperature=0.0)
    one, two = (Request(ASK.messages, ASK.output, CallKey(1), seed=s) for s in (11, 12))
    assert cache_key("openai", MODEL, "u", one, sampling) != cache_key("openai", MODEL, "u", two, sampling)


def test_candidates_and_repairs_carry_their_own_seeds(fake_openai, tmp_path, capsys):
    responder = TableResponder()
    fake_openai.push(ok('{"not": "a table"}'))  # the first answer is refused: one repair
    fake_openai.responder = responder
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "1", "--candidates", "2", "--temperature", "0",
                               "--seed", "7", "--no-progress")
    assert code == 0, err
    assert err.count("warning: --temperature 0 with --candidates 2") == 1
    assert run is not None
    tr = read_jsonl(run / "transcripts.jsonl")
    by_key = {(t["iteration"], t["candidate"], t["attempt"]): t["seed"] for t in tr}
    repaired = next(c for (_, c, a) in by_key if a == 2)  # whichever candidate asked first
    assert set(by_key) == {(1, 1, 1), (1, 2, 1), (1, repaired, 2)}
    assert by_key == {k: call_seed(7, CallKey(*k)) for k in by_key}
    assert len(set(by_key.values())) == 3
    assert sorted(b["seed"] for b in fake_openai.bodies) == sorted(by_key.values())  # sent with every request
    # the repair: a new seed, and warmer, since at temperature 0 a new seed alone changes nothing
    temperatures = {b["seed"]: b["temperature"] for b in fake_openai.bodies}
    assert temperatures[by_key[(1, repaired, 2)]] == pytest.approx(0.3)
    assert temperatures[by_key[(1, 1, 1)]] == temperatures[by_key[(1, 2, 1)]] == 0


def test_a_repair_at_temperature_0_without_seeds_goes_warmer(fake_anthropic) -> None:
    fake_anthropic.push(anthropic_server.ok(ANSWER), anthropic_server.ok(ANSWER))
    client = AnthropicClient("claude-sonnet-4-6", ClientOptions(sampling=Sampling(temperature=0.0)))
    client.complete(Request(ASK.messages, ASK.output, CallKey(1, 1, 1), seed=5))
    client.complete(Request(ASK.messages, ASK.output, CallKey(1, 1, 2), seed=6))
    first, repair = fake_anthropic.bodies
    assert first["temperature"] == 0.0 and repair["temperature"] == pytest.approx(0.3)
    assert "seed" not in first  # Anthropic takes none


# --- a whole-attempt deadline --------------------------------------------------------------------------------------
def test_timeout_bounds_a_whole_attempt_however_the_body_trickles(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(trickle(60.0, ANSWER))  # headers at once, then a byte every 0.2 s for up to a minute
    client = OpenAIClient(MODEL, ClientOptions(retry=RetryPolicy(max_retries=0, timeout_s=2.0)), sleep=Sleeps())
    with pytest.raises(BackendError) as info:
        client.complete(ASK)
    assert not isinstance(info.value, BackendUnreachable)  # the server answered, too slowly
    assert "DeadlinePassed: no whole answer within 2 s" in str(info.value)
    assert fake_openai.outlasted == 0  # the client cut the 60 s trickle short
    assert len(fake_openai.requests) == 1


def test_train_with_timeout_2_and_no_retries_ends_a_trickling_call(fake_openai, tmp_path, capsys):
    fake_openai.push(trickle(60.0, TableResponder().answer(0)))
    code, _, err, run = _train(tmp_path, capsys, "--iterations", "1", "--candidates", "1", "--timeout", "2",
                               "--max-retries", "0", "--no-progress")
    assert fake_openai.outlasted == 0  # the deadline cut the 60 s trickle short
    assert code == 1 and "no call of this run succeeded" in err and "within 2 s" in err, (code, err)


# --- prompts in tokens ---------------------------------------------------------------------------------------------
def words(text: str) -> int:
    """A toy tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def test_prompts_measured_in_tokens_keep_under_the_token_cap_with_the_same_cuts() -> None:
    from test_prompt import context

    from llm_policy_gen.envs import get_spec

    ctx = context(get_spec("CartPole-v1"), 500, 10)
    wide = PromptBuilder(max_chars=10**6).build(ctx)  # every evidence row
    assert "less visited states left out" not in wide[1].content
    cap = sum(words(m.content) for m in wide) - 300
    builder = PromptBuilder(max_chars=10**6)
    builder.measure_in_tokens(cap, words)
    tight = builder.build(ctx)
    assert sum(words(m.content) for m in tight) <= cap
    assert "less visited states left out" in tight[1].content  # evidence rows cut, as the character cap does
    assert tight[0] == wide[0]
    assert tight[1].content.split("Evidence per state")[0] == wide[1].content.split("Evidence per state")[0]


def test_default_token_cap() -> None:
    assert default_token_cap(12000, None, 16384) == 6000
    assert default_token_cap(12000, 8192, 16384) == 4096  # the context less room for the answer
    assert default_token_cap(12000, 32768, 2048) == 6000


def test_max_prompt_tokens_is_checked_and_kept_on_resume(tmp_path, capsys):
    assert main(["train", "--env", "CartPole-v1", "--backend", "offline", "--max-prompt-tokens", "50",
                 "--logs-dir", str(tmp_path)]) == 2
    assert "--max-prompt-tokens 50" in capsys.readouterr().err
    assert TrainConfig(max_prompt_tokens=2000).max_prompt_tokens == 2000
    assert main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1", "--no-plots",
                 "--logs-dir", str(tmp_path), "--run-id", "r"]) == 0
    capsys.readouterr()
    run = str(tmp_path / "FrozenLake-v1" / "r")
    assert main(["train", "--resume", run, "--iterations", "2", "--max-prompt-tokens", "3000"]) == 2
    assert "--max-prompt-tokens cannot change" in capsys.readouterr().err  # it changes the prompts


def test_an_attempt_past_its_deadline_has_its_connection_closed(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(trickle(60.0, ANSWER))
    client = OpenAIClient(MODEL, ClientOptions(retry=RetryPolicy(max_retries=0, timeout_s=1.0)), sleep=Sleeps())
    with pytest.raises(BackendError, match="DeadlinePassed"):
        client.complete(ASK)
    waited = 0.0
    while fake_openai.in_flight and waited < 20:  # the server notices the closed connection at its next byte
        time.sleep(0.1)
        waited += 0.1
    assert fake_openai.in_flight == 0  # it would have kept trickling for a minute


def test_failed_calls_are_said_above_a_progress_bar() -> None:
    import io

    from llm_policy_gen.loggers.console import Console

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    console = Console(2, "CartPole-v1 [openai]", stream=screen)
    console.write({"iteration": 1, "llm_calls": 1, "failed_calls": 1, "first_call_error": "openai:m at URL failed"})
    console.write({"iteration": 2, "llm_calls": 2, "failed_calls": 0})
    console.close()
    text = screen.getvalue()
    assert "iter 1: 2 calls (1 failed: first error openai:m at URL failed)" in text
    assert "iter 2:" not in text


class TrickleServer:
    """Any HTTP request gets a 200's headers at once (a JSON body of 4,096 bytes announced), then one body byte each
    half second, for at most ``seconds``; :attr:`hung_up` is set when the client shut the connection."""

    def __init__(self, seconds: float = 60.0) -> None:
        import socket

        self.seconds = seconds
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.hung_up = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-trickle", daemon=True)

    def _serve(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n")
            stop = time.monotonic() + self.seconds
            while time.monotonic() < stop and not self._closing.wait(0.5):
                try:
                    conn.sendall(b" ")
                except OSError:  # the client shut the connection
                    self.hung_up.set()
                    return

    def __enter__(self) -> TrickleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._sock.close()
        self._thread.join(timeout=5)


@pytest.mark.parametrize("client_type", ["openai", "anthropic", "gemini"])
def test_every_sdk_client_shuts_an_attempt_past_its_deadline(monkeypatch: pytest.MonkeyPatch, client_type: str) -> None:
    from fakes.loopback import PROXY_VARIABLES, clear_env

    from llm_policy_gen.clients.gemini import GeminiClient

    clear_env(monkeypatch, PROXY_VARIABLES)
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(variable, "fake-key-0123456789")
    retry = RetryPolicy(max_retries=0, timeout_s=1.0)
    with TrickleServer(seconds=60.0) as server:
        options = ClientOptions(base_url=server.url, retry=retry)
        client: Any = {"openai": lambda: OpenAIClient(MODEL, options),
                       "anthropic": lambda: AnthropicClient("claude-sonnet-4-6", options),
                       "gemini": lambda: GeminiClient("gemini-3.8-flash", options)}[client_type]()
        with pytest.raises(BackendError, match="DeadlinePassed: no whole answer within 1 s"):
            client.complete(ASK)
        # the connection was shut, not left to trickle on (the server would trickle for a minute; it notices the
        # hang-up at its next byte, so this waits for that, not for any duration of the call)
        assert server.hung_up.wait(20)
