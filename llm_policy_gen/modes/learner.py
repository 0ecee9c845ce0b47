"""The shared iteration of the modes that train a Q-learner (reward and advisor).

What the reward and advisor modes share (each is a few hooks over it): one iteration asks for
K candidates (potentials or advice tables), trains one copy of the learner per distinct valid candidate from the same
starting state on the same training seeds (each copy explores with its own random stream, so that the K copies
gather different experience; equal candidates train once), gives the K greedy tables (the advisor: resolved by
its advice, :meth:`LearnerMode.judged`) to the keeper, and carries on
with the learner of the candidate whose greedy table scored best on the test seeds (the keeper adopts it as the best
table only if it also passes the paired confirmation). Then that learner also sweeps, under its own potential, the
other candidates' training episodes and every episode the keeper ran to judge them (test and confirmation
episodes), so that it learns from the kind of experience the ``q-learning`` baseline learns from. An iteration whose
answers are all refused trains nothing: the learner waits for a valid candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import Field

from ..clients.base import Message
from ..collect import Episode
from ..formats import make_format, resolve_format_name
from ..formats.base import AnswerFormat, Target
from .base import ModeBase, Setup, Step, first_stop, stopped_before_any_answer
from .qtable import LearnerPolicy, QLearner, QOptions, optimistic_init

if TYPE_CHECKING:
    from ..prompting.builder import PromptContext
    from .base import RunServices

__all__ = ["Trial", "LearnerMode", "LearnerOptions"]


class LearnerOptions(QOptions):
    """The learner's settings, shared by the reward and advisor modes: every Q-learning mode's step size and discount
    (:class:`~.qtable.QOptions`; ``learner_alpha`` and ``learner_gamma`` before), this mode's own step size 0.2."""

    q_alpha: float = Field(default=0.2, gt=0.0, le=1.0)  # this mode's own step size (QOptions declares the setting)


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


class LearnerMode(ModeBase):
    """The shared iteration of the reward and advisor modes; subclasses fill in the hooks below."""

    name = "learner"
    needs_session = False
    judges_candidates = True
    templates: tuple[str, str] = ("system.md", "user.md")
    what = "candidate"
    """What a candidate is called in prompts and messages ("potential", "advice")."""
    keep_trials = 64
    """Earlier candidates remembered for the reflection (the prompt shows the last few)."""
    Options: ClassVar[type[LearnerOptions]] = LearnerOptions
    options: LearnerOptions
    """This run's options (read from its configuration by :meth:`prepare`)."""

    def __init__(self) -> None:
        self.options = self.Options()
        self.fmt: AnswerFormat[Any] | None = None
        self.target: Target | None = None
        self.learner: QLearner | None = None
        self.current: np.ndarray | None = None
        """The candidate the learner went on with last (the incumbent the next answers edit)."""
        self.trials: list[Trial] = []

    # ------------------------------------------------------------------ hooks
    def make_target(self, setup: Setup) -> Target:
        raise NotImplementedError

    def initial(self, run: RunServices) -> np.ndarray:
        """The incumbent before any answer."""
        raise NotImplementedError

    def check_backend(self, setup: Setup) -> None:
        """Refuse a backend that cannot answer this mode (a :class:`~llm_policy_gen.errors.UserError`)."""

    def behaviour(self, run: RunServices, learner: QLearner, value: np.ndarray, rng: np.random.Generator,
                  iteration: int) -> LearnerPolicy:
        return LearnerPolicy(learner, run.observation, rng, run.cfg.explore_epsilon)

    def judged(self, run: RunServices, learner: QLearner, value: np.ndarray, iteration: int) -> np.ndarray:
        """The table the keeper judges for a learner trained under candidate ``value``: its greedy table."""
        return learner.greedy()

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
        return {"learner_gamma": self.options.q_gamma}

    def step_fields(self, run: RunServices, iteration: int, chosen: _Candidate | None) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------ Mode
    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        self.options = setup.cfg.options_for(self.Options)
        self.check_backend(setup)
        name = resolve_format_name(setup.cfg.output_format, setup.observation.n_states)
        self.fmt = make_format(name)
        self.target = self.make_target(setup)
        return {"output_format": name, "target": self.target.kind, "learner": {
            "algorithm": "tabular Q-learning, one sweep per episode as it ends", "alpha": self.options.q_alpha,
            "gamma": self.options.q_gamma, "epsilon": setup.cfg.explore_epsilon,
            "q_init": "max(0, largest step reward of the initial table's test episodes) / (1 - gamma)"}}

    def first_messages(self, run: RunServices) -> list[Message]:
        """The first prompt with nothing learned, the mode's own sections left empty (see
        :func:`~.base.first_messages`)."""
        assert self.fmt is not None and self.target is not None
        current = self.target.array(np.zeros(run.observation.n_states))
        return run.builder.build(run.context(1, self.fmt, self.target, current, None, templates=self.templates))

    def start(self, run: RunServices) -> None:
        """Score the initial table (as table mode does) and start the learner."""
        first = run.start_from_initial()
        o = self.options
        self.learner = QLearner(run.observation.n_states, run.actions.n_actions, o.q_alpha,
                                o.q_gamma, optimistic_init(first, o.q_gamma))
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
        cand.episodes = run.train_on(cand.policy, seeds, iteration, lambda ep: cand.learner.learn([ep], phi))

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.fmt is not None and self.target is not None and self.current is not None
        learner = self._learner()
        best_mean = run.score_best(iteration)
        ctx = run.context(iteration, self.fmt, self.target, self.current, best_mean, templates=self.templates,
                          extra=self.extra(run))
        ctx.sections.update(self.sections(run, ctx))
        answers = run.propose(ctx, run.cfg.candidates)
        stopped = stopped_before_any_answer(answers)
        if stopped is not None:
            return stopped
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
        tables = [self.judged(run, c.learner, c.value, iteration) if c is not None else None for c in cands]
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
                    verdict.accepted, fields=fields, stop=first_stop(answers))

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
