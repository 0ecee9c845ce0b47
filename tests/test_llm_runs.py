"""Whole runs through the real CLI against loopback fakes of OpenAI, Anthropic, Gemini and Ollama (issue 3).

Each test calls ``llm_policy_gen.cli.main(["train", ...])`` with the provider's base-URL variable pointed at a fake
server (``tests/fakes/*_server.py``) that speaks the provider's wire protocol to the real SDK client. The fakes answer
with valid CartPole tables (``fakes/tables.py``) unless a test scripts other answers (invalid tables, 429, 500,
hangs, refused keys). ``tests/conftest.py`` clears real keys, skips ``.env``, blocks every non-loopback connection
and gives each test its own ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes import anthropic_server, openai_server
from fakes.gemini_server import FAKE_GEMINI_KEY, FakeGeminiServer, fake_gemini_fixture  # noqa: F401
from fakes.tables import CARTPOLE, WEIGHTS, TableResponder, cartpole_table, out_of_range_answer

from llm_policy_gen.backends import default_model
from llm_policy_gen.cli import main
from llm_policy_gen.clients.pricing import DEFAULT_PRICES, cost_usd
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai  # fixtures, found by pytest under these names
fake_ollama = openai_server.fake_ollama
fake_anthropic = anthropic_server.fake_anthropic

ITERATIONS = 3


@dataclass(frozen=True)
class Provider:
    """A provider under test: its fixture, a model listed in the shipped prices.toml, its key variable and key."""

    name: str
    model: str
    fixture: str
    key_variable: str | None
    key: str | None

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.model}"


PROVIDERS = (
    Provider("openai", "gpt-4.1-mini", "fake_openai", "OPENAI_API_KEY", openai_server.FAKE_KEY),
    Provider("anthropic", "claude-haiku-4-5", "fake_anthropic", "ANTHROPIC_API_KEY", anthropic_server.FAKE_KEY),
    Provider("gemini", "gemini-2.5-flash", "fake_gemini", "GEMINI_API_KEY", FAKE_GEMINI_KEY),
    Provider("ollama", "llama3.1:8b", "fake_ollama", None, None),
)
KEYED = PROVIDERS[:3]


class Fake:
    """One provider's fake server behind one interface: script answers, read what the requests carried."""

    def __init__(self, provider: Provider, server: Any) -> None:
        self.provider = provider
        self.server = server
        self.responder = TableResponder()
        server.responder = self.responder
        self._wire = anthropic_server if provider.name == "anthropic" else openai_server

    @property
    def name(self) -> str:
        return self.provider.name

    # --- scripting (steps run before the responder takes over) ------------------------------------------------
    def ok(self, text: str, input_tokens: int, output_tokens: int) -> None:
        if isinstance(self.server, FakeGeminiServer):
            self.server.ok(text, input_tokens, output_tokens)
        else:
            self.server.push(self._wire.ok(text, input_tokens, output_tokens))

    def error(self, status: int, retry_after: float | None = None) -> None:
        if isinstance(self.server, FakeGeminiServer):
            self.server.error(status, retry_after)
        else:
            self.server.push(self._wire.error(status, retry_after))

    def hang(self, seconds: float) -> None:
        if isinstance(self.server, FakeGeminiServer):
            self.server.hang(seconds)
        else:
            self.server.push(self._wire.hang(seconds))

    def refuse_key(self) -> None:
        """From now on the server expects another key, so the configured one is refused."""
        self.server.api_key = "not-the-configured-key"

    # --- reading the requests ---------------------------------------------------------------------------------
    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.requests]

    def system(self, body: dict[str, Any]) -> str:
        if self.name == "anthropic":
            return str(body["system"])
        if self.name == "gemini":
            return "".join(p["text"] for p in body["systemInstruction"]["parts"])
        return "".join(m["content"] for m in body["messages"] if m["role"] == "system")

    def last_user(self, body: dict[str, Any]) -> str:
        if self.name == "gemini":
            turn = [c for c in body["contents"] if c["role"] == "user"][-1]
            return "".join(p["text"] for p in turn["parts"])
        return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])

    def schema(self, body: dict[str, Any]) -> dict[str, Any]:
        """The structured-output JSON schema the request carried (in the provider's own field)."""
        if self.name == "anthropic":
            fmt = body["output_config"]["format"]
            assert fmt["type"] == "json_schema"
            return fmt["schema"]  # type: ignore[no-any-return]
        if self.name == "gemini":
            gen = body["generationConfig"]
            assert gen["responseMimeType"] == "application/json"
            return gen["responseJsonSchema"]  # type: ignore[no-any-return]
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        return fmt["json_schema"]["schema"]  # type: ignore[no-any-return]


