"""The features table: one row of features per discretized state, what the learner's head reads.

* ``lm`` -- the language model's encoding of each state's text (:mod:`.text`, :mod:`.encoder`), standardised per
  feature over the task's states (mean 0, standard deviation 1; a feature equal in every state becomes 0). In a
  causal model the texts' common prefix adds one vector to every mean-pooled encoding, and features differ in scale
  by orders of magnitude; standardising removes both, and puts the encodings on the scale of the random control.
* ``onehot`` -- the identity: as wide as the number of states, the tabular control.
* ``random`` -- standard normal features of the language model's width (its hidden size; 576, SmolLM2-135M's,
  without a model), drawn from the run's seed: what any fixed distinct code per state gives.
* ``index`` -- each coordinate's bin index scaled to [-1, 1] (:mod:`.coordinates`: one feature per observation
  dimension, a grid's row and column, a discrete state's named factors), the structured non-language control:
  neighbouring bins get close features, with no language in between.
* ``thermometer`` -- per coordinate of ``n`` bins, ``n - 1`` units of which bin ``k`` sets the first ``k`` to 1: the
  same order as ``index``, without assuming that bins are evenly spaced in what they mean.

The control features are issue 31's item-4 comparison (``index`` and ``thermometer``: issue 62's item 6): the
same learner on the same states, so that what the model's encodings add is measured, not assumed.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .coordinates import StateCoordinates

__all__ = ["FeatureKind", "FEATURE_KINDS", "STRUCTURED_KINDS", "DEFAULT_RANDOM_WIDTH", "standardise",
           "features_table", "index_features", "thermometer_features", "structured_width"]

FeatureKind = Literal["lm", "onehot", "random", "index", "thermometer"]
FEATURE_KINDS: tuple[FeatureKind, ...] = ("lm", "onehot", "random", "index", "thermometer")
STRUCTURED_KINDS: tuple[FeatureKind, ...] = ("index", "thermometer")
"""The kinds built from each state's coordinates (:mod:`.coordinates`)."""
DEFAULT_RANDOM_WIDTH = 576
"""Width of the random features when no model gives one (SmolLM2-135M's hidden size)."""


def standardise(x: np.ndarray) -> np.ndarray:
    """Each column to mean 0 and standard deviation 1 over the rows (constant columns to 0), as float32."""
    a = np.asarray(x, dtype=np.float64)
    mean = a.mean(axis=0, keepdims=True)
    std = a.std(axis=0, keepdims=True)
    out = np.where(std > 1e-12, (a - mean) / np.where(std > 1e-12, std, 1.0), 0.0)
    return out.astype(np.float32)


def index_features(coords: StateCoordinates) -> np.ndarray:
    """(n_states, n_coordinates) float32: bin ``k`` of ``n`` as ``2k/(n-1) - 1`` (a coordinate of one bin: 0)."""
    sizes = np.asarray(coords.sizes, dtype=np.float64)
    span = np.where(sizes > 1, sizes - 1, 1.0)
    return np.where(sizes > 1, 2.0 * coords.bins / span - 1.0, 0.0).astype(np.float32)


def thermometer_features(coords: StateCoordinates) -> np.ndarray:
    """(n_states, sum(n - 1)) float32: per coordinate of ``n`` bins, bin ``k`` sets the first ``k`` of its units."""
    blocks = [(coords.bins[:, j:j + 1] > np.arange(n - 1)[None, :]) for j, n in enumerate(coords.sizes)]
    return np.concatenate(blocks, axis=1).astype(np.float32)


def structured_width(kind: FeatureKind, coords: StateCoordinates) -> int:
    """The width of the ``index`` or ``thermometer`` features over ``coords``."""
    return len(coords.sizes) if kind == "index" else sum(n - 1 for n in coords.sizes)


def features_table(kind: FeatureKind, n_states: int, *, encodings: np.ndarray | None = None,
                   width: int | None = None, seed: int = 0, coords: StateCoordinates | None = None) -> np.ndarray:
    """The (n_states, width) float32 features table of ``kind``; ``encodings``: the model's raw encodings of every
    state's text (``lm`` only); ``width``: the random features' width; ``coords``: the states' coordinates
    (``index`` and ``thermometer``)."""
    if kind in STRUCTURED_KINDS:
        if coords is None or coords.n_states != n_states:
            raise ValueError(f"{kind} features need the coordinates of the {n_states} states")
        return index_features(coords) if kind == "index" else thermometer_features(coords)
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
