"""The ``--lm-cache`` folder is never trusted and never fails a run (``llm_policy_gen/lm/model_cache.py``).

Damaged entries (NaN or infinite values, a string array, a truncated file, the wrong shape, a swapped or truncated
weights file, an older copy) are computed again with one note line, and the run's results equal those of an intact
cache; a write that fails (a full disk) is one note line; the temporary files of a killed writer are removed by the
next load that holds the model folder's lock, never those of a live writer. The fast tests use the cache's classes
alone; the slow ones SmolLM2-135M (``tests/conftest.py``'s ``gguf``), through ``main`` in this process.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_lm_policy import LM_CACHE, lake, needs_extra

from llm_policy_gen.cli import main
from llm_policy_gen.lm.model_cache import ArrayCache, model_folder_lock, weights_problem, write_weights

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")

SHA = "ab" * 32
NOTE = "note: the lm cache's"


def _npy(path: Path, value: Any) -> None:
    """``value`` as a ``.npy`` file at ``path``, a new file (never written through a hard link)."""
    path.unlink(missing_ok=True)
    with path.open("wb") as f:
        np.save(f, value)


def _damage(path: Path, how: str) -> None:
    good = np.load(path, allow_pickle=False)
    if how == "nan":
        _npy(path, np.full_like(good, np.nan))
    elif how == "inf":
        _npy(path, np.where(np.arange(good.size).reshape(good.shape) == 0, np.inf, good).astype(good.dtype))
    elif how == "string":
        _npy(path, np.array(["0.5"] * good.size))
    elif how == "shape":
        _npy(path, good.reshape(-1)[:-1])
    elif how == "dtype":
        _npy(path, good.astype(np.float16))
    elif how == "truncated":
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data[: len(data) // 2])
    elif how == "huge":
        _npy(path, np.zeros(1 << 20, dtype=good.dtype))
    elif how == "folder":
        path.unlink()
        path.mkdir()
    else:
        raise AssertionError(how)


# ------------------------------------------------------------------------------------------ the arrays (fast)
@pytest.mark.parametrize("how", ["nan", "inf", "string", "shape", "dtype", "truncated", "huge", "folder"])
def test_a_damaged_array_is_a_miss_removed_with_one_note(tmp_path: Path, how: str) -> None:
    notes: list[str] = []
    cache = ArrayCache(tmp_path / "enc", "encoding", np.dtype(np.float32), notes.append)
    good = np.linspace(-1, 1, 8, dtype=np.float32)
    for key in ("a", "b"):
        cache.write(key, good)
    assert notes == [] and all(np.array_equal(cache.read(k, (8,)), good) for k in ("a", "b"))  # type: ignore[arg-type]
    for key in ("a", "b"):
        path = cache.path(key)
        assert path is not None
        _damage(path, how)
    assert cache.read("a", (8,)) is None and cache.read("b", (8,)) is None
    assert len(notes) == 1 and notes[0].startswith(f"{NOTE} encoding ") and "computed again" in notes[0], notes
    assert cache.damaged == 2 and not any((tmp_path / "enc").iterdir())  # removed
    cache.write("a", good)
    assert np.array_equal(cache.read("a", (8,)), good)  # type: ignore[arg-type]


def test_a_pickled_array_is_never_unpickled(tmp_path: Path) -> None:
    notes: list[str] = []
    cache = ArrayCache(tmp_path, "scores", np.dtype(np.float64), notes.append)
    path = cache.path("k")
    assert path is not None
    np.save(path, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    assert cache.read("k", (1,)) is None and "unreadable" in notes[0] and not path.exists()


def test_a_failed_write_is_one_note_and_the_cache_stops_writing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import llm_policy_gen.lm.model_cache as cache_module

    calls: list[Path] = []

    def full(path: Path, data: bytes) -> None:
        calls.append(path)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(cache_module, "write_bytes_atomic", full)
    notes: list[str] = []
    cache = ArrayCache(tmp_path, "encoding", np.dtype(np.float32), notes.append)
    for key in "abc":
        cache.write(key, np.zeros(3, dtype=np.float32))
    assert len(calls) == 1 and len(notes) == 1 and not cache.writing
    assert notes[0].startswith("note: cannot write the lm cache") and "No space left" in notes[0]


# ------------------------------------------------------------------------------------------ the weights (fast)
def _save(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    (folder / "config.json").write_text("{}")


def _fresh(tmp_path: Path) -> Path:
    folder = tmp_path / SHA / "weights"
    write_weights(folder, {"path": "/m.gguf", "kind": "gguf", "sha256": SHA}, _save)
    assert weights_problem(folder, SHA) is None
    return folder


@pytest.mark.parametrize("how, words", [
    ("truncated", "model.safetensors is not the file converted"),
    ("swapped", "model.safetensors is not the file converted"),
    ("extra", "not the ones its identity.json lists"),
    ("missing", "not the ones its identity.json lists"),
    ("no manifest", "no readable identity.json"),
    ("older copy", "lists no digests"),
    ("other model", "names another model"),
])
def test_a_weights_copy_that_differs_from_its_manifest_is_named(tmp_path: Path, how: str, words: str) -> None:
    folder = _fresh(tmp_path)
    weights, manifest = folder / "model.safetensors", folder / "identity.json"
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[:10])
    elif how == "swapped":
        weights.write_bytes(b"WEIGHTS" * 100)  # the same size
    elif how == "extra":
        (folder / "tokenizer.json").write_text("{}")
    elif how == "missing":
        (folder / "config.json").unlink()
    elif how == "no manifest":
        manifest.unlink()
    elif how == "older copy":  # what versions before the manifest wrote
        manifest.write_text(json.dumps({"path": "/m.gguf", "kind": "gguf", "sha256": SHA}))
    else:
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "sha256": "cd" * 32}))
    problem = weights_problem(folder, SHA)
    assert problem is not None and words in problem, problem


def test_a_weights_write_that_fails_leaves_no_temporary_folder_and_the_old_copy(tmp_path: Path) -> None:
    folder = _fresh(tmp_path)

    def short(tmp: Path) -> None:
        (tmp / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("Error while serializing: IoError(No space left on device)")  # safetensors' own error

    with pytest.raises(RuntimeError):
        write_weights(folder, {"sha256": SHA}, short)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["weights"] and weights_problem(folder, SHA) is None


_HOLD = """
import sys
from pathlib import Path
from llm_policy_gen.lm.model_cache import model_folder_lock
with model_folder_lock(Path(sys.argv[1])) as writer:
    print(writer.held, flush=True)
    sys.stdin.read()
