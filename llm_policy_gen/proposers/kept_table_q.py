"""``kept-table-q``: tabular Q-learning over the episodes of the kept table (a proposer, not a language model).

Until the standard learner took the name this backend was ``q-learning``; it is not the classic baseline, since it
never explores with its own policy: it learns only from the episodes the engine runs for the kept table and the
candidates (it ends at -500 on CliffWalking-v1 and -200 on Taxi-v4, which the standard ``q-learning`` mode solves,
:mod:`llm_policy_gen.modes.qlearning`). Run directories recorded under the old name resume as ``kept-table-q``
(:func:`llm_policy_gen.schema.aliases.recorded_backend`).

Off-policy tabular Q-learning over the experience the engine collects. At each call it takes the episodes counted
since its previous call (``IterationState.fresh``: the training episodes, which run the best table with epsilon
exploration, and the test and confirmation episodes of the incumbent and of earlier candidates) and sweeps them
once, in arrival order, with the update ``Q(s, a) += alpha * (r + gamma * max_a' Q(s', a') - Q(s, a))``; the target
is ``r`` at a termination, and the last step of an episode cut by the time limit is skipped (its next state is not
recorded).
Hyperparameters (documented defaults):

* ``alpha = 0.2`` -- step size;
* ``gamma = 0.99`` -- discount;
* optimistic initialisation: every ``Q(s, a)`` starts at ``q_init``; ``None`` (the default) means
  ``max(0, largest step reward seen in the first batch) / (1 - gamma)``, the value of collecting the best reward
  seen forever, so that untried actions look at least as good as tried ones and the greedy table explores them
  (CartPole: 1 / 0.01 = 100). With sparse rewards (FrozenLake: 0 until the goal) this is 0: a larger start would
  make the goal's reward of 1 look worse than wandering, and it would take hundreds of sweeps to unlearn.

The first candidate is the greedy table of ``Q``; among tied actions the current table's action is kept, then the
lowest index. With K > 1 the other candidates are Boltzmann samples of ``Q``.

Like the offline optimiser it reads the :class:`~llm_policy_gen.prompting.builder.IterationState` and never steps an
environment, so every episode it learns from is one the engine ran and counted ("does the LLM beat a table learner
with the same budget of episodes?" then has an answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..clients.transcript import Transcript
from ..collect import Episode
from ..errors import UserError
from ..modes.qtable import optimistic_init, q_sweep
from ..prompting.context import IterationState
from .base import TableSearch

__all__ = ["KeptTableQProposer"]


class KeptTableQProposer(TableSearch):
    """Tabular Q-learning over the loop's episodes. See the module docstring for the algorithm."""

    name = "kept-table-q"
    label = "kept-table-q (not an LLM)"

    def __init__(self, seed: int = 0, transcript: Transcript | None = None, alpha: float = 0.2, gamma: float = 0.99,
                 q_init: float | None = None) -> None:
        super().__init__(seed, transcript)
        if not 0.0 < alpha <= 1.0:
            raise UserError(f"bad kept-table-q alpha {alpha!r}: accepted a number in (0, 1]")
        if not 0.0 <= gamma < 1.0:
            raise UserError(f"bad kept-table-q gamma {gamma!r}: accepted a number in [0, 1)")
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.q_init = q_init
        self.q: np.ndarray | None = None
        self.updates = 0

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "kept-table-q",
            "model": "tabular Q-learning over the kept table's episodes (baseline, not an LLM)",
            "is_llm": False,
            "note": "not an LLM: tabular Q-learning over the episodes the run plays for the kept table and the "
                    "candidates, on the same discretization and episode budget",
            "seed": self.seed,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "q_init": "max(0, largest step reward in the first batch) / (1 - gamma)"
            if self.q_init is None
            else self.q_init,
        }

    def _init_q(self, n_states: int, n_actions: int, episodes: Sequence[Episode]) -> np.ndarray:
        q0 = optimistic_init(episodes, self.gamma) if self.q_init is None else self.q_init
        self.q_init = float(q0)
        return np.full((n_states, n_actions), float(q0))

    def learn(self, episodes: Sequence[Episode]) -> int:
        """One sweep of Q-learning updates over ``episodes``; returns the number of updates."""
        assert self.q is not None
        n = q_sweep(self.q, episodes, self.alpha, self.gamma)
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

    def tables(self, ctx: IterationState, k: int) -> list[tuple[np.ndarray, str]]:
        """The greedy table of Q after learning from the episodes counted since the last call; for K > 1 the
        others are Boltzmann samples of Q (temperature: the spread of Q), each seeded by (seed, iteration, k)."""
        new = list(ctx.fresh)
        if self.q is None:
            self.q = self._init_q(ctx.observation.n_states, ctx.actions.n_actions, new)
        n = self.learn(new)
        table = self.greedy(ctx.current_table)
        changed = int(np.sum(table != np.asarray(ctx.current_table)))
        out = [(table, (
            f"greedy table of tabular Q-learning (alpha {self.alpha}, gamma {self.gamma}, optimistic init "
            f"{self.q_init:.4g}); {n} updates from {len(new)} new episodes, {self.updates} in all; "
            f"{changed} states changed"
        ))]
        for c in range(2, k + 1):
            rng = np.random.default_rng([self.seed, ctx.iteration, c])
            out.append((self.sample(rng), f"Boltzmann sample {c} of the Q-table"))
        return out

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A table drawn from softmax(Q / T) per state, T = the mean spread of Q across actions."""
        assert self.q is not None
        q = self.q - self.q.max(axis=1, keepdims=True)
        temp = max(1e-6, float(np.mean(np.ptp(self.q, axis=1))) or 1.0)
        p = np.exp(q / temp)
        p /= p.sum(axis=1, keepdims=True)
        u = rng.random((q.shape[0], 1))
        return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), q.shape[1] - 1).astype(np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q, "q_init": self.q_init, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q = None if state.get("q") is None else np.asarray(state["q"], dtype=np.float64).copy()
        self.q_init = state.get("q_init")
        self.updates = int(state.get("updates", 0))
