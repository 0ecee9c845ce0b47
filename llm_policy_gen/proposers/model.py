"""Model-based table search: the offline backend's move for tables without rules (grid worlds, Taxi, small tables).

An empirical model of the task is built from every episode the run counted (``IterationState.fresh`` at each call:
training, test and confirmation episodes alike), and kept across iterations: per ``(state, action)`` the number of
observed transitions to each next state (a terminal column for episode ends) and the summed rewards. Episodes cut by
the time limit leave their last step out (its next state is unknown). The candidates are greedy tables of value
iteration on that model, with discount ``gamma = 1 - 1 / episode_limit`` (in [0.95, 0.999]):

* **explore** (candidates 1, 3, 5, ...): pairs never tried are worth ``r_max / (1 - gamma)`` (R-max), so the table
  leads its test episodes to them; among untried actions each candidate prefers a different one per state, so that
  successive episodes leave a state in different directions;
* **exploit** (candidates 2, 4, ...): pairs never tried are never chosen; the table follows what the model knows.

Ties keep the current table's action. It never steps an environment: every transition in the model comes from an
episode the engine ran and counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collect import Episode
from ..prompting.context import IterationState
from ..prompting.memory import SparseTransitions, expected_next

__all__ = ["EmpiricalModel", "model_tables", "horizon_gamma"]


def horizon_gamma(max_steps: int | None) -> float:
    """``1 - 1 / max_steps`` in [0.95, 0.999] (0.99 without a step limit)."""
    if not max_steps:
        return 0.99
    return float(min(0.999, max(0.95, 1.0 - 1.0 / max_steps)))


class EmpiricalModel:
    """Transition counts and reward sums of every counted step, kept sparse (only pairs seen)."""

    def __init__(self) -> None:
        self.n_states = 0
        self.n_actions = 0
        self.keys = np.zeros(0, dtype=np.int64)
        """Sorted ``(state * n_actions + action) * (n_states + 1) + next`` of the observed transitions."""
        self.counts = np.zeros(0, dtype=np.int64)
        self.reward_sum = np.zeros((0, 0))
        self.steps = 0

    def _shape(self, n_states: int, n_actions: int) -> None:
        if (self.n_states, self.n_actions) != (n_states, n_actions):
            self.n_states, self.n_actions = int(n_states), int(n_actions)
            self.keys, self.counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
            self.reward_sum = np.zeros((n_states, n_actions))
            self.steps = 0

    def add(self, episodes: list[Episode], n_states: int, n_actions: int) -> int:
        """Learn the steps of ``episodes``; returns how many transitions were added."""
        self._shape(n_states, n_actions)
        ns, na = self.n_states, self.n_actions
        new_keys: list[np.ndarray] = []
        for ep in episodes:
            if ep.length == 0:
                continue
            nxt = np.append(ep.states[1:], ns if ep.terminated else -1)
            known = nxt >= 0
            s, a = ep.states[known], ep.actions[known]
            new_keys.append((s * na + a) * (ns + 1) + nxt[known])
            np.add.at(self.reward_sum, (s, a), ep.rewards[known])
        if not new_keys:
            return 0
        added = np.concatenate(new_keys)
        keys, inverse = np.unique(np.concatenate([self.keys, added]), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([self.counts, np.ones(added.size)]),
                             minlength=keys.size)
        self.keys, self.counts = keys, counts.astype(np.int64)
        self.steps += int(added.size)
        return int(added.size)

    def transitions(self) -> SparseTransitions:
        ns = self.n_states
        return SparseTransitions(ns, self.n_actions, self.keys // (ns + 1), self.keys % (ns + 1), self.counts)

    def state_dict(self) -> dict[str, Any]:
        return {"n_states": self.n_states, "n_actions": self.n_actions, "keys": self.keys, "counts": self.counts,
                "reward_sum": self.reward_sum, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_states, self.n_actions = int(state["n_states"]), int(state["n_actions"])
        self.keys = np.asarray(state["keys"], dtype=np.int64).copy()
        self.counts = np.asarray(state["counts"], dtype=np.int64).copy()
        self.reward_sum = np.asarray(state["reward_sum"], dtype=np.float64).reshape(self.n_states,
                                                                                    self.n_actions).copy()
        self.steps = int(state["steps"])

    def q_values(self, gamma: float, untried: np.ndarray, tol: float = 1e-6, max_sweeps: int = 5000) -> np.ndarray:
        """Q of value iteration on the model; ``untried`` (n_states, n_actions) is the value of pairs never tried."""
        trans = self.transitions()
        n = trans.totals
        tried = n > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(tried, self.reward_sum / np.maximum(n, 1), 0.0)
        v = np.zeros(self.n_states + 1)
        q = np.where(tried, r, untried)
        for _ in range(max_sweeps):
            q = np.where(tried, r + gamma * expected_next(trans, v), untried)
            new_v = np.append(q.max(axis=1), 0.0)
            if np.max(np.abs(new_v - v)) < tol:
                break
            v = new_v
        return q


def model_tables(model: EmpiricalModel, ctx: IterationState, k: int) -> list[tuple[np.ndarray, str]]:
    """K greedy tables of the model (see the module docstring), each with a one-line rationale."""
    ns, na = ctx.observation.n_states, ctx.actions.n_actions
    added = model.add(list(ctx.fresh), ns, na)
    gamma = horizon_gamma(ctx.spec.max_episode_steps)
    tried = model.transitions().totals > 0
    r_seen = model.reward_sum[tried] / np.maximum(model.transitions().totals[tried], 1)
    r_max = float(max(1.0, r_seen.max() if r_seen.size else 1.0))
    current = np.asarray(ctx.current_table, dtype=np.int64)
    rows = np.arange(ns)
    out: list[tuple[np.ndarray, str]] = []
    cache: dict[str, np.ndarray] = {}
    for c in range(1, k + 1):
        explore = c % 2 == 1 or k == 1
        if explore:
            # Among untried actions, each candidate and iteration prefers a different one per state.
            rot = (np.arange(na)[None, :] - rows[:, None] - (ctx.iteration - 1) * k - c) % na
            untried = r_max / (1.0 - gamma) + 1e-6 * (rot == 0)
            q = model.q_values(gamma, np.broadcast_to(untried, (ns, na)))
        else:
            if "exploit" not in cache:
                cache["exploit"] = model.q_values(gamma, np.full((ns, na), -1e12))
            q = cache["exploit"]
        best = q.max(axis=1)
        keep = (q[rows, current] >= best - 1e-9) | (~tried.any(axis=1) & (not explore))
        table = np.where(keep, current, np.argmax(q, axis=1)).astype(np.int64)
        kind = "explore: untried pairs valued optimistically" if explore else "exploit: only tried pairs"
        out.append((table, (
            f"greedy table of the empirical model ({kind}; value iteration, gamma {gamma:.3g}); "
            f"{int((table != current).sum())} states changed; model of {model.steps} steps ({added} new), "
            f"{int((~tried).sum())} state-action pairs never tried")))
    return out
