"""A language model for features: loaded from a GGUF file or a Hugging Face folder, with its identity.

``--lm-model PATH`` names either a ``.gguf`` file (read by ``transformers`` with the ``gguf`` package, its weights
dequantised to float32) or a folder that ``transformers`` loads (``config.json``, weights, tokenizer files). Only the
base model is kept (no language-model head): the encoder reads its last hidden states.

**Identity.** A model is known by its sha256: of the GGUF file's bytes, or of a folder's files (each file's relative
path and sha256, sorted). It keys the weight cache and the encoding cache, and ``config.json`` records it with the
resolved path.

**Weight cache.** Reading a GGUF file dequantises every tensor (16-27 s for SmolLM2-135M on a busy 2-core machine).
The float32 weights are therefore written once as safetensors, with the model's config and tokenizer files, into
``CACHE/<sha256>/weights/`` (written under a temporary name and renamed, so a killed process leaves no half folder),
with a manifest of the GGUF file's sha256 and every file's own; later loads verify the folder against it and read it
(about 2 s) and give the same weights, hence the same encodings. A copy that differs from its manifest or does not
load is converted again (:mod:`.model_cache`: a damaged or unwritable cache never fails a run).
``save_pretrained`` refuses a GGUF-loaded model, so the weights go through ``safetensors.torch.save_model`` (which
also drops tied copies).

Every problem with the path is a :class:`~llm_policy_gen.errors.UserError` (one line, exit 2): a missing path, a
file that is not GGUF, a folder without ``config.json``, no tokenizer, an architecture ``transformers`` cannot load,
a folder that names code of its own (``auto_map``: every ``from_pretrained`` passes ``trust_remote_code=False``,
:mod:`.custom_code`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..storage.model_file import file_sha256, is_gguf, loading
from .custom_code import refuse_custom_code
from .model_cache import (
    WEIGHTS_FILE,
    Note,
    damaged_note,
    first_line,
    model_folder_lock,
    remove_entry,
    unheard,
    unwritable_note,
    weights_problem,
    write_weights,
)

__all__ = ["LanguageModel", "ModelIdentity", "model_identity", "load_language_model", "load_from_source",
           "default_lm_cache"]

@dataclass(frozen=True)
class ModelIdentity:
    """Which model: the resolved path, its kind (``gguf`` or ``folder``) and its sha256."""

    path: str
    kind: str
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "sha256": self.sha256}


@dataclass
class LanguageModel:
    """A loaded base model (``transformers`` ``PreTrainedModel``), its tokenizer and identity."""

    identity: ModelIdentity
    model: Any
    tokenizer: Any
    loaded_from: str
    """``gguf``, ``folder`` or ``cache`` (the safetensors copy)."""
    load_s: float = 0.0

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def architecture(self) -> str:
        return str(getattr(self.model.config, "model_type", "") or "")

    def describe(self) -> dict[str, Any]:
        """What ``config.json`` records."""
        return {**self.identity.to_dict(), "architecture": self.architecture, "hidden_size": self.hidden_size,
                "loaded_from": self.loaded_from, "load_s": round(self.load_s, 2)}


def default_lm_cache() -> Path:
    """``$XDG_CACHE_HOME/llm-policy-gen/lm`` (``~/.cache`` without the variable)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "lm"


def model_identity(path: str | Path) -> ModelIdentity:
    """The identity of ``--lm-model PATH``; a path that is neither a GGUF file nor a model folder is refused."""
    p = Path(path).expanduser()
    accepted = "give a .gguf file or a Hugging Face model folder (python tools/fetch_model.py --path smollm2 " \
               "prints one)"
    if not p.exists():
        raise UserError(f"--lm-model {path} does not exist; {accepted}")
    p = p.resolve()
    if p.is_dir():
        from transformers.utils import CONFIG_NAME  # the folder's own file, named by its owner (not a run's file)

        if not (p / CONFIG_NAME).is_file():
            raise UserError(f"--lm-model {path} is a folder without {CONFIG_NAME}, not a Hugging Face model folder; "
                            f"{accepted}")
        h = hashlib.sha256()
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(f"{f.relative_to(p).as_posix()}\0{file_sha256(f)}\n".encode())
        return ModelIdentity(str(p), "folder", h.hexdigest())
    if not p.is_file():  # a FIFO would block the read below for ever, a device would be read as a model
        raise UserError(f"--lm-model {path} is not a regular file (a FIFO, a device or a socket); {accepted}")
    try:
        gguf = is_gguf(p)
    except OSError as exc:
        raise UserError(f"--lm-model {path} cannot be read: {exc.strerror or exc}") from None
    if not gguf:
        raise UserError(f"--lm-model {path} is not a GGUF model file (it does not start with GGUF); {accepted}")
    return ModelIdentity(str(p), "gguf", file_sha256(p))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:240]


