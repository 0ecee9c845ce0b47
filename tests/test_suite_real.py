"""The ``real`` suite (bench/real_llm.py before issue 61): small Qwen2.5-Coder models (GGUF, Q4_K_M) named portably
(``llamacpp:models:NAME``), K = 2, 5 iterations, 2,000 prompt tokens, 2 repairs, no cache; ``offline`` and
``random`` at the model's counted episodes; the answers table (valid answers, calls, tokens, seconds per call).

No real model runs here: ``--list`` with the models not fetched, the server transport as docs/real-model.md and the
suite file give it against a loopback OpenAI-compatible stub, and the suite with the stub in the in-process model's
place (its baselines then run at the stub's counted episodes)."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.openai_server import FakeOpenAIServer
from run_helpers import answer

from llm_policy_gen.cli import main
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import read_records

ROOT = Path(__file__).resolve().parents[1]
SUITE_FILE = ROOT / "llm_policy_gen" / "suites" / "data" / "real.toml"
LAKE = answer([2, 2, 1, 0, 1, 0, 1, 0, 2, 1, 1, 0, 0, 2, 2, 0], "action")


def test_the_real_suite_names_its_models_portably_with_size_and_quantisation() -> None:
    suite = load_suite("real")
    assert suite.tables == ("answers",) and [t.key for t in suite.tasks] == ["frozenlake", "cartpole"]
    assert suite.task("cartpole").settings == {"output_format": "rules", "candidates": 2}
    assert suite.task("frozenlake").settings == {"candidates": 2}
    models = [m for m in suite.methods if "llamacpp:" in m.entry]
    assert {m.entry.split("=", 1)[1].split("[")[0] for m in models} == {"llamacpp:models:qwen2.5-coder-0.5b",
                                                                        "llamacpp:models:qwen2.5-coder-1.5b"}
    for m in models:
        assert m.label.startswith(("qwen0.5b-q4_k_m", "qwen1.5b-q4_k_m")) and m.iterations == 5
        assert "max_prompt_tokens=2000;repair_attempts=2;max_output_tokens=1500;timeout_s=900;cache=false" in m.entry
        assert re.search(r"Qwen2\.5-Coder-(0\.5|1\.5)B-Instruct, Q4_K_M GGUF \([\d.]+ [MG]B\), in process", m.note)
    assert suite.method("qwen1.5b-q4_k_m").tasks == ("frozenlake",)
    assert all(m.tasks == ("cartpole",) for m in models if m.label.count("-") > 1)  # evidence and --refine variants
    for base in ("offline", "random"):
        assert suite.method(base).budget == "episodes-of:qwen0.5b-q4_k_m" and suite.method(base).iterations == 5


def test_bench_real_lists_each_model_that_is_not_fetched_with_the_fetch_command_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path / "models"))
    out = tmp_path / "out"
    assert main(["bench", "real", "--list", "--out", str(out)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("suite real: 36 cells:") and "12 waiting, 24 not run" in listed[0]
    for size in ("0.5b", "1.5b"):
        cells = [x for x in listed if f"/qwen{size}-q4_k_m" in x]
        assert cells and all(f"not run: --backend llamacpp:models:qwen2.5-coder-{size}: the model is not fetched" in x
                             and f"fetch it with: python tools/fetch_model.py qwen2.5-coder-{size}" in x
                             for x in cells)
    assert sum("/qwen1.5b-q4_k_m" in x for x in listed) == 3  # the lake only
    assert "  cartpole/random seed 2: waiting: waits for qwen0.5b-q4_k_m seed 2's record" in "\n".join(listed)
    assert not out.exists()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A loopback OpenAI-compatible server answering every call with a valid lake table; no key set anywhere."""
    with FakeOpenAIServer(responder=lambda body: LAKE) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        yield s


def _answers(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(out / "real_answers.csv", newline="", encoding="utf-8") as fh:
        return {(r["task"], r["method"]): r for r in csv.DictReader(fh)}


@pytest.mark.slow
def test_the_server_transport_as_the_suite_file_gives_it_runs_against_a_loopback_server(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documented = re.search(r'--methods "([^"]+)"', SUITE_FILE.read_text(encoding="utf-8"))
    assert documented is not None and documented.group(1).startswith("qwen0.5b-server=openai:local[")
    out = tmp_path / "out"
    assert main(["bench", "real", "--tasks", "frozenlake", "--seeds", "0", "--methods", documented.group(1),
                 "--max-concurrent-calls", "1", "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr().err
    assert "projected model use: " in said and " tokens in, " in said
    (rec,) = read_records(out)
    r = rec.result
    assert rec.method == "qwen0.5b-server" and r["model"] == "local" and r["iterations"] == 5
    assert r["calls"] == len(server.requests) == r["candidates_asked"] == 10  # K = 2, 5 iterations, no repair
    assert r["valid_first"] == r["valid_after_repairs"] == 10 and r["failed_calls"] == 0 and r["tokens_in"] > 0
    assert r["s_per_call"] is not None and r["initial_heldout_mean"] is not None
    row = _answers(out)[("frozenlake", "qwen0.5b-server")]
    assert (row["valid_first"], row["calls"], row["seeds"]) == ("10", "10", "0")
    assert "| frozenlake | qwen0.5b-server | 0 | 10/10 (100%) | 10/10 | 10 (0) |" in \
        (out / "real.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_suite_with_a_stub_for_its_model_runs_the_baselines_at_the_models_counted_episodes(
        server: FakeOpenAIServer, tmp_path: Path) -> None:
    text = SUITE_FILE.read_text(encoding="utf-8")
    stubbed = text.replace("llamacpp:models:qwen2.5-coder-0.5b[max_prompt_tokens=2000;",
                           "openai:local[max_prompt_chars=5000;")
    assert stubbed != text
    suite = tmp_path / "real.toml"
    suite.write_text(stubbed, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["bench", str(suite), "--tasks", "frozenlake", "--seeds", "0", "--methods",
                 "qwen0.5b-q4_k_m,offline,random", "--out", str(out), "--no-progress"]) == 0
    by = {r.method: r for r in read_records(out)}
    assert set(by) == {"qwen0.5b-q4_k_m", "offline", "random"}
    episodes = by["qwen0.5b-q4_k_m"].result["episodes"]
    for base in ("offline", "random"):
        assert by[base].budget == {"max_episodes": episodes} and by[base].settings["iterations"] == 5
    assert set(_answers(out)) == {("frozenlake", "qwen0.5b-q4_k_m")}  # the model's runs only
    table = (out / "real.md").read_text(encoding="utf-8")
    assert all(f"| FrozenLake-v1.deterministic | {m} |" in table for m in by)


def test_train_takes_a_model_by_name_and_refuses_one_not_fetched_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path / "models"))
    logs = tmp_path / "logs"
    assert main(["train", "--env", "FrozenLake-v1.deterministic", "--backend", "llamacpp:models:qwen2.5-coder-0.5b",
                 "--iterations", "1", "--logs-dir", str(logs)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--backend llamacpp:models:qwen2.5-coder-0.5b: the model is not fetched" \
        in err and err.endswith("fetch it with: python tools/fetch_model.py qwen2.5-coder-0.5b")
    assert not logs.exists() or list(logs.rglob("*")) == []  # no run directory
