"""Issue 29, items 3 and 12: hostile answers and files parsed with bounds; a model context too small for the prompt.

Item 3: an answer nested thousands of levels deep, or holding an integer of thousands of digits, is an invalid answer
(recorded in ``transcripts.jsonl``, sent back for repair), never a traceback; an answer-cache entry holding one is a
miss; a policy file, ``summary.json``, ``config.json``, ``checkpoint.npz`` or ``--config`` file holding one is one
line and exit 2. Item 12 (with the real SmolLM2 model): ``--llamacpp-n-ctx 256`` is refused before the run starts,
naming the smallest context that fits, and that context is accepted.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import openai_server

from llm_policy_gen.cli import main
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai

NEST = "[" * 3000 + "]" * 3000
"""Valid JSON, 3,000 levels deep (``json.loads`` raises ``RecursionError``)."""
DIGITS = "9" * 5000
"""An integer of 5,000 digits (``json.loads`` raises ``ValueError``: Python converts at most 4,300)."""
BOMBS = {"nesting": NEST, "digits": DIGITS}


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def train(tmp_path: Path, *extra: str, run_id: str = "r") -> int:
    return main(["train", "--logs-dir", str(tmp_path / "logs"), "--iterations", "1", "--candidates", "1",
                 "--heldout-episodes", "5", "--no-plots", "--no-progress", "--quiet", "--run-id", run_id, *extra])


def lake_run(tmp_path: Path, run_id: str = "r", iterations: int = 1) -> Path:
    code = train(tmp_path, "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", str(iterations),
                 run_id=run_id)
    assert code == 0
    return tmp_path / "logs" / "FrozenLake-v1" / run_id


def with_bomb(text: str, bomb: str) -> str:
    """A JSON object's text with a first member ``"junk": bomb`` (the rest as it was)."""
    assert text.lstrip().startswith("{")
    return "{" + f'"junk": {bomb}, ' + text.lstrip()[1:]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and not p.name.endswith(".lock")}


# ------------------------------------------------------------------------------------------ answers from a server
def _cartpole(tmp_path: Path, *extra: str, run_id: str = "r") -> Path:
    code = train(tmp_path, "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", *extra, run_id=run_id)
    assert code == 0
    return tmp_path / "logs" / "CartPole-v1" / run_id


@pytest.mark.parametrize("answer", [NEST, '{"rationale": "x", "rows": ' + NEST + "}",
                                    '{"rationale": "x", "rows": [{"state": 0, "action": ' + DIGITS + "}]}",
                                    "Here it is: " + "{" * 3000],
                         ids=["nested", "nested-rows", "digits", "prose-then-braces"])
def test_a_hostile_answer_is_an_invalid_answer_recorded_and_repaired(fake_openai: Any, tmp_path: Path,
                                                                     answer: str) -> None:
    from fakes.tables import TableResponder

    tables = TableResponder()
    answers = iter([answer])
    fake_openai.responder = lambda body: next(answers, None) or tables(body)
    run = _cartpole(tmp_path)
    first, second = read_jsonl(run / "transcripts.jsonl")
    assert not first["valid"] and not first.get("failed") and second["valid"]
    assert first["response_text"] == answer  # the paid call is kept in the transcript
    assert "cannot be read as JSON" in first["errors"][0], first["errors"]
    assert ("nested too deeply (more than 100 levels)" in first["errors"][0]) != ("digits" in first["errors"][0])
    assert first["errors"][0] in fake_openai.bodies[1]["messages"][-1]["content"]  # sent back for repair


@pytest.mark.parametrize("bomb", list(BOMBS.values()), ids=list(BOMBS))
def test_a_corrupted_cache_entry_is_a_miss_and_is_replaced(fake_openai: Any, tmp_path: Path, bomb: str) -> None:
    from fakes.tables import TableResponder

    fake_openai.responder = TableResponder()
    _cartpole(tmp_path, run_id="first")
    entries = [p for p in Path(os.environ["XDG_CACHE_HOME"]).rglob("*.json")]
    assert len(entries) == 1
    entries[0].write_text('{"text": ' + bomb + "}", encoding="utf-8")
    calls = len(fake_openai.bodies)
    run = _cartpole(tmp_path, run_id="second")  # crashed here, and in every later run that asked the same
    (line,) = read_jsonl(run / "transcripts.jsonl")
    assert line["valid"] and not line["cached"]
    assert len(fake_openai.bodies) == calls + 1  # asked the server again
    assert json.loads(entries[0].read_text(encoding="utf-8"))["text"] == line["response_text"]


# ------------------------------------------------------------------------------------------------------ files
@pytest.mark.parametrize("bomb", list(BOMBS.values()), ids=list(BOMBS))
def test_a_hostile_policy_file_is_one_line_for_evaluate(tmp_path: Path, bomb: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path)
    policy = tmp_path / "policy.json"
    policy.write_text(with_bomb((run / "best_policy.json").read_text(encoding="utf-8"), bomb), encoding="utf-8")
    capsys.readouterr()
    assert main(["evaluate", str(policy), "--episodes", "2"]) == 2
    line = one_line(capsys.readouterr().err)
    assert str(policy) in line and "cannot be read as JSON" in line


