"""The experience memory: episodes kept across iterations, their selection (best, worst, recent, median), aggregate
statistics and per-state evidence.

Per-state evidence summarises every kept step, so a prompt can carry it with a size that does not grow with
episode length: for each state the number of visits and, per action, how often it was taken and the mean
*discounted return-to-go* after taking it (``G_t = r_t + gamma * G_{t+1}``). Steps in the last ``horizon`` steps of an
episode cut by the time limit are left out of the return-to-go averages (their future is unknown), but counted as
visits. Transition counts ``(state, action) -> next state`` (with a terminal column) are kept too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..collect import Episode

__all__ = [
    "episodes_state",
    "episodes_from_state",
    "StateEvidence",
    "ExperienceMemory",
    "SparseTransitions",
    "DENSE_TRANSITIONS_MAX",
    "transition_totals",
    "expected_next",
    "EpisodeStats",
    "episode_stats",
    "median_episode",
]

DENSE_TRANSITIONS_MAX = 1_000_000
"""Above this many ``(state, action, next state)`` cells, :meth:`ExperienceMemory.evidence` keeps the transition
counts sparse (BipedalWalker's 10,000 x 81 x 10,001 would need 65 GB dense; value iteration over the few observed
transitions is also far faster than over a mostly empty dense array)."""


@dataclass
class SparseTransitions:
    """Transition counts of a big table as a list of the observed ``(state, action, next state)`` triples.

    ``pairs`` holds ``state * n_actions + action``; ``next_states`` the next state (``n_states`` = terminated);
    ``counts`` how often each triple was seen. Indexing ``[s, a, n]`` reads one count like the dense array; use
    :func:`transition_totals` and :func:`expected_next` for whole-table computations on either form.
    """

    n_states: int
    n_actions: int
    pairs: np.ndarray
    next_states: np.ndarray
    counts: np.ndarray
    totals: np.ndarray = field(init=False, repr=False)
    """(n_states, n_actions) observed transitions of each pair."""

    def __post_init__(self) -> None:
        flat = np.bincount(self.pairs, weights=self.counts, minlength=self.n_states * self.n_actions)
        self.totals = flat.astype(np.int64).reshape(self.n_states, self.n_actions)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n_states, self.n_actions, self.n_states + 1)

    def __getitem__(self, index: tuple[int, int, int]) -> int:
        s, a, n = (int(i) for i in index)
        hit = (self.pairs == s * self.n_actions + a) & (self.next_states == n)
        return int(self.counts[hit].sum())


def transition_totals(transitions: np.ndarray | SparseTransitions) -> np.ndarray:
    """(n_states, n_actions) number of observed transitions of each pair, dense or sparse counts alike."""
    if isinstance(transitions, SparseTransitions):
        return transitions.totals
    return np.asarray(transitions).sum(axis=2)


def expected_next(transitions: np.ndarray | SparseTransitions, values: np.ndarray) -> np.ndarray:
    """(n_states, n_actions) mean of ``values[next state]`` over the observed transitions (0 where none).

    ``values`` has ``n_states + 1`` entries, the last one for 'terminated'. This is ``P @ values`` of the empirical
    model without building ``P``.
    """
    totals = transition_totals(transitions)
    if isinstance(transitions, SparseTransitions):
        flat = np.bincount(transitions.pairs, weights=transitions.counts * values[transitions.next_states],
                           minlength=totals.size)
        weighted = flat.reshape(totals.shape)
    else:
        weighted = np.asarray(transitions) @ values
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, weighted / np.maximum(totals, 1), 0.0)


@dataclass
class StateEvidence:
    """Per-state summary of the memory."""

    visits: np.ndarray
    """(n_states,) steps spent in each state."""
    counts: np.ndarray
    """(n_states, n_actions) times each action was taken (and its return-to-go known)."""
    q_mean: np.ndarray
    """(n_states, n_actions) mean discounted return-to-go; NaN where ``counts`` is 0."""
    transitions: np.ndarray | SparseTransitions
    """(n_states, n_actions, n_states + 1) next-state counts; the last column is 'episode terminated'. A
    :class:`SparseTransitions` instead when the dense array would pass :data:`DENSE_TRANSITIONS_MAX` cells."""
    reward_sum: np.ndarray
    """(n_states, n_actions) sum of immediate rewards over every step (divide by ``transitions.sum(-1)``)."""
    gamma: float


@dataclass(frozen=True)
class EpisodeStats:
    """Aggregate statistics of some episodes: their returns, lengths and ends, and per table dimension of their
    states the values visited (a value per bin, e.g. its centre in the observation's units)."""

    returns: np.ndarray
    """(n_episodes,) return of each episode."""
    lengths: np.ndarray
    """(n_episodes,) steps of each episode."""
    terminated: int
    """Episodes the environment ended (a fall, a goal)."""
    truncated: int
    """Episodes cut by the time limit."""
    mean: np.ndarray
    """(n_dims,) mean value over every step."""
    std: np.ndarray
    low: np.ndarray
    """(n_dims,) smallest value visited."""
    high: np.ndarray
    last: np.ndarray
    """(n_dims,) mean value at the episodes' last steps (where they ended)."""


def episode_stats(episodes: Sequence[Episode], sizes: Sequence[int], values: Sequence[np.ndarray]) -> EpisodeStats:
    """:class:`EpisodeStats` of ``episodes`` (at least one with a step); ``sizes`` are the table's dimensions and
    ``values[j][b]`` the value of bin ``b`` of dimension ``j``."""
    eps = [e for e in episodes if e.length]
    if not eps:
        raise ValueError("episode_stats needs an episode with at least one step")
    dims = tuple(int(n) for n in sizes)
    bins = np.unravel_index(np.concatenate([e.states for e in eps]).astype(np.int64), dims)
    last = np.unravel_index(np.array([e.states[-1] for e in eps], dtype=np.int64), dims)
    per_dim = [np.asarray(values[j], dtype=np.float64)[b] for j, b in enumerate(bins)]
    at_end = [np.asarray(values[j], dtype=np.float64)[b] for j, b in enumerate(last)]
    return EpisodeStats(
        returns=np.array([e.ret for e in eps]), lengths=np.array([e.length for e in eps], dtype=np.int64),
        terminated=sum(e.terminated for e in eps), truncated=sum(e.truncated and not e.terminated for e in eps),
        mean=np.array([v.mean() for v in per_dim]), std=np.array([v.std() for v in per_dim]),
        low=np.array([v.min() for v in per_dim]), high=np.array([v.max() for v in per_dim]),
        last=np.array([v.mean() for v in at_end]),
    )


def median_episode(episodes: Sequence[Episode]) -> Episode | None:
    """The episode of median return (the lower of the middle two for an even count; among equal returns the one
    that came later); None without episodes."""
    if not episodes:
        return None
    order = sorted(range(len(episodes)), key=lambda i: (episodes[i].ret, -i))
    return episodes[order[(len(order) - 1) // 2]]


def episodes_state(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Episodes as a few flat arrays (for checkpoints)."""
    lengths = np.array([e.length for e in episodes], dtype=np.int64)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    return {
        "lengths": lengths,
        "seeds": np.array([e.seed for e in episodes], dtype=np.int64),
        "uids": np.array([e.uid for e in episodes], dtype=np.int64),
        "iterations": np.array([e.iteration for e in episodes], dtype=np.int64),
        "terminated": np.array([e.terminated for e in episodes], dtype=bool),
        "truncated": np.array([e.truncated for e in episodes], dtype=bool),
        "states": cat([e.states for e in episodes], np.int64),
        "actions": cat([e.actions for e in episodes], np.int64),
        "rewards": cat([e.rewards for e in episodes], np.float64),
    }


def episodes_from_state(state: dict[str, Any]) -> list[Episode]:
    """The inverse of :func:`episodes_state`."""
    out = []
    ends = np.cumsum(np.asarray(state["lengths"], dtype=np.int64))
    starts = ends - np.asarray(state["lengths"], dtype=np.int64)
    for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
        out.append(Episode(
            seed=int(state["seeds"][k]),
            states=np.asarray(state["states"][a:b], dtype=np.int64),
            actions=np.asarray(state["actions"][a:b], dtype=np.int64),
            rewards=np.asarray(state["rewards"][a:b], dtype=np.float64),
            terminated=bool(state["terminated"][k]),
            truncated=bool(state["truncated"][k]),
            iteration=int(state["iterations"][k]),
            uid=int(state["uids"][k]),
        ))
    return out


class ExperienceMemory:
    """Keeps up to ``capacity`` episodes (the oldest go first, the best few are never dropped).

    Every episode that joins gets a running number (``Episode.uid``), so a learner can tell which episodes it has
    not seen yet.
    """

    def __init__(
        self, n_states: int, n_actions: int, capacity: int = 200, gamma: float = 0.98, keep_best: int = 4
    ) -> None:
        self.n_states = int(n_states)
        self.n_actions = int(n_actions)
        self.capacity = int(capacity)
        self.gamma = float(gamma)
        self.keep_best = int(keep_best)
        self.episodes: list[Episode] = []
        self.added = 0
        """Episodes ever added (the next one's ``uid``)."""

    def __len__(self) -> int:
        return len(self.episodes)

    def add(self, episodes: Iterable[Episode]) -> None:
        for e in episodes:
            e.uid = self.added
            self.added += 1
            self.episodes.append(e)
        while len(self.episodes) > self.capacity:
            protected = {id(e) for e in self.best(self.keep_best)}
            for k, e in enumerate(self.episodes):
                if id(e) not in protected:
                    del self.episodes[k]
                    break
            else:  # pragma: no cover - capacity < keep_best
                del self.episodes[0]

    def since(self, uid: int) -> list[Episode]:
        """Episodes still in memory whose ``uid`` is at least ``uid``, in arrival order."""
        return [e for e in self.episodes if e.uid >= uid]

    def state_dict(self) -> dict[str, Any]:
        return {"added": self.added, "episodes": episodes_state(self.episodes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes = episodes_from_state(state["episodes"])
        self.added = int(state["added"])

    def best(self, k: int) -> list[Episode]:
        """The ``k`` highest-return episodes (newest first among ties)."""
        order = sorted(range(len(self.episodes)), key=lambda i: (-self.episodes[i].ret, -i))
        return [self.episodes[i] for i in order[: max(0, k)]]

    def worst(self, k: int) -> list[Episode]:
        """The ``k`` lowest-return episodes (newest first among ties)."""
        order = sorted(range(len(self.episodes)), key=lambda i: (self.episodes[i].ret, -i))
        return [self.episodes[i] for i in order[: max(0, k)]]

    def recent(self, k: int) -> list[Episode]:
        """The last ``k`` episodes to join that are still kept, in arrival order."""
        return self.episodes[-k:] if k > 0 else []

    def evidence(self, horizon: int | None = None) -> StateEvidence:
        """Per-state visits, action counts, mean discounted return-to-go and transitions."""
        ns, na = self.n_states, self.n_actions
        visits = np.zeros(ns, dtype=np.int64)
        counts = np.zeros((ns, na), dtype=np.int64)
        qsum = np.zeros((ns, na))
        dense = ns * na * (ns + 1) <= DENSE_TRANSITIONS_MAX
        trans = np.zeros((ns, na, ns + 1) if dense else (0, 0, 0), dtype=np.int64)
        keys: list[np.ndarray] = []
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
            if dense:
                np.add.at(trans, (ep.states[m], ep.actions[m], nxt[m]), 1)
            else:
                keys.append((ep.states[m] * na + ep.actions[m]) * (ns + 1) + nxt[m])
            np.add.at(rsum, (ep.states[m], ep.actions[m]), ep.rewards[m])
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where(counts > 0, qsum / np.maximum(counts, 1), np.nan)
        if dense:
            return StateEvidence(visits, counts, q, trans, rsum, self.gamma)
        uniq, n = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.int64), return_counts=True)
        sparse = SparseTransitions(ns, na, uniq // (ns + 1), uniq % (ns + 1), n.astype(np.int64))
        return StateEvidence(visits, counts, q, sparse, rsum, self.gamma)
