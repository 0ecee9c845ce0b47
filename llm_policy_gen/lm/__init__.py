"""A language model as the policy network's backbone (``--mode lm-policy``), one concept a file.

* :mod:`.model` -- a model loaded from a GGUF file or a Hugging Face folder, its identity (path, sha256) and the
  dequantised weights cached as safetensors;
* :mod:`.text` -- a discretized state written as text from ``prompting/prompts/lm_state.md``;
* :mod:`.model_cache` -- the ``--lm-cache`` folder: every entry checked when read, failed writes and leftovers handled;
* :mod:`.encoder` -- frozen features: one forward pass per distinct text, cached in memory and on disk;
* :mod:`.features` -- the state-features table (the model's encodings, or the one-hot and random controls);
* :mod:`.learner` -- SB3 PPO or sb3-contrib TRPO over the features table, and the read-out table.

``torch``, ``transformers``, ``gguf``, ``safetensors``, ``stable-baselines3`` and ``sb3-contrib`` are the ``lm-policy``
extra: they are imported inside the functions that need them, so the base install still imports this package;
:func:`require_extra` turns their absence into one line (exit 2).
"""

from __future__ import annotations

import importlib.util

from ..errors import UserError

__all__ = ["EXTRA_MODULES", "require_extra"]

EXTRA_MODULES = ("torch", "transformers", "gguf", "safetensors", "stable_baselines3", "sb3_contrib")
"""The modules of the ``lm-policy`` extra."""


def require_extra(what: str = "--mode lm-policy", modules: tuple[str, ...] = EXTRA_MODULES) -> None:
    """Refuse (a :class:`~llm_policy_gen.errors.UserError`) when a module of the ``lm-policy`` extra is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"{what} needs the lm-policy extra ({', '.join(missing)} missing): pip install -e "
                        "'.[lm-policy]' --find-links /opt/wheels (in the project's folder; torch 2.13.0's CPU "
                        "build is there, any other torch pulls a CUDA build of several GB)")
