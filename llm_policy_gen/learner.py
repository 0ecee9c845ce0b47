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
judges, always on the environment's own reward.

:class:`LearnerMode` is what the reward and advisor modes share (each is a few hooks over it): one iteration asks for
K candidates (potentials or advice tables), trains one copy of the learner per distinct valid candidate from the same
starting state on the same training seeds (each copy explores with its own random stream, so that the K copies
gather different experience; equal candidates train once), gives the K greedy tables to the keeper, and carries on
with the learner of the candidate whose greedy table scored best on the test seeds (the keeper adopts it as the best
table only if it also passes the paired confirmation). Then that learner also sweeps, under its own potential, the
other candidates' training episodes and every episode the keeper ran to judge them (test and confirmation
episodes), so that it learns from the kind of experience the ``q-learning`` baseline learns from. An iteration whose
answers are all refused trains nothing: the learner waits for a valid candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .collect import Episode
from .discretize import ObservationDiscretizer
from .formats import make_format, resolve_format_name
from .formats.base import AnswerFormat, Target
from .modes.base import Step

if TYPE_CHECKING:
    from .modes.base import RunServices
    from .prompt import PromptContext

__all__ = ["QLearner", "LearnerPolicy", "Trial", "LearnerMode", "optimistic_init"]


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


