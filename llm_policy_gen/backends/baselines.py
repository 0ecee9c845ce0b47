"""Classic baselines on the same discretization: ``q-learning`` and ``random``. Neither is a language model.

Both are backends: they answer each iteration's call with a table in the run's output format, the loop validates,
evaluates and keeps it exactly as it does an LLM's proposal, and the same keeper reverts regressions. Like the
offline optimiser they read the :class:`~llm_policy_gen.prompt.PromptContext` the prompt was rendered from and never
step an environment, so every episode they learn from is one the loop ran and counted. "Does the LLM beat a table
learner with the same budget of episodes?" then has an answer.

``q-learning`` -- off-policy tabular Q-learning over the experience the loop collects. At each call it takes the
episodes that arrived in the memory since its previous call (the training episodes, which run the best table with
epsilon exploration, and the test episodes of the best and of earlier candidates) and sweeps them once, in arrival
order, with the update ``Q(s, a) += alpha * (r + gamma * max_a' Q(s', a') - Q(s, a))``; the target is ``r`` at a
termination, and the last step of an episode cut by the time limit is skipped (its next state is not recorded).
Hyperparameters (documented defaults):

* ``alpha = 0.2`` -- step size;
* ``gamma = 0.99`` -- discount;
* optimistic initialisation: every ``Q(s, a)`` starts at ``q_init``; ``None`` (the default) means
  ``max(0, largest step reward seen in the first batch) / (1 - gamma)``, the value of collecting the best reward
  seen forever, so that untried actions look at least as good as tried ones and the greedy table explores them
  (CartPole: 1 / 0.01 = 100). With sparse rewards (FrozenLake: 0 until the goal) this is 0: a larger start would
  make the goal's reward of 1 look worse than wandering, and it would take hundreds of sweeps to unlearn.

The proposal is the greedy table of ``Q``; among tied actions the current table's action is kept, then the lowest
index.

``random`` -- a uniformly random table each iteration, drawn from ``numpy.random.default_rng([seed, iteration])``;
the keeper keeps the best one, so this is random search with the same evaluation budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..collect import Episode
from ..errors import UserError
from ..prompt import PromptContext
from .base import Backend
from .proposer import TableProposer

__all__ = ["QLearningBackend", "RandomTableBackend", "make_baseline", "BASELINES"]

BASELINES = ("q-learning", "random")


class QLearningBackend(TableProposer):
    """Tabular Q-learning over the loop's episodes. See the module docstring for the algorithm."""

    name = "q-learning"
    label = "q-learning (not an LLM)"

    def __init__(self, seed: int = 0, alpha: float = 0.2, gamma: float = 0.99, q_init: float | None = None) -> None:
        if not 0.0 < alpha <= 1.0:
            raise UserError(f"bad q-learning alpha {alpha!r}: accepted a number in (0, 1]")
        if not 0.0 <= gamma < 1.0:
            raise UserError(f"bad q-learning gamma {gamma!r}: accepted a number in [0, 1)")
        self.seed = int(seed)
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.q_init = q_init
        self.q: np.ndarray | None = None
        self.updates = 0
        self._last_seen: dict[int, Episode] = {}
        """Episodes in memory at the previous call, by id; holding them keeps their ids from being reused."""

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "q-learning",
            "model": "tabular Q-learning (baseline, not an LLM)",
            "is_llm": False,
            "note": "not an LLM: classic tabular Q-learning on the same discretization and episode budget",
            "seed": self.seed,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "q_init": "max(0, largest step reward in the first batch) / (1 - gamma)"
            if self.q_init is None
            else self.q_init,
        }

    def new_episodes(self, ctx: PromptContext) -> list[Episode]:
        """Episodes in the memory that were not there at the previous call, in arrival order."""
        episodes = list(ctx.memory.episodes)
        new = [e for e in episodes if id(e) not in self._last_seen]
        self._last_seen = {id(e): e for e in episodes}
        return new

    def _init_q(self, n_states: int, n_actions: int, episodes: Sequence[Episode]) -> np.ndarray:
        q0 = self.q_init
        if q0 is None:
            r_max = max((float(e.rewards.max()) for e in episodes if e.length), default=0.0)
            q0 = max(0.0, r_max) / (1.0 - self.gamma)
        self.q_init = float(q0)
        return np.full((n_states, n_actions), float(q0))

    def learn(self, episodes: Sequence[Episode]) -> int:
        """One sweep of Q-learning updates over ``episodes``; returns the number of updates."""
        assert self.q is not None
        q, alpha, gamma = self.q, self.alpha, self.gamma
        n = 0
        for ep in episodes:
            states, actions, rewards = ep.states.tolist(), ep.actions.tolist(), ep.rewards.tolist()
            last = ep.length - 1
            for t in range(ep.length):
                s, a = states[t], actions[t]
                if t < last:
                    target = rewards[t] + gamma * float(q[states[t + 1]].max())
                elif ep.terminated:
                    target = rewards[t]
                else:  # cut by the time limit (or the record ends): the next state is unknown
                    continue
                q[s, a] += alpha * (target - q[s, a])
                n += 1
        self.updates += n
        return n

    def greedy(self, current: np.ndarray) -> np.ndarray:
        """argmax_a Q(s, a); ties keep the current action, then the lowest index."""
        assert self.q is not None
        q = self.q
        best = q.max(axis=1)
        cur = np.asarray(current, dtype=np.int64)
        keep = q[np.arange(q.shape[0]), cur] >= best
        return np.where(keep, cur, np.argmax(q, axis=1)).astype(np.int64)

    def propose(self, ctx: PromptContext) -> tuple[np.ndarray, str]:
        new = self.new_episodes(ctx)
        if self.q is None:
            self.q = self._init_q(ctx.observation.n_states, ctx.actions.n_actions, new)
        n = self.learn(new)
        table = self.greedy(ctx.current_table)
        changed = int(np.sum(table != np.asarray(ctx.current_table)))
        return table, (
            f"greedy table of tabular Q-learning (alpha {self.alpha}, gamma {self.gamma}, optimistic init "
            f"{self.q_init:.4g}); {n} updates from {len(new)} new episodes, {self.updates} in all; "
            f"{changed} states changed"
        )



class RandomTableBackend(TableProposer):
    """A uniformly random table each iteration, seeded by ``(seed, iteration)``."""

    name = "random"
    label = "random (not an LLM)"

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "random",
            "model": "uniformly random table (baseline, not an LLM)",
            "is_llm": False,
            "note": "not an LLM: a uniformly random table each iteration, seeded by (seed, iteration)",
            "seed": self.seed,
        }

    def propose(self, ctx: PromptContext) -> tuple[np.ndarray, str]:
        rng = np.random.default_rng([self.seed, ctx.iteration])
        table = rng.integers(0, ctx.actions.n_actions, ctx.observation.n_states, dtype=np.int64)
        return table, f"uniformly random table (seed {self.seed}, iteration {ctx.iteration})"



def make_baseline(name: str, seed: int = 0) -> Backend:
    """The baseline called ``name`` (``q-learning`` or ``random``) with its documented defaults."""
    if name == "q-learning":
        return QLearningBackend(seed=seed)
    if name == "random":
        return RandomTableBackend(seed=seed)
    raise UserError(f"unknown baseline {name!r}; accepted: {', '.join(BASELINES)}")