@contextlib.contextmanager
def _source(identity: ModelIdentity) -> Iterator[tuple[str, str | None]]:
    """(folder, GGUF file name or None) to hand ``from_pretrained``. A GGUF file is read from a temporary folder that
    holds only a link to it: ``transformers`` also reads the folder a GGUF file lies in (a ``tokenizer_config.json``
    there names the tokenizer's class, or classes of its own in ``auto_map``), files its sha256 does not cover."""
    p = Path(identity.path)
    if identity.kind != "gguf":
        refuse_custom_code(p, f"--lm-model {identity.path}")
        yield str(p), None
        return
    with tempfile.TemporaryDirectory(prefix="llm-policy-gen-gguf-") as alone:
        (Path(alone) / p.name).symlink_to(p)
        yield alone, p.name


def load_from_source(identity: ModelIdentity) -> tuple[Any, Any]:
    """(base model in float32, tokenizer) read from the GGUF file alone or the folder itself."""
    with _source(identity) as (source, gguf_file):
        return _load(identity, source, gguf_file)


def _load(identity: ModelIdentity, source: str, gguf_file: str | None) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, trust_remote_code=False)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for a missing tokenizer
        raise UserError(f"--lm-model {identity.path} has no tokenizer transformers can load "
                        f"({_first_line(exc)})") from None
    try:
        model = AutoModel.from_pretrained(source, gguf_file=gguf_file, dtype=torch.float32, trust_remote_code=False)
    except Exception as exc:  # an architecture or tensor layout transformers does not know
        raise UserError(f"--lm-model {identity.path}: transformers cannot load this model "
                        f"({_first_line(exc)})") from None
    model.eval()
    return model, tokenizer


def _read_cache(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    refuse_custom_code(folder, f"the model cache {folder}")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32, trust_remote_code=False)
    model.eval()
    return model, tokenizer


def _saver(model: Any, tokenizer: Any) -> Callable[[Path], None]:
    """Writes the float32 weights, the config and the tokenizer into a folder."""
    def save(folder: Path) -> None:
        from safetensors.torch import save_model

        save_model(model, str(folder / WEIGHTS_FILE))
        model.config.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
    return save


def _from_gguf(identity: ModelIdentity, root: Path, note: Note) -> tuple[Any, Any, str]:
    """(model, tokenizer, ``cache`` or ``gguf``): the verified safetensors copy under ``root``, else the GGUF file
    (and the copy written, by the process that holds the model folder's lock; see :mod:`.model_cache`)."""
    folder = root / identity.sha256 / "weights"
    with model_folder_lock(folder.parent) as writer:
        problem = weights_problem(folder, identity.sha256) if os.path.lexists(folder) else None
        if os.path.lexists(folder) and problem is None:
            try:
                with loading(note, "lm-policy", Path(identity.path), f"its safetensors copy in {folder}"):
                    return (*_read_cache(folder), "cache")
            except Exception as exc:  # a copy that does not load is converted again
                problem = f"it does not load: {first_line(exc)}"
        if problem is not None:
            note(damaged_note("converted weights", folder, problem, f"converting {identity.path} again"))
            if writer.held:
                remove_entry(folder)
        with loading(note, "lm-policy", Path(identity.path),
                     "the GGUF file (dequantised once, then kept as safetensors)"):
            model, tokenizer = load_from_source(identity)
        if writer.held:
            try:
                write_weights(folder, identity.to_dict(), _saver(model, tokenizer))
            except Exception as exc:  # a full disk, a read-only cache, a short safetensors write
                note(unwritable_note(folder, exc))
        else:
            writer.cannot(note, folder)
    return model, tokenizer, "gguf"


def load_language_model(path: str | Path, cache_dir: Path | None = None, note: Note = unheard) -> LanguageModel:
    """The model at ``path``: a GGUF file from its safetensors copy under ``cache_dir`` (default
    :func:`default_lm_cache`) when there is a whole one, else from the file (and the copy written); a folder as it
    is. ``note`` gets the cache's note lines (a damaged copy converted again, a copy that could not be written) and
    a line before a load (model, size, where from) and one after it with its seconds; a model this process holds
    already is not loaded again, and says nothing."""
    import time

    from . import require_extra

    require_extra()
    identity = model_identity(path)
    kept = _LOADED.get(identity)
    if kept is not None:
        return kept
    t0 = time.perf_counter()
    if identity.kind == "folder":
        refuse_custom_code(Path(identity.path), f"--lm-model {identity.path}")  # before a load is said
        with loading(note, "lm-policy", Path(identity.path)):
            model, tokenizer = load_from_source(identity)
        lm = LanguageModel(identity, model, tokenizer, "folder", time.perf_counter() - t0)
    else:
        model, tokenizer, source = _from_gguf(identity, cache_dir or default_lm_cache(), note)
        lm = LanguageModel(identity, model, tokenizer, source, time.perf_counter() - t0)
        if source == "gguf":
            return lm
    _LOADED.clear()  # one model kept: a process that moves on to another model frees the first
    _LOADED[identity] = lm
    return lm


_LOADED: dict[ModelIdentity, LanguageModel] = {}
"""The last model loaded in this process from a folder or the safetensors copy, by identity: a second run in one
process (a sweep's worker, the tests) reuses it instead of reading the weights again (a load from the GGUF file
itself is not kept, so the next load reads the copy it wrote). Nothing trains it in place (LoRA adapts a copy,
:mod:`.lora`)."""
