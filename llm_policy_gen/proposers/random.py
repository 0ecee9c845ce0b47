"""``random``: uniformly random tables (a baseline, not a language model).

K uniformly random tables each iteration, drawn from ``numpy.random.default_rng([seed, iteration, candidate])``;
the keeper keeps the best one, so this is random search with the same evaluation budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..prompting.context import IterationState
from .base import TableSearch

__all__ = ["RandomProposer"]


class RandomProposer(TableSearch):
    """Uniformly random tables, seeded by ``(seed, iteration, candidate)``."""

    name = "random"
    label = "random (not an LLM)"

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "random",
            "model": "uniformly random table (baseline, not an LLM)",
            "is_llm": False,
            "note": "not an LLM: uniformly random tables, seeded by (seed, iteration, candidate)",
            "seed": self.seed,
        }

    def tables(self, ctx: IterationState, k: int) -> list[tuple[np.ndarray, str]]:
        out = []
        for c in range(1, k + 1):
            rng = np.random.default_rng([self.seed, ctx.iteration, c])
            table = rng.integers(0, ctx.actions.n_actions, ctx.observation.n_states, dtype=np.int64)
            out.append((table, f"uniformly random table (seed {self.seed}, iteration {ctx.iteration}, candidate {c})"))
        return out
