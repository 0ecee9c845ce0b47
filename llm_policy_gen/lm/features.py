"""The features table: one row of features per discretized state, what the learner's head reads.

* ``lm`` -- the language model's encoding of each state's text (:mod:`.text`, :mod:`.encoder`), standardised per
  feature over the task's states (mean 0, standard deviation 1; a feature equal in every state becomes 0). In a
  causal model the texts' common prefix adds one vector to every mean-pooled encoding, and features differ in scale
  by orders of magnitude; standardising removes both, and puts the encodings on the scale of the random control.
* ``onehot`` -- the identity: as wide as the number of states, the tabular control.
* ``random`` -- standard normal features of the language model's width (its hidden size; 576, SmolLM2-135M's,
  without a model), drawn from the run's seed: what any fixed distinct code per state gives.

The control features are the issue's item-4 comparison: the same learner on the same states, so that what the
model's encodings add is measured, not assumed.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["FeatureKind", "FEATURE_KINDS", "DEFAULT_RANDOM_WIDTH", "standardise", "features_table"]

FeatureKind = Literal["lm", "onehot", "random"]
FEATURE_KINDS: tuple[FeatureKind, ...] = ("lm", "onehot", "random")
DEFAULT_RANDOM_WIDTH = 576
"""Width of the random features when no model gives one (SmolLM2-135M's hidden size)."""


def standardise(x: np.ndarray) -> np.ndarray:
    """Each column to mean 0 and standard deviation 1 over the rows (constant columns to 0), as float32."""
    a = np.asarray(x, dtype=np.float64)
    mean = a.mean(axis=0, keepdims=True)
    std = a.std(axis=0, keepdims=True)
    out = np.where(std > 1e-12, (a - mean) / np.where(std > 1e-12, std, 1.0), 0.0)
    return out.astype(np.float32)


def features_table(kind: FeatureKind, n_states: int, *, encodings: np.ndarray | None = None,
                   width: int | None = None, seed: int = 0) -> np.ndarray:
    """The (n_states, width) float32 features table of ``kind``; ``encodings``: the model's raw encodings of every
    state's text (``lm`` only); ``width``: the random features' width."""
    if kind == "onehot":
        return np.eye(n_states, dtype=np.float32)
    if kind == "random":
        rng = np.random.default_rng([int(seed), 31])
        return rng.standard_normal((n_states, int(width or DEFAULT_RANDOM_WIDTH))).astype(np.float32)
    if kind == "lm":
        if encodings is None:
            raise ValueError("lm features need the model's encodings")
        raw = np.asarray(encodings, dtype=np.float32)
        if raw.shape[0] != n_states:
            raise ValueError(f"{raw.shape[0]} encodings for {n_states} states")
        return standardise(raw)
    raise ValueError(f"unknown features {kind!r}; accepted: {', '.join(FEATURE_KINDS)}")
