"""The learner of the reward and advisor modes: tabular Q-learning on the spec's discretisation.

:class:`QLearner` holds ``Q(s, a)`` over the same states and actions as every table of the run. It learns from whole
episodes, one sweep over each episode's steps in order as soon as the episode ends, with the update

``Q(s, a) += alpha * (r + F(s, s') + gamma * max_a' Q(s', a') - Q(s, a))``

where ``r`` is the environment's own reward and ``F(s, s') = gamma * phi(s') - phi(s)`` is **potential-based
shaping** (Ng, Harada and Russell 1999) with the potential ``phi`` of the iteration (0 without one). At a
termination the target is ``r - phi(s)`` (the potential of the absorbing state is 0, which keeps the optimal policy
unchanged in episodic tasks); the last step of an episode cut by the time limit is skipped (its next state is not
recorded), as in the ``q-learning`` baseline. In a table, learning with ``phi`` from ``Q0`` gives exactly ``Q - phi``
of learning without it from ``Q0 + phi(s)`` (Wiewiora 2003): a potential is a prior on the values, and a good one is
close to the optimal values; the greedy table is the same either way. A potential may change from one iteration to
the next and Q is carried over as it is (dynamic potential-based shaping, Devlin and Kudenko 2012; the optimal policy
is still the environment's): a change from ``phi`` to ``phi'`` acts like adding ``phi' - phi`` to the values the
learner has, so a potential that changes a lot from one iteration to the next costs the learner what it learned.

:class:`LearnerPolicy` is how the learner acts in its training episodes: with probability ``p`` the advised action
of the state (advisor mode), otherwise with probability ``epsilon`` a uniformly random action, otherwise the greedy
action of Q with ties broken at random. :meth:`QLearner.greedy` (ties: the lowest action) is the table the keeper
judges, always on the environment's own reward. With advice (``p > 0``) both first cap every action the learner has
never taken in a state at the advised action's value (:func:`advised_values`; the learner counts its ``visits``),
and the judged table breaks ties towards the advice.

The modes that use them live in :mod:`llm_policy_gen.modes.learner` and :mod:`llm_policy_gen.modes.qlearning`;
:class:`QOptions` is the one spelling of the step size and the discount every mode that runs a :class:`QLearner` takes
(``--q-alpha``, ``--q-gamma``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import model_validator

from ..collect import Episode
from ..discretize import ObservationDiscretizer
from ..registry import PluginOptions, setting

__all__ = ["QLearner", "LearnerPolicy", "advised_values", "optimistic_init", "QOptions"]


class QOptions(PluginOptions):
    """The step size and the discount of a mode's tabular Q-learning: one setting each, whichever mode runs the
    learner (q-learning; reward and advisor, whose options subclass these). A subclass gives its own step size as the
    field's default; ``q_alpha = None`` (the default a configuration records) means that one."""

    q_alpha: float | None = setting(None, "a number in (0, 1]", "q-learning, reward and advisor modes: step size of "
                                    "the mode's tabular Q-learning; None: the mode's own (q-learning 0.5; reward "
                                    "and advisor 0.2).", gt=0.0, le=1.0)
    q_gamma: float = setting(0.99, "a number in [0, 1)", "q-learning, reward and advisor modes: discount of the "
                             "mode's tabular Q-learning (and of the reward mode's shaping term).", ge=0.0, lt=1.0)

    @model_validator(mode="before")
    @classmethod
    def _own_alpha(cls, data: Any) -> Any:
        """``q_alpha`` None (or not given): the subclass's own step size, its field's default."""
        if isinstance(data, dict) and "q_alpha" in data and data["q_alpha"] is None:
            return {k: v for k, v in data.items() if k != "q_alpha"}
        return data


