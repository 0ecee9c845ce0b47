"""``--mode lm-policy``: a language model's frozen encodings of the state texts, a head trained by SB3 PPO.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, ``tools/fetch_model.py smollm2``), loaded once per module through the
safetensors cache kept beside the fetched models (``~/.cache/llm-policy-gen/lm``), so that a cached ``make test``
never dequantises the GGUF file again, except in the one test that checks the cache against the file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.lm import EXTRA_MODULES

# pytest-xdist (`make test` runs `-n auto --dist loadgroup`): the language-model tests run on one worker, so that the
# model is loaded once per process (lm.backbone keeps the last one loaded) and only one process writes its safetensors
# copy into the shared cache (the first load of a clean cache).
pytestmark = pytest.mark.xdist_group("smollm2-torch")

ROOT = Path(__file__).resolve().parents[1]
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _cache_root() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")  # read before conftest's per-test one
    return Path(root) / "llm-policy-gen"


CACHE_ROOT = _cache_root()
LM_CACHE = Path(os.environ.get("LLM_POLICY_GEN_LM_CACHE", str(CACHE_ROOT / "lm")))


needs_extra = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in EXTRA_MODULES),
                                 reason="the lm-policy extra is not installed (make test installs it)")


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_files(logs: Path) -> list[Path]:
    return list(logs.rglob("*")) if logs.exists() else []


def lake(logs: Path, *extra: str) -> list[str]:
    return ["train", "--env", "FrozenLake-v1.deterministic", "--mode", "lm-policy", "--logs-dir", str(logs), "--run-id",
            "r", "--no-plots", "--no-progress", "--heldout-episodes", "20", *extra]


# ---------------------------------------------------------------------------------------------- refusals (fast)
@needs_extra
def test_a_missing_model_path_is_one_line_before_any_run_directory(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    code = main(lake(logs, "--lm-model", str(tmp_path / "nope.gguf")))
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "nope.gguf does not exist" in line and ".gguf file" in line, line
    assert run_files(logs) == []


@needs_extra
def test_a_file_that_is_not_gguf_and_a_folder_without_config_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    folder = tmp_path / "folder"
    folder.mkdir()
    for path, words in ((fake, "not a GGUF model file"), (folder, "without config.json")):
        code = main(lake(logs, "--lm-model", str(path)))
        line = one_line(capsys.readouterr().err)
        assert code == 2 and words in line, line
    assert run_files(logs) == []


def test_a_missing_extra_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # find_spec sees no transformers
    logs = tmp_path / "logs"
    code = main(lake(logs, "--lm-model", str(tmp_path / "any.gguf")))
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "lm-policy extra" in line and "transformers missing" in line, line
    assert "--find-links /opt/wheels" in line
    assert run_files(logs) == []


@needs_extra
def test_lm_features_need_a_model_and_the_mode_refuses_a_backend(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(lake(logs)) == 2
    assert "needs --lm-model PATH" in one_line(capsys.readouterr().err)
    assert main(lake(logs, "--lm-features", "onehot", "--backend", "openai:gpt-4o")) == 2
    assert "asks no backend" in one_line(capsys.readouterr().err)
    assert run_files(logs) == []


# ---------------------------------------------------------------------------------------------- one-hot control
@needs_extra
@pytest.mark.slow
def test_a_onehot_run_counts_the_learners_episodes(tmp_path: Path) -> None:
    """No model needed: the control features. Its rollouts are the run's training episodes (seeded by the run's
    plan, counted as they end), each iteration's read-out table is judged (its resume: tests/test_lm_resume.py)."""
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "onehot", "--iterations", "2", "--lm-n-steps", "128")) == 0
    run = logs / "FrozenLake-v1" / "r"
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["lm_steps"] for e in events] == [128, 256]
    assert all(e["candidates"] == 1 and len(e["candidate_means"]) == 1 for e in events)
    # every finished rollout episode is a counted training episode of the iteration it ended in
    assert all(len(e["train_returns"]) == e["lm_episodes"] > 0 for e in events)
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["backend"] == "offline" and config["learner"]["class"] == "PPO"
    assert config["features"] == "onehot" and config["features_width"] == 16
    table = json.loads((run / "policies" / "iter_0002.json").read_text())
    assert len(table["table"]) == 16


