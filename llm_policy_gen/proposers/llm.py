"""A language model as the proposer: the prompt goes through the run's session, K samples at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..clients.base import Message
from ..clients.session import Answer, LLMSession
from ..prompting.builder import IterationState, PromptBuilder

__all__ = ["LLMProposer"]


class LLMProposer:
    """Asks the session's client for K candidates of the iteration's prompt (repairs included)."""

    def __init__(self, session: LLMSession, builder: PromptBuilder) -> None:
        self.session = session
        self.builder = builder
        self.name = session.provider
        self.model = session.model
        self.is_llm = session.client.is_llm

    def propose(self, ctx: IterationState, messages: Sequence[Message], k: int) -> list[Answer[Any]]:
        return self.session.sample(messages, ctx.fmt, ctx.format_context(), iteration=ctx.iteration, k=k,
                                   repair=self.builder.repair, record={"phase": "propose"})

    def describe(self) -> dict[str, Any]:
        return self.session.client.describe()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
