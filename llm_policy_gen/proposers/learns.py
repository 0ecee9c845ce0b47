"""The backend of a mode that learns by itself: ``--backend q-learning`` (:mod:`llm_policy_gen.modes.qlearning`).

The standard Q-learner steps the environment in its own episodes and proposes nothing, yet a run always has a
backend (config.json describes it, the checkpoint saves its state); this is that backend. ``prepare`` pairs it with
its own mode only, so nothing ever asks it for a table.
"""

from __future__ import annotations

from typing import Any

from ..prompting.context import IterationState
from .base import TableSearch

__all__ = ["QLearningBackend"]


class QLearningBackend(TableSearch):
    """``q-learning``: the ``q-learning`` mode's learner; it proposes nothing."""

    name = "q-learning"
    label = "q-learning (not an LLM)"

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "q-learning",
            "model": "standard epsilon-greedy tabular Q-learning (baseline, not an LLM)",
            "is_llm": False,
            "note": "not an LLM: the q-learning mode explores with its own epsilon-greedy policy in its own "
                    "episodes, counted like every other; the keeper judges its greedy table",
            "seed": self.seed,
        }

    def tables(self, ctx: IterationState, k: int) -> list[tuple[Any, str]]:
        raise RuntimeError("the q-learning backend proposes nothing: it runs only with --mode q-learning")
