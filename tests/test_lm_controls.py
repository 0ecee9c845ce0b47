"""Short lm-policy runs of issue 62 item 6's new settings on FrozenLake-v1.deterministic: the structured controls
(``--lm-features index``, ``thermometer``) and the meaning text (``--lm-state-text meaning``, SmolLM2-135M) train,
record their settings in config.json, evaluate to their summary's figure and resume to the uninterrupted run's
files, like the other features."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import run_records
from test_lm_policy import LM_CACHE, lake, needs_extra, one_line, run_files
from test_lm_resume import FAST, stopped_and_resumed

from llm_policy_gen.cli import main

pytestmark = pytest.mark.xdist_group("smollm2-torch")


@needs_extra
@pytest.mark.slow
@pytest.mark.parametrize(("kind", "width"), [("index", 2), ("thermometer", 6)])
def test_a_structured_control_trains_evaluates_and_resumes(kind: str, width: int, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    whole, resumed = stopped_and_resumed(tmp_path, 3, 1, "--lm-features", kind, *FAST)
    assert run_records(resumed) == run_records(whole)
    config = json.loads((whole / "config.json").read_text())
    assert config["features"] == kind and config["features_width"] == width
    assert config["coordinates"] == {"names": ["row", "column"], "sizes": [4, 4]}
    assert config["config"]["lm_features"] == kind and config["config"]["lm_state_text"] == "plain"
    summary = json.loads((whole / "summary.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(whole), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"] == summary["best_eval_mean"]


@needs_extra
def test_the_meaning_text_with_a_control_or_on_a_spec_without_meaning_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "index", "--lm-state-text", "meaning")) == 2
    assert "the controls read no text" in one_line(capsys.readouterr().err)
    assert main(["train", "--env", "Acrobot-v1", "--mode", "lm-policy", "--lm-model", "/nowhere.gguf", "--logs-dir",
                 str(logs), "--lm-state-text", "meaning"]) == 2
    assert "needs a [meaning] table in the spec of Acrobot-v1" in one_line(capsys.readouterr().err)
    assert run_files(logs) == []


@needs_extra
@pytest.mark.slow
def test_smollm2_reads_the_meaning_text_and_resumes_the_same(gguf: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    model = ("--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), "--lm-state-text", "meaning", *FAST)
    assert main(lake(tmp_path / "whole", *model, "--iterations", "2")) == 0
    assert main(lake(tmp_path / "part", *model, "--iterations", "1")) == 0
    resumed = tmp_path / "part" / "FrozenLake-v1" / "r"
    assert main(["train", "--resume", str(resumed), "--iterations", "2", "--lm-cache", str(LM_CACHE)]) == 0
    whole = tmp_path / "whole" / "FrozenLake-v1" / "r"
    assert run_records(resumed) == run_records(whole)
    config = json.loads((whole / "config.json").read_text())
    assert config["config"]["lm_state_text"] == "meaning" and config["state_texts"] == 16
    assert config["features_width"] == 576
