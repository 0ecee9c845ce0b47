"""What a prompt is rendered from: an iteration's state (what proposers read) and the fields only templates render.

:class:`IterationState` is what every proposer reads of an iteration (the non-LLM ones read it instead of the
prompt's text); :class:`PromptContext` adds what only the templates of :class:`~.builder.PromptBuilder` render;
:class:`HistoryEntry` is one earlier candidate's verdict, as the prompt's history shows it and the checkpoint keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..collect import Episode
from ..discretize import ActionDiscretizer, ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..formats.base import AnswerFormat, FormatContext, Target
from ..schema.aliases import event_in
from .memory import ExperienceMemory, StateEvidence

__all__ = ["HistoryEntry", "IterationState", "PromptContext"]


@dataclass(frozen=True)
class HistoryEntry:
    """What happened to one earlier candidate."""

    iteration: int
    test_mean: float | None
    """Mean return of the candidate on the test episodes (None: refused or failed before evaluation)."""
    test_episodes: int
    accepted: bool
    n_changed: int = 0
    note: str = ""
    candidate: int = 1
    confirmed: bool | None = None
    """For the challenger of an iteration: whether the fresh-seed confirmation upheld it (None: not confirmed)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HistoryEntry:
        return cls(**event_in(d))  # a checkpoint of an earlier version says eval_mean, eval_episodes


@dataclass(kw_only=True)
class IterationState:
    """What a proposer reads of an iteration: the task, the incumbent it answers, the answer format, the evidence
    and the verdicts so far. The non-LLM proposers read this instead of the prompt's text."""

    spec: EnvSpec
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    iteration: int
    current_table: np.ndarray
    """The incumbent the answer edits: actions (or values, for a potential) per state."""
    evidence: StateEvidence
    fmt: AnswerFormat[Any]
    target: Target
    history: list[HistoryEntry] = field(default_factory=list)
    fresh: list[Episode] = field(default_factory=list)
    """Episodes counted since the previous proposal (what an incremental learner has not seen yet)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra data a mode gives the non-LLM proposers (e.g. the learner's Q-table)."""
    current_source: dict[str, Any] | None = None
    """What the current table was compiled from (the kept rules), when it was."""

    @property
    def output_format(self) -> str:
        return self.fmt.name

    def format_context(self) -> FormatContext:
        return FormatContext(self.observation, self.actions, self.current_table, self.target, self.spec)


@dataclass(kw_only=True)
class PromptContext(IterationState):
    """Everything a prompt is rendered from: the iteration's state (what proposers read) and the fields only the
    templates render."""

    best_test_mean: float | None
    """The incumbent's mean on this iteration's test seeds."""
    test_episodes: int
    memory: ExperienceMemory
    best_k: int = 4
    worst_k: int = 1
    seed: int = 0
    candidates: int = 1
    """How many candidates this iteration asks for."""
    mode: str = "table"
    templates: tuple[str, str] = ("system.md", "user.md")
    """The (system, user) templates of the mode."""
    sections: dict[str, str] = field(default_factory=dict)
    """Extra template fields a mode supplies (its own sections of the prompt)."""
