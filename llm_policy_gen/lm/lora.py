"""LoRA on the backbone (``--lm-lora R``): ``peft`` adapters of rank ``R`` on the attention's query and value
projections, saved as arrays.

The adapted model is a copy of the loaded one (the loaded model stays frozen for the encoder and the scorer);
``lora_alpha`` is ``2 R`` (a scale of 2, as in the LoRA paper's and TWOSOME's settings), no dropout (a rollout's
logits and the optimisation's must be the same function) and the adapters' random initialisation is drawn from the
run's seed. Only the adapters are trainable: ``R * (in + out)`` numbers per adapted projection (SmolLM2-135M at
``R = 8``: 460,800). :func:`adapter_arrays` gives them by name as numpy arrays, :func:`save_adapter` writes them as
safetensors (no pickle) and :func:`load_adapter` puts them back.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TARGET_MODULES", "lora_model", "adapter_arrays", "save_adapter", "load_adapter", "trainable_count",
           "adapter_sizes"]

TARGET_MODULES = ("q_proj", "v_proj")


def lora_model(model: Any, rank: int, seed: int = 0, device: str = "cpu") -> Any:
    """A ``peft`` model over a copy of ``model`` with rank-``rank`` adapters on :data:`TARGET_MODULES`."""
    import torch
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise ValueError(f"a LoRA rank must be >= 1, got {rank}")
    base = copy.deepcopy(model)
    for p in base.parameters():
        p.requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        config = LoraConfig(r=int(rank), lora_alpha=2 * int(rank), lora_dropout=0.0,
                            target_modules=list(TARGET_MODULES), bias="none")
        adapted = get_peft_model(base, config)
    return adapted.to(device)


def adapter_sizes(model: Any, rank: int) -> int:
    """Bytes :func:`lora_model` takes at least for rank ``rank`` over ``model``: its copy of the model, and the
    adapters (``rank * (in + out)`` numbers per adapted projection: weights, gradients and Adam's two moments,
    float32)."""
    copied = sum(p.numel() * p.element_size() for p in model.parameters())
    adapters = sum(int(rank) * (m.in_features + m.out_features) for name, m in model.named_modules()
                   if name.rsplit(".", 1)[-1] in TARGET_MODULES and hasattr(m, "in_features"))
    return int(copied + adapters * 16)


def trainable_count(model: Any) -> int:
    """Trainable numbers of ``model`` (the adapters)."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def adapter_arrays(model: Any) -> dict[str, np.ndarray]:
    """The adapters' tensors by ``peft``'s names, as float32 numpy arrays."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().to("cpu").float().numpy().copy() for k, v in get_peft_model_state_dict(model).items()}


def save_adapter(model: Any, path: Path) -> None:
    """The adapters as a safetensors file (written under a temporary name, then renamed)."""
    import os

    from safetensors.numpy import save_file

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    save_file(adapter_arrays(model), str(tmp))
    os.replace(tmp, path)


def load_adapter(model: Any, source: Path | dict[str, np.ndarray]) -> None:
    """Put adapters back: from a safetensors file or from :func:`adapter_arrays`' dict."""
    import torch
    from peft import set_peft_model_state_dict

    if isinstance(source, Path):
        from safetensors.numpy import load_file

        source = load_file(str(source))
    set_peft_model_state_dict(model, {k: torch.as_tensor(v) for k, v in source.items()})
