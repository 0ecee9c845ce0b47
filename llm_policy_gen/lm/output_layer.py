"""The output layer of a model whose next-token logits do not come from its input embeddings.

The loaded model is the base model (:mod:`.backbone`), which keeps no language-model head. For a model whose
``tie_word_embeddings`` is true the head is the input embedding matrix, so nothing is lost. A model loaded with a
separate output matrix is not: Qwen2.5-Coder-0.5B-Instruct's GGUF file, for one, stores ``output.weight`` apart from
``token_embd.weight`` (the two are quantised differently: Q8_0 and Q5_0 in the Q4_K_M file), and ``transformers``
loads it untied. Action scoring (``--lm-head scores``) needs that matrix: it is read here from the model's own files,
the GGUF tensor ``output.weight`` (dequantised to float32 by ``gguf``, as ``transformers`` does for the other tensors)
or a folder's ``lm_head.weight`` (safetensors), kept beside the dequantised weights as
``CACHE/<model sha256>/output.safetensors`` and attached to the model as a non-persistent buffer, which moves with
the model to its device and is never part of a saved state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .backbone import LanguageModel, ModelIdentity

__all__ = ["OUTPUT_BUFFER", "attach_output_layer"]

OUTPUT_BUFFER = "lpg_output_weight"
"""The buffer's name on the base model."""


def _from_gguf(path: Path) -> Any:
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    for tensor in GGUFReader(str(path)).tensors:
        if tensor.name == "output.weight":
            return torch.from_numpy(np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type),
                                                         dtype=np.float32))
    return None


def _from_folder(folder: Path) -> Any:
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key == "lm_head.weight" or key.endswith(".lm_head.weight"):
                    return f.get_tensor(key).float()
    return None


def _load(identity: ModelIdentity, cache_dir: Path | None) -> Any:
    from safetensors.torch import load_file, save_file

    if identity.kind == "folder":
        return _from_folder(Path(identity.path))
    kept = None if cache_dir is None else cache_dir / identity.sha256 / "output.safetensors"
    if kept is not None and kept.is_file():
        return load_file(str(kept))["weight"]
    weight = _from_gguf(Path(identity.path))
    if weight is not None and kept is not None:
        tmp = kept.with_name(f"{kept.name}.tmp-{os.getpid()}")
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            save_file({"weight": weight}, str(tmp))
            os.replace(tmp, kept)
        except OSError:
            tmp.unlink(missing_ok=True)  # a read-only or full cache costs the next load time, not this run
    return weight


def attach_output_layer(lm: LanguageModel, cache_dir: Path | None) -> bool:
    """Give an untied model its output matrix (see the module doc); True when the model has an output layer now
    (tied, already attached, or found in its files), False when its files hold none."""
    model = lm.model
    if getattr(model.config, "tie_word_embeddings", False) or getattr(model, OUTPUT_BUFFER, None) is not None:
        return True
    weight = _load(lm.identity, cache_dir)
    vocab, hidden = model.get_input_embeddings().weight.shape
    if weight is None or tuple(weight.shape) != (vocab, hidden):
        return False
    model.register_buffer(OUTPUT_BUFFER, weight.to(model.get_input_embeddings().weight.device), persistent=False)
    return True