class QLearner:
    """Tabular Q-learning with an optional shaping potential (see the module docstring)."""

    def __init__(self, n_states: int, n_actions: int, alpha: float = 0.2, gamma: float = 0.99,
                 q_init: float = 0.0) -> None:
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.q_init = float(q_init)
        self.q = np.full((int(n_states), int(n_actions)), self.q_init)
        self.updates = 0
        self.episodes = 0

    def copy(self) -> QLearner:
        other = QLearner(self.q.shape[0], self.q.shape[1], self.alpha, self.gamma, self.q_init)
        other.load_state_dict(self.state_dict())
        return other

    def learn(self, episodes: Sequence[Episode], potential: np.ndarray | None = None) -> int:
        """One sweep over each episode's steps in order; returns the number of updates."""
        n = q_sweep(self.q, episodes, self.alpha, self.gamma, potential)
        self.updates += n
        self.episodes += len(episodes)
        return n

    def greedy(self) -> np.ndarray:
        """``argmax_a Q(s, a)`` per state; ties take the lowest action."""
        return np.argmax(self.q, axis=1).astype(np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.copy(), "q_init": self.q_init, "alpha": self.alpha, "gamma": self.gamma,
                "updates": self.updates, "episodes": self.episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q = np.asarray(state["q"], dtype=np.float64).copy()
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
        states = self.observation.encode(np.asarray(obs))
        q = self.learner.q[states]
        n, na = q.shape
        u = self.rng.random((n, 3))
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


@dataclass
class Trial:
    """How the learner did under one earlier candidate (the reflection the prompt shows)."""

    iteration: int
    candidate: int
    valid: bool
    train_return: float | None = None
    """Mean environment return of the candidate's training episodes."""
    test_mean: float | None = None
    """The greedy table's mean on the test seeds (environment reward)."""
    chosen: bool = False
    """The learner went on from this candidate (best test mean of its iteration)."""
    kept: bool = False
    """The keeper adopted the greedy table as the best policy."""
    summary: str = ""
    """A few words on the candidate (value range of a potential, states an advice changed)."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        return cls(**d)


def _num(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.1f}"


@dataclass
class _Candidate:
    value: np.ndarray
    learner: QLearner
    summary: str = ""
    episodes: list[Episode] = field(default_factory=list)
    policy: LearnerPolicy | None = None

    @property
    def train_return(self) -> float | None:
        return float(np.mean([e.ret for e in self.episodes])) if self.episodes else None


class LearnerMode:
    """The shared iteration of the reward and advisor modes; subclasses fill in the hooks below."""

    name = "learner"
    needs_session = False
    templates: tuple[str, str] = ("system.md", "user.md")
    what = "candidate"
    """What a candidate is called in prompts and messages ("potential", "advice")."""
    keep_trials = 64
    """Earlier candidates remembered for the reflection (the prompt shows the last few)."""

    def __init__(self) -> None:
        self.fmt: AnswerFormat[Any] | None = None
        self.target: Target | None = None
        self.learner: QLearner | None = None
        self.current: np.ndarray | None = None
        """The candidate the learner went on with last (the incumbent the next answers edit)."""
        self.trials: list[Trial] = []

    # ------------------------------------------------------------------ hooks
    def make_target(self, run: RunServices) -> Target:
        raise NotImplementedError

    def initial(self, run: RunServices) -> np.ndarray:
        """The incumbent before any answer."""
        raise NotImplementedError

    def check_backend(self, run: RunServices) -> None:
        """Refuse a backend that cannot answer this mode (a :class:`~llm_policy_gen.errors.UserError`)."""

    def behaviour(self, run: RunServices, learner: QLearner, value: np.ndarray, rng: np.random.Generator,
                  iteration: int) -> LearnerPolicy:
        return LearnerPolicy(learner, run.observation, rng, run.cfg.explore_epsilon)

    def potential(self, value: np.ndarray) -> np.ndarray | None:
        """The shaping potential a candidate gives the learner (None: no shaping)."""
        return None

    def describe(self, value: np.ndarray, run: RunServices) -> str:
        """A few words on a candidate for the reflection."""
        return ""

    def sections(self, run: RunServices, ctx: PromptContext) -> dict[str, str]:
        """The mode's own prompt fields."""
        return {}

    def extra(self, run: RunServices) -> dict[str, Any]:
        """Data the non-LLM proposers read (``PromptContext.extra``)."""
        return {"learner_gamma": run.cfg.learner_gamma}

    def step_fields(self, run: RunServices, iteration: int, chosen: _Candidate | None) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------ Mode
    def prepare(self, run: RunServices, resumed: bool) -> dict[str, Any]:
        self.check_backend(run)
        name = resolve_format_name(run.cfg.output_format, run.observation.n_states)
        self.fmt = make_format(name)
        self.target = self.make_target(run)
        return {"output_format": name, "target": self.target.kind, "learner": {
            "algorithm": "tabular Q-learning, one sweep per episode as it ends", "alpha": run.cfg.learner_alpha,
            "gamma": run.cfg.learner_gamma, "epsilon": run.cfg.explore_epsilon,
            "q_init": "max(0, largest step reward of the initial table's test episodes) / (1 - gamma)"}}

    def start(self, run: RunServices) -> None:
        """Score the initial table (as table mode does) and start the learner."""
        _, first = run.keeper.score_best(1)
        run.count(first)
        run.measure_best(0)
        run.save_best()
        cfg = run.cfg
        self.learner = QLearner(run.observation.n_states, run.actions.n_actions, cfg.learner_alpha,
                                cfg.learner_gamma, optimistic_init(first, cfg.learner_gamma))
        self.current = self.initial(run)

    def _learner(self) -> QLearner:
        assert self.learner is not None, "start() or load_state_dict() first"
        return self.learner

    def train(self, run: RunServices, cand: _Candidate, seeds: Sequence[int], iteration: int, slot: int) -> None:
        """The candidate's training episodes on ``seeds``, the learner learning after each one; exploration draws
        from the candidate's own stream (``slot``: its index among the iteration's distinct candidates)."""
        rng = np.random.default_rng([run.cfg.seed, iteration, 11, slot])
        cand.policy = self.behaviour(run, cand.learner, cand.value, rng, iteration)
        phi = self.potential(cand.value)
        for s in seeds:
            ep = run.collector.collect(cand.policy, [s], iteration=iteration)[0]
            cand.learner.learn([ep], phi)
            cand.episodes.append(ep)
        run.count(cand.episodes)

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.fmt is not None and self.target is not None and self.current is not None
        learner = self._learner()
        best_mean, extra = run.keeper.score_best(iteration)
        run.count(extra)
        ctx = run.context(iteration, self.fmt, self.target, self.current, best_mean, templates=self.templates,
                          extra=self.extra(run))
        ctx.sections.update(self.sections(run, ctx))
        answers = run.propose(ctx, run.cfg.candidates)
        stops = [a.stop for a in answers if a.stop]
        if stops and not any(a.ok or a.failed or a.errors for a in answers):
            return Step([], None, answers, stop=stops[0], skipped=True)
        seeds = run.train_seeds()
        cands: list[_Candidate | None] = []
        for a in answers:
            if a.parsed is None:
                cands.append(None)
                continue
            value = self.target.array(a.parsed.value)
            same = next((c for c in cands if c is not None and np.array_equal(c.value, value)), None)
            if same is None:  # equal candidates train once
                same = _Candidate(value, learner.copy(), self.describe(value, run))
                self.train(run, same, seeds, iteration, len({id(c) for c in cands if c is not None}))
            cands.append(same)
        tables = [c.learner.greedy() if c is not None else None for c in cands]
        verdict = run.judge(tables, iteration)
        k = verdict.chosen
        chosen = cands[k] if k is not None else None
        if chosen is not None:
            distinct = {id(c): c for c in cands if c is not None and c is not chosen}
            others = [e for c in distinct.values() for e in c.episodes]
            chosen.learner.learn(others + verdict.episodes, self.potential(chosen.value))
            self.learner, self.current = chosen.learner, chosen.value
        train_returns = [c.train_return if c is not None else None for c in cands]
        for j, (a, c) in enumerate(zip(answers, cands, strict=True)):
            self.trials.append(Trial(iteration, a.candidate, c is not None, train_returns[j], verdict.test_means[j],
                                     k == j, verdict.accepted and k == j, c.summary if c is not None else "",
                                     "; ".join(a.errors)[:160]))
        del self.trials[:-self.keep_trials]
        fields = {
            "learner_candidate": None if k is None else k + 1,
            "learner_train_returns": train_returns,
            "learner_updates": self._learner().updates,
            "train_seeds": list(seeds),
            **self.step_fields(run, iteration, chosen),
        }
        return Step(chosen.episodes if chosen is not None else [], run.cfg.explore_epsilon, answers, verdict,
                    verdict.accepted, fields=fields, stop=stops[0] if stops else None)

    def finish(self, run: RunServices) -> dict[str, Any]:
        learner = self._learner()
        return {"learner_updates": learner.updates, "learner_episodes": learner.episodes,
                "learner_q_init": learner.q_init}

    # ------------------------------------------------------------------ prompt helpers
    def reflection(self, limit: int = 8) -> str:
        """The last ``limit`` candidates and how the learner did under each (latest last)."""
        if not self.trials:
            return f"(no earlier {self.what} yet)"
        lines = []
        for t in self.trials[-limit:]:
            who = f"- iteration {t.iteration} candidate {t.candidate}"
            if not t.valid:
                lines.append(f"{who}: refused ({t.note or 'invalid answer'})")
                continue
            verdict = "kept as best policy" if t.kept else ("the learner went on from it" if t.chosen else "dropped")
            lines.append(f"{who} ({t.summary}): training episodes {_num(t.train_return)}, greedy table "
                         f"{_num(t.test_mean)} on the test episodes; {verdict}")
        return "\n".join(lines)

    def greedy_section(self, run: RunServices, ctx: PromptContext) -> str:
        """The learner's current greedy table, rendered like the prompt's tables."""
        shown = replace(ctx, current_table=self._learner().greedy(), target=Target("action",
                                                                                   n_actions=run.actions.n_actions))
        return run.builder.table(shown)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"learner": None if self.learner is None else self.learner.state_dict(),
                "current": self.current, "trials": [t.to_dict() for t in self.trials]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["learner"] is not None:
            self.learner = QLearner(1, 1)
            self.learner.load_state_dict(state["learner"])
        self.current = None if state["current"] is None else np.asarray(state["current"])
        if self.current is not None and self.target is not None:
            self.current = self.target.array(self.current)
        self.trials = [Trial.from_dict(t) for t in state["trials"]]