"""


def test_leftovers_are_removed_by_the_lock_holder_and_never_while_another_process_holds_it(tmp_path: Path) -> None:
    root = tmp_path / SHA
    tmp_weights, tmp_output, other = root / "weights.tmp-4242", root / "output.safetensors.tmp-4243", root / "mine.tmp"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "True"
        tmp_weights.mkdir()  # what the holder (a writer) is writing now
        (tmp_weights / "model.safetensors").write_bytes(b"\0" * 1024)
        tmp_output.write_bytes(b"\0" * 1024)
        other.write_text("not a writer's")
        with model_folder_lock(root) as writer:  # a live writer holds it: nothing of its folder is touched
            assert not writer.held and writer.problem is None
        assert tmp_weights.is_dir() and tmp_output.is_file()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with model_folder_lock(root) as writer:  # the holder ended leaving them (as kill -9 would): the next one cleans
        assert writer.held
    assert not tmp_weights.exists() and not tmp_output.exists() and other.is_file()


# ------------------------------------------------------------------------------------------ the real model (slow)
@pytest.fixture(scope="module")
def smollm2(gguf: Path) -> Any:
    """SmolLM2 through the shared safetensors cache (kept in this process: a run here reuses it)."""
    from llm_policy_gen.lm.backbone import load_language_model

    return load_language_model(gguf, LM_CACHE)


def _records(run: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The run's events without wall times, and its best policy."""
    events = [{k: v for k, v in json.loads(x).items() if "wall" not in k}
              for x in (run / "events.jsonl").read_text().splitlines()]
    return events, json.loads((run / "best_policy.json").read_text())


def _notes(err: str) -> list[str]:
    """The cache's note lines (a run has notes of its own: no candidate accepted, ...)."""
    return [x for x in err.splitlines() if x.startswith((NOTE, "note: cannot write the lm cache"))]