def _fake(request: pytest.FixtureRequest) -> Fake:
    provider: Provider = request.param
    return Fake(provider, request.getfixturevalue(provider.fixture))


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
def fake(request: pytest.FixtureRequest) -> Fake:
    """Each provider's fake, started, with its base-URL (and key) variable set."""
    return _fake(request)


@pytest.fixture(params=KEYED, ids=lambda p: p.name)
def keyed(request: pytest.FixtureRequest) -> Fake:
    """The fakes of the providers that take a key (not Ollama)."""
    return _fake(request)


@dataclass
class Run:
    """What one CLI call left: exit code, stdout, stderr and the run directory (None if none was made)."""

    code: int
    out: str
    err: str
    dir: Path | None

    def json(self, name: str) -> Any:
        assert self.dir is not None
        return json.loads((self.dir / name).read_text(encoding="utf-8"))

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        assert self.dir is not None
        path = self.dir / name
        return read_jsonl(path) if path.exists() else []

    def table(self, iteration: int) -> list[int]:
        return self.json(f"policies/iter_{iteration:04d}.json")["table"]  # type: ignore[no-any-return]


def train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str, logs: str = "logs") -> Run:
    """``llm-policy-gen train --env CartPole-v1 --iterations 3 ...`` into ``tmp_path/logs``, kept short by a config file
    (5 held-out episodes, 2 training episodes and 1 candidate per iteration), without plots or progress bar."""
    config = tmp_path / "fast.toml"
    config.write_text("heldout_episodes = 5\ntrain_episodes = 2\ncandidates = 1\n", encoding="utf-8")
    logs_dir = tmp_path / logs
    code = main(["train", "--env", CARTPOLE, "--iterations", str(ITERATIONS), "--logs-dir", str(logs_dir),
                 "--config", str(config), "--no-progress", "--no-plots", *args])
    captured = capsys.readouterr()
    dirs = sorted((logs_dir / CARTPOLE).iterdir()) if (logs_dir / CARTPOLE).is_dir() else []
    assert len(dirs) <= 1, dirs
    return Run(code, captured.out, captured.err, dirs[0] if dirs else None)


def shipped_price(provider: Provider) -> dict[str, float]:
    """The model's entry in llm_policy_gen/data/prices.toml, read here with tomllib (``*`` for local servers)."""
    prices = tomllib.loads(DEFAULT_PRICES.read_text(encoding="utf-8"))[provider.name]
    return prices[provider.model] if provider.model in prices else prices["*"]


def row_properties(schema: dict[str, Any]) -> set[str]:
    """Property names of the items of ``rows`` in a proposal schema (following a ``$ref`` into ``$defs``)."""
    items = schema["properties"]["rows"]["items"]
    if "$ref" in items:
        items = schema["$defs"][items["$ref"].rsplit("/", 1)[-1]]
    return set(items["properties"])


