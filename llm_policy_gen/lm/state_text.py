"""A discretized state written as text, for the language model to encode (``prompting/prompts/lm_state.md``).

The text is the state's bin description (:meth:`~llm_policy_gen.discretize.ObservationDiscretizer.describe_state`:
each dimension's name and bin range, or a grid cell's row and column), under the task's title and description. It is
the discretized state, never the raw observation: a task has ``n_states`` texts however long it runs (20k CartPole-v1
steps written at two decimals gave 19,621 distinct texts), so each is encoded once.
"""

from __future__ import annotations

from pathlib import Path

from ..discretize import ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..storage.templates import fill

__all__ = ["STATE_TEMPLATE", "state_text", "state_texts"]

STATE_TEMPLATE = "lm_state.md"


def state_text(spec: EnvSpec, observation: ObservationDiscretizer, state: int, folder: Path | None = None) -> str:
    """The text of discretized state ``state``."""
    return fill(STATE_TEMPLATE, folder, title=spec.title or spec.env_id, env_id=spec.env_id,
                description=spec.description or f"The gymnasium environment {spec.env_id}.",
                state=int(state), state_description=observation.describe_state(int(state)))


def state_texts(spec: EnvSpec, observation: ObservationDiscretizer, folder: Path | None = None) -> list[str]:
    """Every state's text, in state order."""
    return [state_text(spec, observation, s, folder) for s in range(observation.n_states)]
