"""``--mode advisor``: the model advises a Q-learner which action to take in each state.

The model answers an action table (the run's answer format: full table or edits). In the training episodes the
learner (:class:`~llm_policy_gen.modes.qtable.QLearner`, same discretisation) takes the advised action with probability
``p_t = advisor_prob * advisor_decay ** (t - 1)`` at iteration ``t``, and otherwise acts epsilon-greedily on its own Q
(``explore_epsilon``); it learns from the environment's own reward. Every iteration the model revises its advice from
the evidence and the learner's current greedy table; K candidates are K advice tables, each trained into its own copy
of the learner from the same state on the same seeds, and the keeper judges each copy's **greedy table** -- never the
advice itself (:class:`~llm_policy_gen.modes.learner.LearnerMode`).

While ``p_t > 0`` the advice resolves what the learner has not tried
(:func:`~llm_policy_gen.modes.qtable.advised_values`): an action never taken in a state is worth no more than the
advised action there, in the learner's greedy steps and in the table judged, and in that table ties go to the advice.
Without this the learner's optimistic start (CartPole: 100, as high as values go) made every untried action beat the
advised one once the advised one had been learned down to what it earns, so the judged table turned against the advice
in every state only the advice had visited: with the offline stand-in the advised learner ended below plain
``q-learning`` on CartPole-v1 (median of seeds 0-4, 482.9 against 490.9). What the learner has tried itself still
overrules the advice. ``advisor_prob = 0`` is the learner alone.

Prompts: ``prompting/prompts/advisor_system.md``, ``prompting/prompts/advisor_user.md``. With the ``offline`` backend
(not an LLM) the advice is the offline optimiser's table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..formats.base import Target
from ..registry import setting
from .learner import LearnerMode, LearnerOptions
from .qtable import LearnerPolicy, QLearner

if TYPE_CHECKING:
    from ..prompting.builder import PromptContext
    from .base import RunServices, Setup

__all__ = ["AdvisorMode", "AdvisorOptions", "advice_probability"]


def advice_probability(p0: float, decay: float, iteration: int) -> float:
    """``p0 * decay ** (iteration - 1)``: how often the learner follows the advice at ``iteration``."""
    return float(p0) * float(decay) ** max(0, int(iteration) - 1)


class AdvisorOptions(LearnerOptions):
    """The advisor mode's options, beside the learner's."""

    advisor_prob: float = setting(0.5, "a number in [0, 1]", "Advisor mode: probability that a training step takes "
                                  "the advised action at iteration 1.", ge=0.0, le=1.0)
    advisor_decay: float = setting(0.9, "a number in [0, 1]", "Advisor mode: the advice probability is multiplied by "
                                   "this every iteration (p_t = advisor_prob * advisor_decay^(t-1)).", ge=0.0, le=1.0)


class AdvisorMode(LearnerMode):
    """The model advises the learner."""

    name = "advisor"
    Options = AdvisorOptions
    options: AdvisorOptions
    templates = ("advisor_system.md", "advisor_user.md")
    what = "advice"

    def make_target(self, setup: Setup) -> Target:
        return Target("action", n_actions=setup.actions.n_actions)

    def initial(self, run: RunServices) -> np.ndarray:
        return np.asarray(run.best_table, dtype=np.int64).copy()

    def _p(self, run: RunServices, iteration: int) -> float:
        return advice_probability(self.options.advisor_prob, self.options.advisor_decay, iteration)

    def behaviour(self, run: RunServices, learner: QLearner, value: np.ndarray, rng: np.random.Generator,
                  iteration: int) -> LearnerPolicy:
        return LearnerPolicy(learner, run.observation, rng, run.cfg.explore_epsilon, value, self._p(run, iteration))

    def judged(self, run: RunServices, learner: QLearner, value: np.ndarray, iteration: int) -> np.ndarray:
        """The learner's greedy table with the advice resolving what the learner has not tried (while it is
        advised): an action never taken in a state is worth no more than the advised one, and ties go to the advice
        (:meth:`~llm_policy_gen.modes.qtable.QLearner.greedy`)."""
        return learner.greedy(value if self._p(run, iteration) > 0.0 else None)

    def describe(self, value: np.ndarray, run: RunServices) -> str:
        differs = int(np.sum(np.asarray(value) != self._learner().greedy()))
        return f"advice differing from the learner's greedy table in {differs} states"

    def sections(self, run: RunServices, ctx: PromptContext) -> dict[str, str]:
        return {"reflection": self.reflection(), "greedy": self.greedy_section(run, ctx),
                "advice_prob": f"{self._p(run, ctx.iteration):.3g}"}

    def step_fields(self, run: RunServices, iteration: int, chosen: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"advice_prob": self._p(run, iteration)}
        if chosen is not None and chosen.policy is not None and chosen.policy.steps:
            out["advised_steps"] = chosen.policy.advised
            out["advised_share"] = round(chosen.policy.advised / chosen.policy.steps, 4)
        return out