# --- 1. a run completes, with tokens, cost, schema and system prompt ------------------------------------------------
def test_train_completes_with_tokens_cost_schema_and_system_prompt(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = train(tmp_path, capsys, "--backend", fake.provider.spec)
    assert run.code == 0, run.err
    assert run.dir is not None and f"run directory: {run.dir}" in run.out
    summary, events, transcripts = run.json("summary.json"), run.jsonl("events.jsonl"), run.jsonl("transcripts.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3] and summary["iterations"] == ITERATIONS
    assert summary["stop_reason"] == "iterations done" and summary["is_llm"] is True
    assert (summary["backend"], summary["model"]) == (fake.name, fake.provider.model)
    # one request per iteration, each answered with a valid table that became that iteration's candidate
    assert len(fake.bodies) == len(transcripts) == summary["llm_calls"] == ITERATIONS
    assert all(t["valid"] and not t["cached"] for t in transcripts)
    for i in range(ITERATIONS):
        assert run.table(i + 1) == cartpole_table(WEIGHTS[i]).tolist()
        assert events[i]["eval_mean"] is not None and events[i]["validation_errors"] == []
    # tokens: nonzero on every call; iterations and the run add up
    assert all(t["input_tokens"] > 0 and t["output_tokens"] > 0 for t in transcripts)
    for key in ("input_tokens", "output_tokens"):
        assert summary[key] == sum(t[key] for t in transcripts) == sum(e[key] for e in events) > 0
    # cost from the shipped price table for this model
    price = shipped_price(fake.provider)
    expected = [(t["input_tokens"] * price["input"] + t["output_tokens"] * price["output"]) / 1e6 for t in transcripts]
    assert [e["cost_usd"] for e in events] == pytest.approx([round(c, 6) for c in expected], abs=1e-6)
    assert summary["cost_usd"] == pytest.approx(sum(expected), abs=1e-6)
    assert summary["cost_complete"] is True
    if fake.provider.key is not None:
        assert summary["cost_usd"] > 0 and f"${summary['cost_usd']:.4f}" in run.out
    # every request carried the proposal schema through native structured output, and the run's system prompt
    for body, t in zip(fake.bodies, transcripts, strict=True):
        schema = fake.schema(body)
        assert {"rationale", "rows"} <= set(schema["properties"]) and row_properties(schema) == {"state", "action"}
        assert t["messages"][0]["role"] == "system" and len(t["messages"][0]["content"]) > 100
        assert fake.system(body) == t["messages"][0]["content"]
        assert fake.last_user(body) == t["messages"][-1]["content"]
    assert run.json("config.json")["backend"]["provider"] == fake.name


# --- 2. the transcript replays the run -------------------------------------------------------------------------------
def test_transcripts_replay_to_the_same_policies_and_best(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = train(tmp_path, capsys, "--backend", fake.provider.spec, logs="llm")
    assert first.code == 0 and first.dir is not None, first.err
    again = train(tmp_path, capsys, "--backend", f"replay:{first.dir / 'transcripts.jsonl'}", logs="replay")
    assert again.code == 0 and again.dir is not None, again.err
    assert len(fake.bodies) == ITERATIONS  # the replay asked nobody
    for i in range(1, ITERATIONS + 1):
        assert again.table(i) == first.table(i)
    assert again.json("best_policy.json")["table"] == first.json("best_policy.json")["table"]
    assert again.json("summary.json")["best_eval_mean"] == first.json("summary.json")["best_eval_mean"]
    assert again.json("summary.json")["backend"] == "replay"


# --- 3. the key never reaches a file or the terminal -----------------------------------------------------------------
def test_key_never_appears_in_run_directory_cache_or_output(
    keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    keyed.ok(out_of_range_answer(), 50, 10)  # a repaired answer too, so error texts are written
    run = train(tmp_path, capsys, "--backend", keyed.provider.spec)
    assert run.code == 0 and run.dir is not None, run.err
    key, variable = keyed.provider.key, keyed.provider.key_variable
    assert key is not None and variable is not None and os.environ[variable] == key  # the run had the key
    files = [p for p in [*run.dir.rglob("*"), *cache.rglob("*")] if p.is_file()]
    assert {"config.json", "summary.json", "events.jsonl", "transcripts.jsonl", "best_policy.json"} <= {
        p.name for p in files
    }
    assert any(p.is_relative_to(cache) for p in files)  # the answer cache was written and is scanned too
    leaked = [str(p) for p in files if key.encode() in p.read_bytes()]
    assert leaked == []
    assert key not in run.out and key not in run.err


# --- 4. repair loop --------------------------------------------------------------------------------------------------
def test_invalid_answer_is_repaired_within_the_iteration(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = fake.responder.answer(0)
    fake.ok(out_of_range_answer(), 100, 20)
    fake.ok(good, 200, 40)
    run = train(tmp_path, capsys, "--backend", fake.provider.spec, "--iterations", "1", "--repair-attempts", "2")
    assert run.code == 0, run.err
    transcripts = run.jsonl("transcripts.jsonl")
    assert [(t["iteration"], t["attempt"], t["valid"]) for t in transcripts] == [(1, 1, False), (1, 2, True)]
    error = "rows[0]: state 324 out of range 0..323"
    assert transcripts[0]["errors"] == [error]
    assert len(fake.bodies) == 2
    assert error in fake.last_user(fake.bodies[1]) and error not in fake.last_user(fake.bodies[0])
    assert transcripts[1]["messages"][-2] == {"role": "assistant", "content": out_of_range_answer()}
    (event,) = run.jsonl("events.jsonl")
    assert event["eval_mean"] is not None and event["validation_errors"] == [] and event["llm_calls"] == 2
    assert (event["input_tokens"], event["output_tokens"]) == (300, 60)
    assert run.table(1) == cartpole_table(WEIGHTS[0]).tolist()


# --- 5. faults -------------------------------------------------------------------------------------------------------
def test_429_with_retry_after_then_success(fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake.error(429, retry_after=0)
    run = train(tmp_path, capsys, "--backend", fake.provider.spec, "--iterations", "2", "--max-retries", "2")
    assert run.code == 0, run.err
    assert len(fake.bodies) == 3  # 429, then the answer of iteration 1, then iteration 2
    transcripts = run.jsonl("transcripts.jsonl")
    assert [t["transport_attempts"] for t in transcripts] == [2, 1] and all(t["valid"] for t in transcripts)
    # Retry-After: 0 replaced the backoff, which would have waited at least 0.5 s (1 s, jitter 0.5)
    assert transcripts[0]["latency_s"] < 0.5
    assert all(e["eval_mean"] is not None for e in run.jsonl("events.jsonl"))
    assert run.json("summary.json")["iterations"] == 2


def _assert_iteration_lost_run_continued(run: Run, fragment: str, lost_iteration: int = 1) -> None:
    assert run.code == 0, run.err
    events = run.jsonl("events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3]
    lost = events[lost_iteration - 1]
    assert lost["eval_mean"] is None and lost["accepted"] is False and lost["llm_calls"] == 0
    assert len(lost["validation_errors"]) == 1 and fragment in lost["validation_errors"][0]
    others = [e for e in events if e is not lost]
    assert all(e["eval_mean"] is not None and e["validation_errors"] == [] for e in others)
    # the lost iteration's policy file holds the kept best, marked as no candidate
    lost_policy = run.json(f"policies/iter_{lost_iteration:04d}.json")
    assert lost_policy["meta"]["candidate"] is None
    if lost_iteration == 1:
        assert lost_policy["table"] == [0] * 324
    failed = next(t for t in run.jsonl("transcripts.jsonl") if t["iteration"] == lost_iteration)
    assert failed["valid"] is False and failed["failed"] is True and failed["errors"] == lost["validation_errors"]
    summary = run.json("summary.json")
    assert summary["iterations"] == 3 and summary["invalid_iterations"] == 1
    assert summary["stop_reason"] == "iterations done"


def test_500_until_retries_are_spent_loses_one_iteration(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.error(500, retry_after=0)
    fake.error(500, retry_after=0)
    run = train(tmp_path, capsys, "--backend", fake.provider.spec, "--max-retries", "1")
    assert len(fake.bodies) == 2 + 2
    _assert_iteration_lost_run_continued(run, "after 2 attempts")
    assert "500" in run.jsonl("events.jsonl")[0]["validation_errors"][0]


def test_timeout_loses_one_iteration_like_a_500(fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake.ok(fake.responder.answer(0), 10, 10)
    fake.hang(10.0)  # the server holds the second request far longer than the client waits
    run = train(tmp_path, capsys, "--backend", fake.provider.spec, "--timeout", "0.3", "--max-retries", "0")
    assert len(fake.bodies) == 3
    _assert_iteration_lost_run_continued(run, "imeout", lost_iteration=2)
    lost_call = next(t for t in run.jsonl("transcripts.jsonl") if t["iteration"] == 2)
    assert lost_call["unreachable"] is True  # no answer at all: a timeout counts as unreachable


def test_refused_key_stops_the_run_with_exit_2(keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keyed.refuse_key()
    run = train(tmp_path, capsys, "--backend", keyed.provider.spec, "--max-retries", "3")
    assert run.code == 2
    assert len(keyed.bodies) == 1  # at once: no retry, no further iteration
    # where the calls go (said before the first call), where the kept table starts, then the error
    said, start, *lines = run.err.strip().splitlines()
    assert start.startswith("start: the kept table is "), run.err
    assert "calls go to" in said and f"key {keyed.provider.key_variable} from" in said
    assert len(lines) == 1 and lines[0].startswith("llm-policy-gen train: error:"), run.err
    assert f"set {keyed.provider.key_variable} " in lines[0] and "Traceback" not in run.err
    assert keyed.provider.key is not None and keyed.provider.key not in run.err + run.out
    assert run.dir is not None and not list(run.dir.rglob("*.tmp"))
    assert run.json("config.json")["config"]["backend"] == keyed.provider.spec
    summary = run.json("summary.json")
    assert summary["stop_reason"] == "credentials refused" and summary["iterations"] == 0
    assert run.jsonl("events.jsonl") == []


# --- 6. budget -------------------------------------------------------------------------------------------------------
def _test_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: Provider) -> None:
    """Prices for the test: output tokens at 1 USD per million, input free."""
    path = tmp_path / "prices.toml"
    path.write_text(f'[{provider.name}]\n"{provider.model}" = {{ input = 0.0, output = 1.0 }}\n', encoding="utf-8")
    monkeypatch.setenv("LLM_POLICY_GEN_PRICES", str(path))


def test_price_table_set_or_edited_during_a_process_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = PROVIDERS[0]
    assert cost_usd(provider.name, provider.model, 0, 10**6) == shipped_price(provider)["output"]
    _test_prices(tmp_path, monkeypatch, provider)  # a second run in the same process must see the new table
    assert cost_usd(provider.name, provider.model, 0, 10**6) == 1.0
    path = tmp_path / "prices.toml"
    path.write_text(path.read_text(encoding="utf-8").replace("output = 1.0", "output = 3.0"), encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert cost_usd(provider.name, provider.model, 0, 10**6) == 3.0


def test_budget_below_one_call_stops_before_any_call(
    keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _test_prices(tmp_path, monkeypatch, keyed.provider)
    # one CartPole answer is estimated at thousands of output tokens, i.e. more than 0.001 USD at these prices
    run = train(tmp_path, capsys, "--backend", keyed.provider.spec, "--budget-usd", "0.001")
    assert run.code == 0, run.err
    assert keyed.bodies == []
    summary = run.json("summary.json")
    assert "budget" in summary["stop_reason"] and "budget" in run.err
    assert summary["llm_calls"] == 0 and summary["cost_usd"] == 0 and summary["iterations"] == 0


def test_budget_allows_a_couple_of_calls_then_stops(
    keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _test_prices(tmp_path, monkeypatch, keyed.provider)
    for k in range(6):
        keyed.ok(keyed.responder.answer(k), 1000, 1000)  # 0.001 USD per call
    budget = 0.0055
    run = train(tmp_path, capsys, "--backend", keyed.provider.spec, "--iterations", "6", "--budget-usd", str(budget))
    assert run.code == 0, run.err
    summary = run.json("summary.json")
    calls = summary["llm_calls"]
    assert 2 <= calls < 6 and len(keyed.bodies) == calls
    assert summary["cost_usd"] == pytest.approx(calls * 0.001) and summary["cost_usd"] <= budget
    assert "budget" in summary["stop_reason"] and summary["cost_complete"] is True
    events = run.jsonl("events.jsonl")
    assert len(events) == calls and events[-1]["cost_usd_total"] == pytest.approx(calls * 0.001)


def test_budget_for_a_model_without_a_price_is_refused(
    keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"{keyed.name}:model-without-a-price"
    run = train(tmp_path, capsys, "--backend", spec, "--budget-usd", "1")
    assert run.code == 2 and keyed.bodies == [] and run.dir is None
    (line,) = run.err.strip().splitlines()
    assert "--budget-usd" in line and spec in line and str(DEFAULT_PRICES) in line and "--prices" in line


# --- 7. cache --------------------------------------------------------------------------------------------------------
def test_second_run_comes_from_the_cache_unless_no_cache(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = fake.provider.spec
    first = train(tmp_path, capsys, "--backend", spec, logs="first")
    assert first.code == 0, first.err
    assert len(fake.bodies) == ITERATIONS
    second = train(tmp_path, capsys, "--backend", spec, logs="second")
    assert second.code == 0, second.err
    assert len(fake.bodies) == ITERATIONS  # nothing reached the server
    transcripts = second.jsonl("transcripts.jsonl")
    assert len(transcripts) == ITERATIONS
    assert all(t["cached"] and t["input_tokens"] == t["output_tokens"] == 0 and not t["cost_usd"]
               for t in transcripts)
    summary = second.json("summary.json")
    assert (summary["input_tokens"], summary["output_tokens"], summary["cost_usd"]) == (0, 0, 0)
    assert summary["cached_calls"] == ITERATIONS
    for i in range(1, ITERATIONS + 1):
        assert second.table(i) == first.table(i)
    assert summary["best_eval_mean"] == first.json("summary.json")["best_eval_mean"]
    third = train(tmp_path, capsys, "--backend", spec, "--no-cache", logs="third")
    assert third.code == 0, third.err
    assert len(fake.bodies) == 2 * ITERATIONS
    assert not any(t["cached"] for t in third.jsonl("transcripts.jsonl"))
    assert third.json("summary.json")["input_tokens"] > 0


# --- 8. choosing the backend -----------------------------------------------------------------------------------------
def test_without_backend_train_picks_the_configured_provider(
    keyed: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = train(tmp_path, capsys, "--iterations", "1")
    assert run.code == 0, run.err
    assert f"backend: {keyed.name} ({keyed.provider.key_variable} is set)" in run.err
    summary = run.json("summary.json")
    assert summary["backend"] == keyed.name and len(keyed.bodies) == 1
    assert summary["model"] == default_model(keyed.name)
    assert summary["cost_complete"] is True and summary["cost_usd"] > 0  # the default model has a price


def test_without_backend_or_key_train_picks_offline_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = train(tmp_path, capsys, "--iterations", "1")
    assert run.code == 0, run.err
    assert "backend: offline (no API key is configured" in run.err and "NOT an LLM" in run.err
    assert run.json("summary.json")["backend"] == "offline"


# --- 9. backends listing ---------------------------------------------------------------------------------------------
def test_backends_shows_the_configured_provider_never_the_key(
    keyed: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backends"]) == 0
    text = capsys.readouterr().out
    assert main(["backends", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert keyed.provider.key is not None and keyed.provider.key not in text + json.dumps(listing)
    configured = {r["name"]: r["configured"] for r in listing["backends"]}
    assert configured[keyed.name] is True
    assert [p.name for p in KEYED if configured[p.name]] == [keyed.name]
    assert listing["default"] == keyed.name
    row = next(line.split() for line in text.splitlines() if line.startswith(keyed.name + " "))
    assert row[3] == "yes" and row[4] == keyed.provider.key_variable
    assert f"train without --backend uses: {keyed.name}" in text