def optimistic_init(episodes: Sequence[Episode], gamma: float) -> float:
    """The ``q-learning`` baseline's rule: ``max(0, largest step reward seen) / (1 - gamma)``."""
    r_max = max((float(e.rewards.max()) for e in episodes if e.length), default=0.0)
    return max(0.0, r_max) / (1.0 - gamma)


def q_sweep(q: np.ndarray, episodes: Sequence[Episode], alpha: float, gamma: float,
            potential: np.ndarray | None = None) -> int:
    """Q-learning updates of ``q`` in place, one sweep over each episode's steps in order, shaped by ``potential``
    (none: plain Q-learning, the ``q-learning`` baseline's update); returns the number of updates."""
    phi = np.zeros(q.shape[0]) if potential is None else np.asarray(potential, dtype=np.float64)
    n = 0
    for ep in episodes:
        states, actions, rewards = ep.states.tolist(), ep.actions.tolist(), ep.rewards.tolist()
        last = ep.length - 1
        for t, (s, a, r) in enumerate(zip(states, actions, rewards, strict=True)):
            if t < last:
                s2 = states[t + 1]
                target = r + gamma * phi[s2] - phi[s] + gamma * float(q[s2].max())
            elif ep.terminated:
                target = r - phi[s]
            else:  # cut by the time limit (or the record ends): the next state is unknown
                continue
            q[s, a] += alpha * (target - q[s, a])
            n += 1
    return n


def advised_values(q: np.ndarray, visits: np.ndarray, advice: np.ndarray) -> np.ndarray:
    """``q`` with every action never taken in a state worth at most the advised action of that state.

    An untried action keeps its optimistic start value, which is as high as values go (CartPole: 100), while the
    advised action, once taken, is learned down to what it really earns; left as they are, the greedy table would
    pick the untried action in every state that only the advice visited, the opposite of the advice. Capping
    untried actions at the advised action's value lets the learner's own experience, never its optimism, overrule
    the advice (with ties to the advice, what Wiewiora, Cottrell and Elkan 2003 call look-ahead advice with an
    infinitesimal bonus)."""
    adv = np.asarray(advice, dtype=np.int64)
    qa = q[np.arange(q.shape[0]), adv][:, None]
    return np.where(visits == 0, np.minimum(q, qa), q)