@needs_extra
@pytest.mark.slow
def test_trpo_trains_a_head_over_random_features(tmp_path: Path) -> None:
    """sb3-contrib's TRPO over the random control (the model's width without a model) runs its updates; the
    checkpoint keeps the head's parameters as arrays, and the frozen features table is no parameter of it."""
    import numpy as np

    from llm_policy_gen.run.checkpoint import load_checkpoint

    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "random", "--lm-learner", "trpo", "--iterations", "2",
                     "--lm-n-steps", "128")) == 0
    run = logs / "FrozenLake-v1" / "r"
    config = json.loads((run / "config.json").read_text())
    assert config["learner"]["class"] == "TRPO" and config["features_width"] == 576
    state = load_checkpoint(run / "checkpoint.npz")["learner"]["state"]
    assert state["updates"] == 2 and state["num_timesteps"] == 256
    params = state["policy"]
    assert params and not any("table" in name for name in params)
    assert all(isinstance(v, np.ndarray) and np.isfinite(v).all() for v in params.values())


# ---------------------------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def smollm2(gguf: Path) -> Any:
    """The model, through the safetensors cache (written from the GGUF file the first time)."""
    import torch

    from llm_policy_gen.lm.backbone import load_language_model

    torch.set_num_threads(1)  # as the mode does: two threads on a busy 2-core machine are many times slower
    return load_language_model(gguf, LM_CACHE)


@needs_extra
@pytest.mark.slow
def test_an_encoding_is_computed_once_per_distinct_text(smollm2: Any, tmp_path: Path) -> None:
    import numpy as np

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.lm.encoder import Encoder
    from llm_policy_gen.lm.state_text import state_texts

    spec = get_spec("FrozenLake-v1.deterministic")
    texts = state_texts(spec, spec.observation_discretizer())
    assert len(set(texts)) == 16 and "row 3, col 3" in texts[15] and "FrozenLake" in texts[0]
    texts = texts[::5]  # 4 of the 16 states (a forward pass each)
    first = Encoder(smollm2, "mean", tmp_path)
    out = first.encode(texts + texts[:2])
    assert first.forward_passes == 4 and out.shape == (6, smollm2.hidden_size)
    assert np.array_equal(out[4:], out[:2])
    again = Encoder(smollm2, "mean", tmp_path)  # a new process: every encoding read from disk
    assert np.array_equal(again.encode(texts), out[:4])
    assert again.forward_passes == 0 and again.disk_hits == 4
    last = Encoder(smollm2, "last", tmp_path)  # another pooling is another key
    assert not np.array_equal(last.encode(texts[:1]), out[:1]) and last.forward_passes == 1


@needs_extra
@pytest.mark.slow
def test_the_safetensors_copy_gives_the_gguf_files_encodings(smollm2: Any, gguf: Path) -> None:
    import numpy as np

    from llm_policy_gen.lm.backbone import LanguageModel, load_from_source, load_language_model, model_identity
    from llm_policy_gen.lm.encoder import Encoder

    identity = model_identity(gguf)
    assert identity.sha256 == smollm2.identity.sha256
    if smollm2.loaded_from == "gguf":  # the fixture read the file and wrote the copy: read the copy
        other = load_language_model(gguf, LM_CACHE)
        assert other.loaded_from == "cache"
        direct, cached = Encoder(smollm2, "mean", None), Encoder(other, "mean", None)
    else:  # the fixture read the copy: read the file (16-27 s on an idle 2-core machine)
        model, tokenizer = load_from_source(identity)
        direct = Encoder(LanguageModel(identity, model, tokenizer, "gguf"), "mean", None)
        cached = Encoder(smollm2, "mean", None)
    texts = ["Task: FrozenLake. State: row 0, col 1", "State: cart position in [-2.4, -0.8) m (or below)"]
    assert np.array_equal(direct.encode(texts), cached.encode(texts))


@needs_extra
@pytest.mark.slow
def test_frozen_lm_features_with_ppo_solve_frozenlake_and_evaluate_reproduces_it(
        smollm2: Any, gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 0, PPO over SmolLM2-135M's frozen encodings: held-out 1.0 within the step budget, and ``evaluate`` on the
    run directory gives the summary's figure (both in this process: the command line is tested elsewhere)."""
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    code = main(lake(logs, "--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), "--iterations", "16", "--seed", "0"))
    assert code == 0, capsys.readouterr().err
    run = logs / "FrozenLake-v1" / "r"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_mean"] == 1.0 and summary["solved"], summary
    config = json.loads((run / "config.json").read_text())
    assert config["lm_model"]["sha256"] == smollm2.identity.sha256 and config["lm_model"]["loaded_from"] == "cache"
    assert config["state_texts"] == 16 and config["lm_forward_passes"] + config["lm_encodings_from_cache"] == 16
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"] == summary["best_eval_mean"]