def _run_twice(logs: Path, cache: Path, damage: Any, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    """A short run with an empty cache, ``damage(cache)``, the same run again: same records; returns the second
    run's config.json and its notes."""
    argv = [*extra, "--lm-cache", str(cache), "--iterations", "1", "--lm-n-steps", "64", "--seed", "0"]
    assert main(lake(logs, *argv)) == 0
    capsys.readouterr()
    damage(cache)
    code = main(_with_run_id(lake(logs, *argv), "r2"))
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    first, second = logs / "FrozenLake-v1" / "r", logs / "FrozenLake-v1" / "r2"
    assert _records(second) == _records(first)
    return {**json.loads((second / "config.json").read_text()), "notes": _notes(err)}


def _with_run_id(argv: list[str], run_id: str) -> list[str]:
    i = argv.index("--run-id")
    return [*argv[: i + 1], run_id, *argv[i + 2:]]


@needs_extra
@pytest.mark.slow
def test_damaged_encodings_are_computed_again_and_the_run_equals_an_intact_caches(
        smollm2: Any, gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = ["nan", "inf", "string", "truncated", "shape"]

    def damage(cache: Path) -> None:
        files = sorted((cache / smollm2.identity.sha256 / "encodings" / "mean").glob("*.npy"))
        assert len(files) == 16
        for path, how in zip(files, kinds, strict=False):
            _damage(path, how)

    config = _run_twice(tmp_path / "logs", tmp_path / "cache", damage, capsys, "--lm-model", str(gguf))
    assert config["lm_forward_passes"] == len(kinds) and config["lm_encodings_from_cache"] == 16 - len(kinds)
    assert len(config["notes"]) == 1 and config["notes"][0].startswith(f"{NOTE} encoding "), config["notes"]
    for path in (tmp_path / "cache" / smollm2.identity.sha256 / "encodings" / "mean").glob("*.npy"):
        value = np.load(path, allow_pickle=False)  # every one whole again
        assert value.dtype == np.float32 and value.shape == (smollm2.hidden_size,) and np.isfinite(value).all()


@needs_extra
@pytest.mark.slow
def test_damaged_scores_are_computed_again_and_the_zero_shot_table_is_the_intact_caches(
        smollm2: Any, gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def damage(cache: Path) -> None:
        files = sorted((cache / smollm2.identity.sha256 / "scores").glob("*.npy"))
        assert len(files) == 16
        _damage(files[0], "nan")
        _damage(files[1], "inf")

    config = _run_twice(tmp_path / "logs", tmp_path / "cache", damage, capsys, "--lm-model", str(gguf),
                        "--lm-head", "scores", "--lm-features", "onehot")
    assert config["lm_score_batches"] == 1 and config["lm_scores_from_cache"] == 14  # the block scored again
    assert len(config["notes"]) == 1 and config["notes"][0].startswith(f"{NOTE} scores "), config["notes"]
    first = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "r" / "config.json").read_text())
    assert config["zero_shot_table"] == first["zero_shot_table"]


def _copy_weights(smollm2: Any, cache: Path) -> Path:
    """The shared cache's verified copy of SmolLM2's weights, hard-linked into ``cache`` (never written through)."""
    src = LM_CACHE / smollm2.identity.sha256 / "weights"
    assert weights_problem(src, smollm2.identity.sha256) is None
    dst = cache / smollm2.identity.sha256 / "weights"
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


@needs_extra
@pytest.mark.slow
def test_a_swapped_weights_file_is_converted_again_and_gives_the_same_encodings(
        smollm2: Any, gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``model.safetensors`` that loads (SmolLM2's own tensors, one changed) but is not the file converted: the
    GGUF file is read again (16-27 s) and the copy replaced."""
    import torch
    from safetensors.torch import load_file, save_file

    import llm_policy_gen.lm.backbone as backbone
    from llm_policy_gen.lm.encoder import Encoder

    folder = _copy_weights(smollm2, tmp_path / "cache")
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1.0
    weights.unlink()
    save_file(tensors, str(weights), metadata={"format": "pt"})
    monkeypatch.setattr(backbone, "_LOADED", {})  # a new process: nothing loaded yet
    notes: list[str] = []
    lm = backbone.load_language_model(gguf, tmp_path / "cache", notes.append)
    notes = [n for n in notes if not n.startswith("lm-policy: load")]  # the load's progress lines
    assert lm.loaded_from == "gguf" and len(notes) == 1, notes
    assert notes[0].startswith(f"{NOTE} converted weights ") and "model.safetensors is not the file converted" \
        in notes[0] and "converting" in notes[0]
    assert weights_problem(folder, smollm2.identity.sha256) is None
    assert not torch.equal(load_file(str(weights))[name], tensors[name])
    text = ["Task: FrozenLake. State: row 0, col 1"]
    assert np.array_equal(Encoder(lm, "mean").encode(text), Encoder(smollm2, "mean").encode(text))
    again = backbone.load_language_model(gguf, tmp_path / "cache", notes.append)
    notes = [n for n in notes if not n.startswith("lm-policy: load")]  # the loads' progress lines
    assert again.loaded_from == "cache" and len(notes) == 1


@needs_extra
@pytest.mark.slow
def test_a_full_cache_disk_at_the_first_gguf_load_is_one_note_and_the_run_goes_on(
        smollm2: Any, gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every write into ``--lm-cache`` fails as on a full disk: the safetensors writer with its own error type (not
    an ``OSError``), the encodings with ``ENOSPC``."""
    import safetensors.torch

    import llm_policy_gen.lm.backbone as backbone
    import llm_policy_gen.lm.model_cache as cache_module

    def no_room(*args: Any, **kwargs: Any) -> None:
        raise safetensors.SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")

    def enospc(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(safetensors.torch, "save_model", no_room)
    monkeypatch.setattr(cache_module, "write_bytes_atomic", enospc)
    monkeypatch.setattr(backbone, "_LOADED", {})
    logs, cache = tmp_path / "logs", tmp_path / "cache"
    code = main(lake(logs, "--lm-model", str(gguf), "--lm-cache", str(cache), "--iterations", "1",
                     "--lm-n-steps", "64"))
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    notes = _notes(err)
    assert len(notes) == 2 and all(n.startswith("note: cannot write the lm cache") for n in notes), notes
    assert "StorageFull" in notes[0] and "No space left" in notes[1]
    config = json.loads((logs / "FrozenLake-v1" / "r" / "config.json").read_text())
    assert config["lm_model"]["loaded_from"] == "gguf" and config["lm_forward_passes"] == 16
    assert {p.name for p in (cache / smollm2.identity.sha256).iterdir()} <= {"writer.lock"}  # no temporary folder left


@needs_extra
@pytest.mark.slow
def test_a_killed_writers_temporary_weights_are_removed_by_the_next_load(smollm2: Any, gguf: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import llm_policy_gen.lm.backbone as backbone

    folder = _copy_weights(smollm2, tmp_path / "cache")
    left = folder.with_name("weights.tmp-4242")  # what kill -9 during the conversion left: up to the model's size
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"\0" * (1 << 20))
    monkeypatch.setattr(backbone, "_LOADED", {})
    notes: list[str] = []
    lm = backbone.load_language_model(gguf, tmp_path / "cache", notes.append)
    notes = [n for n in notes if not n.startswith("lm-policy: load")]  # the load's progress lines
    assert lm.loaded_from == "cache" and notes == [] and not left.exists()


@needs_extra
@pytest.mark.slow
def test_a_kept_output_layer_is_used_only_when_it_is_this_models_finite_matrix(gguf: Path, tmp_path: Path) -> None:
    """``output.safetensors`` (a GGUF model's separate output matrix, kept beside its weights) of the right model,
    dtype and shape is attached; one of another model or with NaN is removed with a note and read again from the
    GGUF file (SmolLM2's holds no separate ``output.weight``, so this untied stand-in is then left without one)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaModel

    from llm_policy_gen.lm.backbone import LanguageModel, model_identity
    from llm_policy_gen.lm.output_layer import OUTPUT_BUFFER, attach_output_layer

    identity = model_identity(gguf)
    kept = tmp_path / identity.sha256 / "output.safetensors"
    kept.parent.mkdir()
    weight = torch.arange(16 * 8, dtype=torch.float32).reshape(16, 8)

    def untied() -> LanguageModel:
        cfg = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
        return LanguageModel(identity, LlamaModel(cfg), None, "cache")

    save_file({"weight": weight}, str(kept), metadata={"source_sha256": identity.sha256})
    lm, notes = untied(), []
    assert attach_output_layer(lm, tmp_path, notes.append) and notes == []
    assert torch.equal(getattr(lm.model, OUTPUT_BUFFER), weight)
    for metadata, value, words in (({"source_sha256": "cd" * 32}, weight, "made from another model"),
                                   ({"source_sha256": identity.sha256}, weight * float("nan"), "NaN"),
                                   ({}, weight, "an older copy")):
        kept.unlink(missing_ok=True)
        save_file({"weight": value}, str(kept), metadata=metadata)
        lm, notes = untied(), []
        assert not attach_output_layer(lm, tmp_path, notes.append) and not kept.exists()
        assert len(notes) == 1 and notes[0].startswith(f"{NOTE} output layer ") and words in notes[0], notes
    kept.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")  # truncated
    lm, notes = untied(), []
    assert not attach_output_layer(lm, tmp_path, notes.append) and "unreadable" in notes[0]
