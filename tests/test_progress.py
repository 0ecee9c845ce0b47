"""Slow steps say what they are doing (issue 59, item 12).

A GGUF model printed nothing while it loaded (33 s for lm-policy, up to 160 s with the first call of a table run),
and calls of 20-139 s showed no tokens per second. Now a model's load says its file and size before and its seconds
after (``llamacpp:`` in process and the lm-policy backbone), a call that took 10 s or more is said when it ends
with its tokens and rate, and a generation in this process says every 30 s how far it has got. Fast calls (every
call to a fake server) say nothing, and ``--quiet`` says nothing at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import openai_server
from fakes.tables import TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.clients import progress
from llm_policy_gen.clients.base import CallKey
from llm_policy_gen.clients.progress import Ticker
from llm_policy_gen.storage.model_file import loading
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
ROOT = Path(__file__).resolve().parents[1]


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, Path]:
    code = main(["train", "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", "--iterations", "2",
                 "--candidates", "2", "--train-episodes", "2", "--heldout-episodes", "5", "--logs-dir",
                 str(tmp_path), "--run-id", "r", "--no-plots", "--no-progress", "--no-cache", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err, tmp_path / "CartPole-v1" / "r"


# --- a long call is said when it ends ------------------------------------------------------------------------------
def test_a_long_call_is_said_when_it_ends_with_its_tokens_and_rate(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_openai.responder = TableResponder()
    monkeypatch.setattr(progress, "SLOW_CALL_S", 0.0)  # every call counts as long
    err, run = _train(tmp_path, capsys)
    said = [x for x in err.splitlines() if " took " in x]
    calls = read_jsonl(run / "transcripts.jsonl")
    assert len(said) == len(calls) == 4, err
    for call in calls:
        start = (f"openai: iteration {call['iteration']} candidate {call['candidate']} took ")
        (line,) = [x for x in said if x.startswith(start)]
        assert f"s: tokens {call['input_tokens']} in + {call['output_tokens']} out (" in line, line
        assert line.endswith(" tokens/s out)"), line


def test_fast_calls_and_a_quiet_run_say_nothing_more(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_openai.responder = TableResponder()
    err, _ = _train(tmp_path / "fast", capsys)  # the default threshold: a loopback call is far below it
    assert " took " not in err and "calls go to" in err
    monkeypatch.setattr(progress, "SLOW_CALL_S", 0.0)
    err, _ = _train(tmp_path / "quiet", capsys, "--quiet")
    assert err == ""


def test_a_generation_says_every_interval_how_far_it_has_got() -> None:
    now = [100.0]
    said: list[str] = []
    ticker = Ticker(said.append, "llamacpp", CallKey(3, 2, 2), every_s=30, clock=lambda: now[0])
    for written, t in ((10, 110.0), (100, 130.0), (200, 150.0), (300, 170.0)):
        now[0] = t
        ticker.tokens(written)
    assert said == ["llamacpp: iteration 3 candidate 2, repair 1 generating: 100 tokens in 30 s (3.3 tokens/s)",
                    "llamacpp: iteration 3 candidate 2, repair 1 generating: 300 tokens in 70 s (4.3 tokens/s)"]
    silent = Ticker(None, "llamacpp", CallKey(1), every_s=0, clock=lambda: now[0])
    silent.tokens(5)  # nowhere to say it: nothing happens


# --- a model's load --------------------------------------------------------------------------------------------------
def test_a_load_says_the_file_and_size_before_and_its_seconds_after(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(2_500_000))
    said: list[str] = []
    with loading(said.append, "llamacpp", model):
        said.append("(the load)")
    assert said[:2] == ["llamacpp: loading m.gguf (2.5 MB) ...", "(the load)"]
    assert said[2].startswith("llamacpp: loaded m.gguf in ") and said[2].endswith(" s"), said
    said.clear()
    with pytest.raises(ValueError), loading(said.append, "lm-policy", model, "its safetensors copy in C"):
        raise ValueError("cannot load")
    assert said == ["lm-policy: loading m.gguf (2.5 MB) from its safetensors copy in C ..."]  # its error says why
    with loading(None, "llamacpp", model):  # nowhere to say it
        pass


def _load_lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith(("llamacpp: load", "lm-policy: load"))]


@pytest.mark.slow
def test_a_gguf_backend_says_its_load(gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: `make test` installs it")
    r = subprocess.run(
        [sys.executable, "-m", "llm_policy_gen", "train", "--env", "FrozenLake-v1", "--backend", f"llamacpp:{gguf}",
         "--logs-dir", str(tmp_path / "logs"), "--iterations", "1", "--candidates", "1", "--repair-attempts", "0",
         "--heldout-episodes", "5", "--max-output-tokens", "300", "--no-plots", "--no-progress", "--run-id", "r"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "LLM_POLICY_GEN_WORKERS": "1"})
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    first, after = _load_lines(r.stderr)
    size = gguf.stat().st_size / 1e6
    assert first == f"llamacpp: loading {gguf.name} ({size:.0f} MB) ...", first
    assert after.startswith(f"llamacpp: loaded {gguf.name} in ") and after.endswith(" s"), after
    assert lines.index(first) < lines.index(after)


@pytest.mark.slow
def test_the_lm_policy_backbone_says_where_it_loads_from(gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="the lm-policy extra is not installed (make test installs it)")
    code = ("import sys\nfrom pathlib import Path\nfrom llm_policy_gen.lm.backbone import load_language_model\n"
            "for _ in range(2):\n"
            "    load_language_model(sys.argv[1], Path(sys.argv[2]), note=print)\n")
    r = subprocess.run([sys.executable, "-c", code, str(gguf), str(tmp_path / "lm")], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = _load_lines(r.stdout)
    assert len(lines) == 4, r.stdout
    assert lines[0].startswith(f"lm-policy: loading {gguf.name} (") and "from the GGUF file" in lines[0]
    assert lines[2].startswith(f"lm-policy: loading {gguf.name} (") and "from its safetensors copy in " in lines[2]
    assert all(x.startswith(f"lm-policy: loaded {gguf.name} in ") for x in (lines[1], lines[3])), lines


def test_the_state_texts_encoding_says_its_seconds_and_where_its_encodings_came_from() -> None:
    from types import SimpleNamespace

    from llm_policy_gen.lm.encoder import encoding

    encoder = SimpleNamespace(forward_passes=0, disk_hits=0)
    said: list[str] = []
    with encoding(said.append, encoder, 324):
        said.append("(encoding)")
        encoder.forward_passes, encoder.disk_hits = 300, 24
    assert said[:2] == ["lm-policy: encoding 324 state texts ...", "(encoding)"]
    assert said[2].startswith("lm-policy: encoded 324 state texts in ") and said[2].endswith(
        " s (300 by the model, 24 from the cache)"), said
    with encoding(None, encoder, 324):  # nowhere to say it
        pass


@pytest.mark.slow
def test_an_lm_policy_run_says_its_load_and_encoding_before_its_start(gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="the lm-policy extra is not installed (make test installs it)")
    r = subprocess.run(
        [sys.executable, "-m", "llm_policy_gen", "train", "--env", "FrozenLake-v1", "--mode", "lm-policy",
         "--lm-model", str(gguf), "--lm-cache", str(tmp_path / "lm"), "--iterations", "1", "--heldout-episodes", "5",
         "--logs-dir", str(tmp_path / "logs"), "--run-id", "r", "--no-plots", "--no-progress"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "LLM_POLICY_GEN_WORKERS": "1"})
    assert r.returncode == 0, r.stderr
    said = [x for x in r.stderr.splitlines() if x.startswith(("lm-policy: ", "start: "))]
    assert [x.split(" ", 2)[1] for x in said] == ["loading", "loaded", "encoding", "encoded", "the"], said
    assert "(16 by the model, 0 from the cache)" in said[3], said
