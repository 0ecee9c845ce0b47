"""Model files by name and a model's width without loading it (:mod:`llm_policy_gen.lm.model_files`): a suite names
``--lm-model models:NAME`` (``tools/fetch_model.py``'s folder), a name not fetched is refused in one line naming the
fetch command, and the random control takes a model's width from its GGUF header (Qwen2.5-Coder-0.5B's 896 without
its 469 MB: a header-only GGUF file written by the ``gguf`` package stands in for it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from run_helpers import load_script
from test_lm_policy import lake, needs_extra, one_line, run_files

from llm_policy_gen.cli import main
from llm_policy_gen.lm.model_files import MODEL_FILES, model_width, models_dir, resolve_model

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("smollm2-torch")


def fetch_script() -> Any:
    return load_script(ROOT / "tools" / "fetch_model.py", "fetch_model")


def header_only_gguf(path: Path, arch: str, width: int) -> Path:
    """A GGUF file with metadata and no tensors: a tokenizer array before the width, as real files have."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"] * 100)
    w.add_embedding_length(width)
    w.add_block_count(24)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_names_and_folder_are_fetch_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fetch = fetch_script()
    assert MODEL_FILES == {name: source.file_name for name, source in fetch.MODELS.items()}
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path))
    assert models_dir() == fetch.models_dir() == tmp_path
    monkeypatch.delenv("LLM_POLICY_GEN_MODELS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_dir() == fetch.models_dir()


def test_a_name_resolves_to_its_file_and_a_path_stays_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path))
    (tmp_path / MODEL_FILES["smollm2"]).write_bytes(b"GGUF")
    assert resolve_model("models:smollm2") == str(tmp_path / MODEL_FILES["smollm2"])
    assert resolve_model("/some/where.gguf") == "/some/where.gguf"


@needs_extra
def test_a_name_not_fetched_is_one_line_naming_the_fetch_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path / "models"))
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-model", "models:qwen2.5-coder-0.5b")) == 2
    line = one_line(capsys.readouterr().err)
    assert "the model is not fetched" in line and "python tools/fetch_model.py qwen2.5-coder-0.5b" in line, line
    assert main(lake(logs, "--lm-model", "models:gpt-9")) == 2
    line = one_line(capsys.readouterr().err)
    assert "models:gpt-9" in line and "smollm2" in line, line
    assert run_files(logs) == []


def test_the_width_comes_from_the_header_or_the_folders_config(tmp_path: Path) -> None:
    assert model_width(header_only_gguf(tmp_path / "q.gguf", "qwen2", 896)) == 896
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 2048}))
    assert model_width(folder) == 2048
    (tmp_path / "junk.gguf").write_bytes(b"not a model")
    assert model_width(tmp_path / "junk.gguf") is None


def test_smollm2s_header_says_576(gguf: Path) -> None:
    assert model_width(gguf) == 576


@needs_extra
@pytest.mark.slow
def test_the_random_control_at_qwens_width_loads_no_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--lm-features random --lm-model models:qwen2.5-coder-0.5b``: 896 features, the model's identity recorded,
    its weights never read (the stand-in file has none, so a load would fail)."""
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(models))
    header_only_gguf(models / MODEL_FILES["qwen2.5-coder-0.5b"], "qwen2", 896)
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "random", "--lm-model", "models:qwen2.5-coder-0.5b", "--iterations", "1",
                     "--lm-n-steps", "64")) == 0
    config = json.loads((logs / "FrozenLake-v1" / "r" / "config.json").read_text())
    assert config["features_width"] == 896 and config["config"]["lm_model"] == "models:qwen2.5-coder-0.5b"
    assert config["lm_model"]["loaded_from"] == "header" and config["lm_model"]["hidden_size"] == 896
    assert config["lm_model"]["path"] == str(models / MODEL_FILES["qwen2.5-coder-0.5b"])
    assert "method: lm-policy(qwen2.5-coder-0.5b, random)" in capsys.readouterr().err
