"""A discretized state written as text, for the language model to encode (``prompting/prompts/lm_state.md``).

The text is the state's bin description (:meth:`~llm_policy_gen.discretize.ObservationDiscretizer.describe_state`:
each dimension's name and bin range, or a grid cell's row and column), under the task's title and description. It is
the discretized state, never the raw observation: a task has ``n_states`` texts however long it runs (20k CartPole-v1
steps written at two decimals gave 19,621 distinct texts), so each is encoded once.

Two variants (``--lm-state-text``): ``plain``, the bin description above (the default, the text of every run made
before the option), and ``meaning``, the same template with the state told in the task's words instead
(:mod:`.meaning`: what lies in each neighbouring cell, which way the pole leans and how fast), from the spec's
``[meaning]`` table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ..discretize import ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..storage.templates import fill

__all__ = ["STATE_TEMPLATE", "StateTextVariant", "STATE_TEXT_VARIANTS", "state_text", "state_texts"]

STATE_TEMPLATE = "lm_state.md"
StateTextVariant = Literal["plain", "meaning"]
STATE_TEXT_VARIANTS: tuple[StateTextVariant, ...] = ("plain", "meaning")


def state_text(spec: EnvSpec, observation: ObservationDiscretizer, state: int, folder: Path | None = None,
               variant: StateTextVariant = "plain") -> str:
    """The text of discretized state ``state`` (``variant``: see the module doc)."""
    if variant == "meaning":
        from .meaning import meaning_description

        said = meaning_description(spec, observation, int(state))
    else:
        said = observation.describe_state(int(state))
    return fill(STATE_TEMPLATE, folder, title=spec.title or spec.env_id, env_id=spec.env_id,
                description=spec.description or f"The gymnasium environment {spec.env_id}.",
                state=int(state), state_description=said)


def state_texts(spec: EnvSpec, observation: ObservationDiscretizer, folder: Path | None = None,
                variant: StateTextVariant = "plain") -> list[str]:
    """Every state's text, in state order."""
    return [state_text(spec, observation, s, folder, variant) for s in range(observation.n_states)]