class QLearner:
    """Tabular Q-learning with an optional shaping potential (see the module docstring)."""

    def __init__(self, n_states: int, n_actions: int, alpha: float = 0.2, gamma: float = 0.99,
                 q_init: float = 0.0) -> None:
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.q_init = float(q_init)
        self.q = np.full((int(n_states), int(n_actions)), self.q_init)
        self.visits = np.zeros((int(n_states), int(n_actions)), dtype=np.int64)
        """How often each (state, action) was taken in the episodes learned from."""
        self.updates = 0
        self.episodes = 0

    def copy(self) -> QLearner:
        other = QLearner(self.q.shape[0], self.q.shape[1], self.alpha, self.gamma, self.q_init)
        other.load_state_dict(self.state_dict())
        return other

    def learn(self, episodes: Sequence[Episode], potential: np.ndarray | None = None, *, own: bool = True) -> int:
        """One sweep over each episode's steps in order; returns the number of updates. ``own``: the episodes count
        among the learner's :attr:`episodes` (the ``q-learning`` mode's exploration schedule does not count the
        keeper's episodes it learns from)."""
        n = q_sweep(self.q, episodes, self.alpha, self.gamma, potential)
        for ep in episodes:
            np.add.at(self.visits, (ep.states, ep.actions), 1)
        self.updates += n
        self.episodes += len(episodes) if own else 0
        return n

    def update(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
               terminated: np.ndarray) -> int:
        """Online Q-learning, one update per transition in order: the target is ``r`` at a termination, else
        ``r + gamma * max_a' Q(s', a')`` (a step cut by the time limit bootstraps from its next state, which the
        collector hands over); returns the number of updates."""
        q, alpha, gamma = self.q, self.alpha, self.gamma
        for s, a, r, s2, done in zip(states.tolist(), actions.tolist(), rewards.tolist(), next_states.tolist(),
                                     terminated.tolist(), strict=True):
            target = r if done else r + gamma * float(q[s2].max())
            q[s, a] += alpha * (target - q[s, a])
            self.visits[s, a] += 1
        self.updates += len(states)
        return len(states)

    def greedy(self, advice: np.ndarray | None = None) -> np.ndarray:
        """``argmax_a Q(s, a)`` per state; ties take the lowest action.

        With ``advice`` (an action per state), the values are first :func:`resolved <advised_values>` by it and ties
        take the advised action."""
        if advice is None:
            return np.argmax(self.q, axis=1).astype(np.int64)
        adv = np.asarray(advice, dtype=np.int64)
        q = advised_values(self.q, self.visits, adv)
        rows = np.arange(q.shape[0])
        return np.where(q[rows, adv] >= q.max(axis=1), adv, np.argmax(q, axis=1)).astype(np.int64)

    def state_dict(self) -> dict[str, Any]:
        """The learner's state, its arrays the live ones, not copies (a large table's copy is the cost of every
        checkpoint): a caller that keeps the state past the next update copies it, as the run does with a checkpoint
        that waits (:func:`~llm_policy_gen.run.pace.snapshot`; a written one is serialised at once), and
        :meth:`load_state_dict` copies what it is given."""
        return {"q": self.q, "visits": self.visits, "q_init": self.q_init, "alpha": self.alpha,
                "gamma": self.gamma, "updates": self.updates, "episodes": self.episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q = np.asarray(state["q"], dtype=np.float64).copy()
        visits = state.get("visits")  # absent in checkpoints written before visits were counted
        self.visits = np.zeros(self.q.shape, np.int64) if visits is None else np.asarray(visits, np.int64).copy()
        self.q_init = float(state["q_init"])
        self.alpha = float(state["alpha"])
        self.gamma = float(state["gamma"])
        self.updates = int(state["updates"])
        self.episodes = int(state["episodes"])


class LearnerPolicy:
    """The learner acting in its training episodes: advice with probability ``p``, else epsilon-greedy on Q.

    Reads the learner's Q as it is at each step, so updates made after an episode steer the next one.
    """

    def __init__(self, learner: QLearner, observation: ObservationDiscretizer, rng: np.random.Generator,
                 epsilon: float, advice: np.ndarray | None = None, p_advice: float = 0.0) -> None:
        self.learner = learner
        self.observation = observation
        self.rng = rng
        self.epsilon = float(epsilon)
        self.advice = None if advice is None else np.asarray(advice, dtype=np.int64)
        self.p_advice = float(p_advice) if advice is not None else 0.0
        self.advised = 0
        """Steps that followed the advice."""
        self.steps = 0

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.act_states(self.observation.encode(np.asarray(obs)))

    def act_states(self, states: np.ndarray) -> np.ndarray:
        """:meth:`act` on discretized state indices (a learner that steps its own environment sees those)."""
        q = self.learner.q[states]
        n, na = q.shape
        u = self.rng.random((n, 3))
        if self.advice is not None and self.p_advice > 0.0:  # untried actions no better than the advised one
            q = advised_values(q, self.learner.visits[states], self.advice[states])
        # Greedy with random tie-breaking: the first maximum after adding a tiny random jitter to tied entries only.
        ties = q >= q.max(axis=1, keepdims=True)
        pick = np.argmax(ties * (1.0 + self.rng.random((n, na))), axis=1)
        acts = np.where(u[:, 1] < self.epsilon, (u[:, 2] * na).astype(np.int64).clip(0, na - 1), pick)
        if self.advice is not None:
            follow = u[:, 0] < self.p_advice
            acts = np.where(follow, self.advice[states], acts)
            self.advised += int(follow.sum())
        self.steps += n
        return acts.astype(np.int64)
