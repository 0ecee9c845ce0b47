"""``--mode reward``: the model writes a shaping potential over the table's states; Q-learning learns with it.

The model answers a table of numbers, one per state: a potential ``phi`` (the run's answer format with a value
target: full table or edits, or any registered format that supports values). The learner
(:class:`~llm_policy_gen.modes.qtable.QLearner`, same discretisation) learns from ``r + gamma * phi(s') - phi(s)``
during the iteration's training episodes: potential-based shaping (Ng, Harada and Russell 1999), which leaves the
optimal policy unchanged. K candidates are K potentials, each trained into its own copy of the learner from the same
state on the same seeds; the keeper judges each copy's greedy table on the environment's own reward (the shaped return
is never a result), and the run goes on with the copy that scored best
(:class:`~llm_policy_gen.modes.learner.LearnerMode`).

The prompt (``prompting/prompts/reward_system.md``, ``prompting/prompts/reward_user.md``) shows how the learner did
under each earlier potential -- its training return, its greedy table's test mean, kept or not (Eureka-style reflection)
-- with the evidence and the current potential. Potentials must lie in
``[-reward_potential_bound, reward_potential_bound]``.

The ``offline`` backend answers with :mod:`llm_policy_gen.proposers.potential` (not an LLM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..backends import facts, parse_backend_spec
from ..errors import UserError
from ..formats.base import Target
from ..registry import setting
from .learner import LearnerMode, LearnerOptions

if TYPE_CHECKING:
    from ..prompting.builder import PromptContext
    from .base import RunServices, Setup

__all__ = ["RewardMode", "RewardOptions"]

class RewardOptions(LearnerOptions):
    """The reward mode's options, beside the learner's."""

    reward_potential_bound: float = setting(100.0, "a number > 0", "Reward mode: a shaping potential must lie in "
                                            "[-B, B].", gt=0.0)


class RewardMode(LearnerMode):
    """The model shapes the learner's reward."""

    name = "reward"
    Options = RewardOptions
    options: RewardOptions
    templates = ("reward_system.md", "reward_user.md")
    what = "potential"

    def check_backend(self, setup: Setup) -> None:
        name, _ = parse_backend_spec(setup.cfg.backend or "offline")
        if not facts(name).writes_values:
            raise UserError(f"--mode reward needs a backend that writes a potential (an LLM, replay:PATH, offline or "
                            f"random); {name} writes action tables only: use it with --mode table or advisor")

    def make_target(self, setup: Setup) -> Target:
        bound = float(self.options.reward_potential_bound)
        return Target("value", low=-bound, high=bound, meaning="shaping potential of the state")

    def initial(self, run: RunServices) -> np.ndarray:
        return np.zeros(run.observation.n_states)

    def potential(self, value: np.ndarray) -> np.ndarray:
        return value

    def describe(self, value: np.ndarray, run: RunServices) -> str:
        v = np.asarray(value, dtype=np.float64)
        return f"potential from {v.min():.3g} to {v.max():.3g}, mean {v.mean():.3g}"

    def sections(self, run: RunServices, ctx: PromptContext) -> dict[str, str]:
        return {"reflection": self.reflection(), "learner_gamma": f"{self.options.q_gamma:g}",
                "bound": f"{self.options.reward_potential_bound:g}"}
