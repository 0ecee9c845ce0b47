"""Modes: what the model writes and how it is judged. A registry of entry points.

* ``table`` -- the model writes the policy table (:mod:`.table`);
* ``direct`` -- the model picks each action, asked once per discretized state (:mod:`.direct`);
* ``reward`` -- the model writes a shaping potential for a Q-learner (:mod:`.reward`);
* ``advisor`` -- the model advises a Q-learner which action to take (:mod:`.advisor`);
* ``q-learning`` -- no model: the standard epsilon-greedy tabular Q-learner, a baseline (:mod:`.qlearning`;
  ``--backend q-learning`` is its old spelling, read where the configuration is built:
  :data:`llm_policy_gen.schema.aliases.MOVED_BACKENDS`).
* ``lm-policy`` -- a language model encodes each state's text, PPO or TRPO trains a head over it (:mod:`.lm_policy`).
* ``peer`` -- no model: a zoo-tuned SB3 / sb3-contrib learner on the raw observations, a baseline (:mod:`.peer`).

A new mode is one file implementing :class:`~llm_policy_gen.modes.base.Mode` plus one
``MODES.register(name, entry_point="module:Class")`` line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..registry import Registry

if TYPE_CHECKING:
    from .base import ModeBase

__all__ = ["MODES", "proposes_nothing"]

MODES: Registry[Any] = Registry("mode", "--mode")
MODES.register("table", "llm_policy_gen.modes.table:TableMode", description="the model writes the table",
               calls_per_iteration="K (candidates) + repairs")
MODES.register("direct", "llm_policy_gen.modes.direct:DirectMode",
               description="the model picks each action, once per discretized state",
               calls_per_iteration="K per newly visited state")
MODES.register("reward", "llm_policy_gen.modes.reward:RewardMode",
               description="the model writes a shaping potential; Q-learning learns with it",
               calls_per_iteration="K (candidates) + repairs")
MODES.register("advisor", "llm_policy_gen.modes.advisor:AdvisorMode",
               description="the model advises a Q-learner, which follows the advice with a decaying probability",
               calls_per_iteration="K (candidates) + repairs")
MODES.register("q-learning", "llm_policy_gen.modes.qlearning:QLearningMode",
               description="no model: the standard epsilon-greedy tabular Q-learner in its own episodes (baseline)",
               calls_per_iteration="none")
MODES.register("lm-policy", "llm_policy_gen.modes.lm_policy:LmPolicyMode",
               description="a language model (--lm-model) encodes each state's text; SB3 PPO or TRPO trains a head "
               "over the frozen encodings; the read-out table is judged", calls_per_iteration="0 (no backend)")
MODES.register("peer", "llm_policy_gen.modes.peer:PeerMode",
               description="no model: a zoo-tuned SB3 / sb3-contrib learner (--peer-algo) on the raw observations, "
               "a baseline; its network is the run's policy", calls_per_iteration="0 (no backend)")


def proposes_nothing(name: str) -> type[ModeBase] | None:
    """The class of mode ``name`` when it proposes nothing and so takes no backend (``needs_backend`` False on a
    :class:`~.base.ModeBase`: ``q-learning``, ``lm-policy``), else None (a mode that needs one, a plug-in mode
    without the base class, a name no mode has)."""
    from .base import ModeBase

    if name not in MODES:
        return None
    cls = MODES.load(name)
    return cls if isinstance(cls, type) and issubclass(cls, ModeBase) and not cls.needs_backend else None