@pytest.mark.parametrize("name", ["summary.json", "config.json"])
@pytest.mark.parametrize("bomb", list(BOMBS.values()), ids=list(BOMBS))
def test_a_hostile_run_file_is_one_line_for_report_and_resume(tmp_path: Path, name: str, bomb: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path)
    target = run / name
    target.write_text(with_bomb(target.read_text(encoding="utf-8"), bomb), encoding="utf-8")
    before = snapshot(run)
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    line = one_line(capsys.readouterr().err)
    assert name in line and "cannot be read as JSON" in line
    assert main(["train", "--resume", str(run), "--iterations", "2", "--no-progress", "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert name in line and "cannot be read as JSON" in line
    assert snapshot(run) == before and not (tmp_path / "r.html").exists()


def _rewrite_state(path: Path, change: Callable[[str], str], extra: dict[str, np.ndarray] | None = None,
                   allow_pickle: bool = False) -> None:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    text = change(bytes(arrays.pop("__state__")).decode("utf-8"))
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=allow_pickle, __state__=np.frombuffer(text.encode("utf-8"), dtype=np.uint8),
             **arrays, **(extra or {}))
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("case", ["nesting", "digits", "not-an-object", "missing-array", "pickled-array"])
def test_a_hostile_checkpoint_is_one_line_for_resume(tmp_path: Path, case: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path, iterations=2)
    (run / "summary.json").unlink()  # as a killed run leaves it: --resume reads the checkpoint
    ckpt = run / "checkpoint.npz"
    if case in BOMBS:
        _rewrite_state(ckpt, lambda t: with_bomb(t, BOMBS[case]))
    elif case == "not-an-object":
        _rewrite_state(ckpt, lambda t: "[1, 2]")
    elif case == "missing-array":
        _rewrite_state(ckpt, lambda t: t.replace('{"__ndarray__": "a0"}', '{"__ndarray__": "nope"}', 1))
    else:  # an object array (pickled): np.load(allow_pickle=False) refuses to unpickle it
        _rewrite_state(ckpt, lambda t: t.replace('{"__ndarray__": "a0"}', '{"__ndarray__": "evil"}', 1),
                       {"evil": np.array([{"x": 1}], dtype=object)}, allow_pickle=True)
        with zipfile.ZipFile(ckpt) as z:
            assert "evil.npy" in z.namelist()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "3", "--no-progress", "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "checkpoint" in line and str(ckpt) in line


@pytest.mark.parametrize("bomb", list(BOMBS.values()), ids=list(BOMBS))
def test_a_hostile_config_file_is_one_line(tmp_path: Path, bomb: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "exp.json"
    cfg.write_text(with_bomb('{"config": {"env_id": "FrozenLake-v1"}}', bomb), encoding="utf-8")
    toml = tmp_path / "exp.toml"
    toml.write_text(f"iterations = {bomb if bomb == DIGITS else '[' * 3000 + ']' * 3000}\n", encoding="utf-8")
    for path in (cfg, toml):
        capsys.readouterr()
        assert main(["train", "--config", str(path), "--logs-dir", str(tmp_path / "logs")]) == 2
        line = one_line(capsys.readouterr().err)
        assert str(path) in line and "cannot be read" in line
    assert not (tmp_path / "logs").exists()


def test_a_hostile_replay_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replay = tmp_path / "t.jsonl"
    replay.write_text(json.dumps({"response_text": "{}"}) + "\n" + with_bomb('{"response_text": "{}"}', NEST) + "\n",
                      encoding="utf-8")
    code = main(["train", "--env", "FrozenLake-v1", "--backend", f"replay:{replay}", "--logs-dir",
                 str(tmp_path / "logs"), "--no-progress", "--quiet"])
    assert code == 2
    line = one_line(capsys.readouterr().err)
    assert "line 2" in line and "nested" in line
    assert not (tmp_path / "logs" / "FrozenLake-v1").exists()


# ----------------------------------------------------------------------------------- item 12: a context too small
@pytest.mark.slow
def test_a_context_too_small_for_the_fixed_prompt_is_refused_naming_the_smallest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], gguf: Path) -> None:
    import re

    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import check_backend, prepare

    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: `make test` installs it")
    model = gguf  # conftest.py's session fixture, fetched before this test's temporary XDG_CACHE_HOME is set
    args = ["train", "--env", "CartPole-v1", "--backend", f"llamacpp:{model}", "--logs-dir", str(tmp_path / "logs"),
            "--iterations", "1", "--no-progress", "--quiet"]
    capsys.readouterr()
    assert main([*args, "--llamacpp-n-ctx", "256"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "--llamacpp-n-ctx 256 is too small" in line and "--max-prompt-tokens can cut" in line
    assert not (tmp_path / "logs" / "CartPole-v1").exists()  # refused before the run started: no run directory
    m = re.search(r"give --llamacpp-n-ctx (\d+) or more", line)
    assert m, line
    need = int(m.group(1))
    fixed = int(re.search(r"is (\d+) tokens", line).group(1))  # type: ignore[union-attr]
    assert 600 < fixed < need <= 2 * fixed  # the fixed prompt is about 940 tokens; the answer as many again at most
    base = dict(env_id="CartPole-v1", backend=f"llamacpp:{model}", logs_dir=str(tmp_path / "logs"), progress=False)
    check_backend(prepare(TrainConfig(**base, llamacpp_n_ctx=need)))  # the context named is enough
    print(line)  # the figures, for the record
    assert main([*args, "--llamacpp-n-ctx", str(fixed)]) == 2  # room for the fixed part, none for an answer
    assert f"--llamacpp-n-ctx {fixed} is too small" in one_line(capsys.readouterr().err)
