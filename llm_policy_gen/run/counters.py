"""Every count a run keeps across iterations, as its checkpoint saves them and its summary reports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..collect import Rollouts

__all__ = ["Counters", "rollouts_from_state"]


@dataclass
class Counters:
    """Every count a run keeps across iterations (saved in the checkpoint, reported in the summary)."""

    iteration: int = 0
    """The last finished iteration."""
    episodes_total: int = 0
    steps_total: int = 0
    heldout_total: int = 0
    train_counter: int = 0
    prompt_sizes: list[int] = field(default_factory=list)
    solved_at: int | None = None
    solved_iteration: int | None = None
    since_best: int = 0
    unreachable_streak: int = 0
    accepted_count: int = 0
    selection_episodes: int | None = 0
    """Of the counted episodes, those that chose the reported policy and were not played to learn (the keeper's
    test and confirmation episodes, a peer's evaluation episodes); None in a run resumed from a checkpoint written
    before the split was kept (then unknown)."""
    selection_steps: int | None = 0
    """Their environment steps (None: unknown, as above). The rest of the counted ones are training episodes."""

    def to_state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Counters:
        return cls(
            iteration=int(state["iteration"]), episodes_total=int(state["episodes_total"]),
            steps_total=int(state["steps_total"]), heldout_total=int(state["heldout_total"]),
            train_counter=int(state["train_counter"]), prompt_sizes=[int(x) for x in state["prompt_sizes"]],
            solved_at=state["solved_at"], solved_iteration=state["solved_iteration"],
            since_best=int(state["since_best"]), unreachable_streak=int(state["unreachable_streak"]),
            accepted_count=int(state["accepted_count"]),
            selection_episodes=_known(state.get("selection_episodes")),
            selection_steps=_known(state.get("selection_steps")))

    def count(self, episodes: int, steps: int, selection: bool) -> None:
        """``episodes`` counted episodes of ``steps`` environment steps; ``selection``: played to choose the reported
        policy (see :attr:`selection_episodes`)."""
        self.episodes_total += episodes
        self.steps_total += steps
        if selection and self.selection_episodes is not None and self.selection_steps is not None:
            self.selection_episodes += episodes
            self.selection_steps += steps


def _known(value: Any) -> int | None:
    """A count of the checkpoint, None where it holds none (written before the count was kept)."""
    return None if value is None else int(value)


def rollouts_from_state(held: dict[str, Any] | None) -> Rollouts | None:
    """A held-out measurement as the checkpoint state holds it."""
    return None if held is None else Rollouts(np.asarray(held["seeds"]), np.asarray(held["returns"]),
                                              np.asarray(held["lengths"]))
