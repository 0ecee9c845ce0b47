"""The lm-policy mode's model on ``train`` and ``train --resume``: no folder runs code of its own, a resume goes on
only with the model the run was made with, and config.json names the files the run read wherever a resume starts.

The model is a tiny Llama built here, as a folder or a GGUF file (a byte-level tokenizer, one layer of width 16,
random weights from a seed): loaded in a fraction of a second, so that a run and its resume take a second or two
in process. The tests that start the command line as a user does (stdin answering ``y``) are marked slow: each
process imports torch and transformers (10-25 s on the shared machine).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import run_records
from test_lm_policy import lake, needs_extra, one_line, run_files

from llm_policy_gen.cli import main

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")

FAST = ("--lm-n-steps", "32", "--lm-batch-size", "32", "--lm-epochs", "1", "--lm-net-arch", "8")
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"
"""A model folder's own module: importing it writes the marker."""


def tiny_model(folder: Path, seed: int = 0) -> Path:
    """A Llama folder transformers loads without network: byte-level tokenizer, 1 layer of width 16, tied output."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(alphabet), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return folder


def tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A GGUF file transformers loads: a Llama of 1 layer of width 16 (float32 tensors), a byte-level vocabulary."""
    import gguf
    import numpy as np
    from tokenizers import pre_tokenizers

    rng = np.random.default_rng(seed)
    tokens = [*sorted(pre_tokenizers.ByteLevel.alphabet()), "\u0120\u0120"]  # one merge: two spaces
    h, ff, n = 16, 32, len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(h)
    w.add_feed_forward_length(ff)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(h // 2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * n)
    w.add_token_merges(["\u0120 \u0120"])
    shapes = {"token_embd.weight": (n, h), "output_norm.weight": (h,), "blk.0.attn_norm.weight": (h,),
              "blk.0.ffn_norm.weight": (h,), "blk.0.attn_q.weight": (h, h), "blk.0.attn_k.weight": (h, h),
              "blk.0.attn_v.weight": (h, h), "blk.0.attn_output.weight": (h, h), "blk.0.ffn_gate.weight": (ff, h),
              "blk.0.ffn_up.weight": (ff, h), "blk.0.ffn_down.weight": (h, ff)}
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(json.dumps(data), encoding="utf-8")


def with_custom_code(folder: Path, file: str, marker: Path) -> Path:
    """``folder`` as a model of an architecture of its own (``model_type`` unknown to transformers, no tokenizer class
    it knows), whose ``file`` names its classes in ``auto_map``, in a module that writes ``marker`` when imported:
    transformers asks "Do you wish to run the custom code? [y/N]" unless ``trust_remote_code`` is given."""
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)), encoding="utf-8")
    edit_json(folder / "config.json", model_type="evil")
    edit_json(folder / "tokenizer_config.json", tokenizer_class=None)
    edit_json(folder / file, auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]} if "tokenizer" in file else
              {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"})
    return folder


def cli(cwd: Path, *args: str, stdin: str = "y\n") -> subprocess.CompletedProcess[str]:
    """The command as a user types it, answering ``y`` to any question on stdin."""
    return subprocess.run([sys.executable, "-m", "llm_policy_gen", *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd, timeout=600, env={**os.environ, "LLM_POLICY_GEN_WORKERS": "1"})


def files_of(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ------------------------------------------------------------------------------------------- code of the model's own
@needs_extra
@pytest.mark.slow
@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json", "preprocessor_config.json"])
def test_a_model_folder_with_code_of_its_own_is_refused_and_its_code_never_runs(tmp_path: Path, file: str) -> None:
    marker = tmp_path / "ran"
    folder = with_custom_code(tiny_model(tmp_path / "model"), file, marker)
    logs = tmp_path / "logs"
    r = cli(tmp_path, *lake(logs, "--lm-model", str(folder), "--lm-cache", str(tmp_path / "cache")))
    line = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert f"{folder / file} has 'auto_map'" in line and "trust_remote_code=False" in line, line
    assert not marker.exists() and run_files(logs) == [] and not (tmp_path / "cache").exists()


@needs_extra
@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_transformers_is_never_asked_to_trust_a_folders_code(tmp_path: Path, file: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind the check, every load passes ``trust_remote_code=False``: transformers itself refuses the code, and
    never asks (a ``y`` waiting on stdin is not read)."""
    from llm_policy_gen.errors import UserError
    from llm_policy_gen.lm import backbone

    marker = tmp_path / "ran"
    folder = with_custom_code(tiny_model(tmp_path / "model"), file, marker)
    monkeypatch.setattr(backbone, "refuse_custom_code", lambda *_: None, raising=False)  # no check
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    with pytest.raises(UserError, match="transformers cannot load|no tokenizer"):
        backbone.load_from_source(backbone.model_identity(folder))
    assert not marker.exists() and sys.stdin.read() == "y\n"


@needs_extra
def test_a_gguf_model_is_its_file_alone_whatever_lies_beside_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers reads the folder a GGUF file lies in too: a ``tokenizer_config.json`` there would pick another
    tokenizer class (or, with ``auto_map``, code of its own) for the same sha256. The file is read alone."""
    from llm_policy_gen.lm.backbone import load_from_source, model_identity

    (tmp_path / "alone").mkdir()
    (tmp_path / "crowded").mkdir()
    alone = tiny_gguf(tmp_path / "alone" / "tiny.gguf")
    crowded = Path(shutil.copy(alone, tmp_path / "crowded" / "tiny.gguf"))
    marker = tmp_path / "ran"
    (crowded.parent / "evil.py").write_text(EVIL.format(marker=str(marker)), encoding="utf-8")
    edit_json(crowded.parent / "tokenizer_config.json", tokenizer_class="BertTokenizer",
              auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]})
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    text = "Task: walk. State: row 3, col 2"
    (_, want), (_, got) = (load_from_source(model_identity(p)) for p in (alone, crowded))
    assert list(got(text)["input_ids"]) == list(want(text)["input_ids"])
    assert type(got) is type(want) and not marker.exists()


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One iteration of ``--lm-features lm`` over the tiny model (``model/``), with ``--lm-cache cache/``."""
    if needs_extra.args[0]:  # the mark's condition: the extra is missing
        pytest.skip(needs_extra.kwargs["reason"])
    root = tmp_path_factory.mktemp("base")
    model = tiny_model(root / "model")
    assert main(lake(root / "logs", "--lm-model", str(model), "--lm-cache", str(root / "cache"), *FAST,
                     "--iterations", "1")) == 0
    return root


def copied(base: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(the base run's folder copied into ``tmp_path``, its run directory), config.json naming the copied model."""
    root = tmp_path / "w"
    shutil.copytree(base, root)
    rd = root / "logs" / "FrozenLake-v1" / "r"
    text = (rd / "config.json").read_text(encoding="utf-8")
    (rd / "config.json").write_text(text.replace(str(base), str(root)), encoding="utf-8")
    return root, rd


@needs_extra
@pytest.mark.slow
def test_a_run_directory_naming_a_folder_with_code_of_its_own_is_refused_on_resume(base_run: Path,
                                                                                    tmp_path: Path) -> None:
    from llm_policy_gen.lm.backbone import model_identity

    root, rd = copied(base_run, tmp_path)
    marker = tmp_path / "ran"
    evil = with_custom_code(tiny_model(tmp_path / "evil", seed=1), "config.json", marker)
    record = json.loads((rd / "config.json").read_text(encoding="utf-8"))
    record["config"]["lm_model"] = str(evil)
    record["lm_model"].update(path=str(evil), sha256=model_identity(evil).sha256)  # a foreign record, consistent
    (rd / "config.json").write_text(json.dumps(record), encoding="utf-8")
    before = files_of(root)
    r = cli(tmp_path, "train", "--resume", str(rd), "--iterations", "2", "--lm-cache", str(root / "cache"))
    assert r.returncode == 2, r.stderr
    assert "has 'auto_map'" in one_line(r.stderr)
    assert not marker.exists() and files_of(root) == before


# ------------------------------------------------------------------------------------------------ the model's identity
@needs_extra
@pytest.mark.parametrize("head", ["features", "scores", "lora"])
def test_a_resume_after_the_models_weights_changed_is_refused_and_changes_nothing(
        tmp_path: Path, head: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The features head, the frozen scores head and LoRA adapters: each checks the model's sha256 on resume (the
    model cache is the default one, under the test's own ``XDG_CACHE_HOME``)."""
    model = tiny_model(tmp_path / "model")
    extra = {"features": (), "scores": ("--lm-head", "scores"),
             "lora": ("--lm-head", "scores", "--lm-lora", "2", "--lm-features", "onehot")}[head]
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-model", str(model), *extra, *FAST, "--iterations", "1")) == 0
    rd = logs / "FrozenLake-v1" / "r"
    tiny_model(tmp_path / "other", seed=1)
    shutil.copy(tmp_path / "other" / "model.safetensors", model / "model.safetensors")  # same path, other weights
    before, cached = files_of(tmp_path), files_of(Path(os.environ["XDG_CACHE_HOME"]))
    capsys.readouterr()
    assert main(["train", "--resume", str(rd), "--iterations", "2"]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"--lm-model {model} is not the model this run was made with" in line, line
    assert files_of(tmp_path) == before and files_of(Path(os.environ["XDG_CACHE_HOME"])) == cached


@needs_extra
@pytest.mark.slow
def test_a_run_whose_model_moved_resumes_with_lm_model_to_the_uninterrupted_runs_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run moved to another machine: its model is elsewhere (the refusal says to name it); ``--lm-model NEW_PATH``
    of the same bytes goes on, to the files of a run that went through; the path of another model is refused."""
    model = tiny_model(tmp_path / "model")
    args = ("--lm-model", str(model), *FAST)
    assert main(lake(tmp_path / "whole", *args, "--iterations", "3")) == 0
    assert main(lake(tmp_path / "part", *args, "--iterations", "1")) == 0
    moved = model.rename(tmp_path / "moved")
    rd = tmp_path / "part" / "FrozenLake-v1" / "r"
    resume = ["train", "--resume", str(rd), "--iterations", "3"]
    capsys.readouterr()
    assert main(resume) == 2
    assert "does not exist" in (line := one_line(capsys.readouterr().err)) and "give --lm-model PATH" in line, line
    assert main([*resume, "--lm-model", str(tiny_model(tmp_path / "another", seed=2))]) == 2
    assert main([*resume, "--lm-model", str(moved)]) == 0
    assert run_records(rd) == run_records(tmp_path / "whole" / "FrozenLake-v1" / "r")


@needs_extra
def test_lm_model_cannot_change_on_resume_where_the_run_recorded_no_model(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "onehot", *FAST, "--iterations", "1")) == 0
    rd = logs / "FrozenLake-v1" / "r"
    before = files_of(rd)
    model = tiny_model(tmp_path / "model")
    capsys.readouterr()
    assert main(["train", "--resume", str(rd), "--iterations", "2", "--lm-model", str(model)]) == 2
    assert "--lm-model cannot change on resume" in one_line(capsys.readouterr().err)
    assert files_of(rd) == before


# ------------------------------------------------------------------------------------------------ paths in config.json
@needs_extra
def test_relative_model_and_cache_paths_are_recorded_absolute(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_model(tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(lake(Path("logs"), "--lm-model", "model", "--lm-cache", "~/lm", *FAST, "--iterations", "1")) == 0
    record = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "r" / "config.json").read_text(encoding="utf-8"))
    assert record["config"]["lm_model"] == str(tmp_path / "model") == record["lm_model"]["path"]
    assert record["config"]["lm_cache"] == str(tmp_path / "home" / "lm") and (tmp_path / "home" / "lm").is_dir()


@needs_extra
def test_an_older_run_with_a_relative_model_path_resumes_from_its_folder_and_no_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """config.json of an older version names ``--lm-model model`` as typed: a resume reads it from the folder it runs
    in, as then; from another folder holding another ``model``, the sha256 refuses it."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    tiny_model(root / "model")
    tiny_model(elsewhere / "model", seed=3)
    monkeypatch.chdir(root)
    assert main(lake(root / "logs", "--lm-model", "model", *FAST, "--iterations", "1")) == 0
    rd = root / "logs" / "FrozenLake-v1" / "r"
    record = json.loads((rd / "config.json").read_text(encoding="utf-8"))
    record["config"]["lm_model"] = "model"  # as an older version recorded it
    (rd / "config.json").write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    before = files_of(root)
    capsys.readouterr()
    assert main(["train", "--resume", str(rd), "--iterations", "2"]) == 2
    assert "is not the model this run was made with" in one_line(capsys.readouterr().err)
    assert files_of(root) == before
    monkeypatch.chdir(root)
    assert main(["train", "--resume", str(rd), "--iterations", "2"]) == 0


# ------------------------------------------------------------------------------------------------------ --lm-cache
@needs_extra
def test_a_model_cache_a_run_directory_names_is_written_on_resume_only_when_named(
        base_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, rd = copied(base_run, tmp_path)
    cache = root / "cache"
    before = files_of(root)
    capsys.readouterr()
    assert main(["train", "--resume", str(rd), "--iterations", "2"]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"names the model cache folder {cache}" in line and f"--lm-cache {cache}" in line, line
    assert files_of(root) == before
    other = tmp_path / "mine"
    assert main(["train", "--resume", str(rd), "--iterations", "2", "--lm-cache", str(other)]) == 0
    assert any(other.rglob("*.npy")) and files_of(cache) == {p: b for p, b in before.items() if cache in p.parents}
