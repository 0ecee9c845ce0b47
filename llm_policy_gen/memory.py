"""The experience memory: episodes kept across iterations, best/worst selection and per-state evidence.

Per-state evidence summarises every kept step, so a prompt can carry it with a size that does not grow with
episode length: for each state the number of visits and, per action, how often it was taken and the mean
*discounted return-to-go* after taking it (``G_t = r_t + gamma * G_{t+1}``). Steps in the last ``horizon`` steps of an
episode cut by the time limit are left out of the return-to-go averages (their future is unknown), but counted as
visits. Transition counts ``(state, action) -> next state`` (with a terminal column) are kept too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .collect import Episode

__all__ = ["StateEvidence", "ExperienceMemory"]


@dataclass
class StateEvidence:
    """Per-state summary of the memory."""

    visits: np.ndarray
    """(n_states,) steps spent in each state."""
    counts: np.ndarray
    """(n_states, n_actions) times each action was taken (and its return-to-go known)."""
    q_mean: np.ndarray
    """(n_states, n_actions) mean discounted return-to-go; NaN where ``counts`` is 0."""
    transitions: np.ndarray
    """(n_states, n_actions, n_states + 1) next-state counts; the last column is 'episode terminated'."""
    reward_sum: np.ndarray
    """(n_states, n_actions) sum of immediate rewards over every step (divide by ``transitions.sum(-1)``)."""
    gamma: float


class ExperienceMemory:
    """Keeps up to ``capacity`` episodes (the oldest go first, the best few are never dropped)."""

    def __init__(
        self, n_states: int, n_actions: int, capacity: int = 200, gamma: float = 0.98, keep_best: int = 4
    ) -> None:
        self.n_states = int(n_states)
        self.n_actions = int(n_actions)
        self.capacity = int(capacity)
        self.gamma = float(gamma)
        self.keep_best = int(keep_best)
        self.episodes: list[Episode] = []

    def __len__(self) -> int:
        return len(self.episodes)

    def add(self, episodes: Iterable[Episode]) -> None:
        self.episodes.extend(episodes)
        while len(self.episodes) > self.capacity:
            protected = {id(e) for e in self.best(self.keep_best)}
            for k, e in enumerate(self.episodes):
                if id(e) not in protected:
                    del self.episodes[k]
                    break
            else:  # pragma: no cover - capacity < keep_best
                del self.episodes[0]

    def best(self, k: int) -> list[Episode]:
        """The ``k`` highest-return episodes (newest first among ties)."""
        order = sorted(range(len(self.episodes)), key=lambda i: (-self.episodes[i].ret, -i))
        return [self.episodes[i] for i in order[: max(0, k)]]

    def worst(self, k: int) -> list[Episode]:
        """The ``k`` lowest-return episodes (newest first among ties)."""
        order = sorted(range(len(self.episodes)), key=lambda i: (self.episodes[i].ret, -i))
        return [self.episodes[i] for i in order[: max(0, k)]]

    def evidence(self, horizon: int | None = None) -> StateEvidence:
        """Per-state visits, action counts, mean discounted return-to-go and transitions."""
        ns, na = self.n_states, self.n_actions
        visits = np.zeros(ns, dtype=np.int64)
        counts = np.zeros((ns, na), dtype=np.int64)
        qsum = np.zeros((ns, na))
        trans = np.zeros((ns, na, ns + 1), dtype=np.int64)
        rsum = np.zeros((ns, na))
        if horizon is None:
            horizon = int(round(3.0 / max(1e-6, 1.0 - self.gamma)))
        for ep in self.episodes:
            T = ep.length
            if T == 0:
                continue
            g = np.zeros(T)
            acc = 0.0
            for t in range(T - 1, -1, -1):
                acc = ep.rewards[t] + self.gamma * acc
                g[t] = acc
            keep = T - horizon if ep.truncated else T
            np.add.at(visits, ep.states, 1)
            if keep > 0:
                np.add.at(counts, (ep.states[:keep], ep.actions[:keep]), 1)
                np.add.at(qsum, (ep.states[:keep], ep.actions[:keep]), g[:keep])
            nxt = np.append(ep.states[1:], ns if ep.terminated else -1)
            m = nxt >= 0
            np.add.at(trans, (ep.states[m], ep.actions[m], nxt[m]), 1)
            np.add.at(rsum, (ep.states[m], ep.actions[m]), ep.rewards[m])
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where(counts > 0, qsum / np.maximum(counts, 1), np.nan)
        return StateEvidence(visits, counts, q, trans, rsum, self.gamma)
