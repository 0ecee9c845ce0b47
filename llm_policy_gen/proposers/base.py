"""What answers a prompt context: the :class:`Proposer` protocol, and the shared shape of the non-LLM searches.

A proposer takes the :class:`~llm_policy_gen.prompting.builder.IterationState` of an iteration (and the messages
rendered from it) and returns K candidate answers (:class:`~llm_policy_gen.clients.session.Answer`), each a validated
table or the reason it has none. :class:`~llm_policy_gen.proposers.llm.LLMProposer` asks a model through the run's
:class:`~llm_policy_gen.clients.session.LLMSession`; the non-LLM proposers (``offline``, ``q-learning``, ``random``)
compute their tables from the context alone and never step an environment, so every episode a run uses is counted by the
engine. They are not LLM clients and do not pretend to be: :class:`TableSearch` renders each table as answer text in
the run's answer format, parses it back through that format (the same validator a model's answer meets) and writes
the same transcript line, so any run replays with ``replay:``. The line is written packed (its prompt and answer as
references to, or deflated against, the texts of the lines before it: :mod:`~llm_policy_gen.clients.transcript`),
since a search's 4 candidates share one prompt and its tables differ in a few states: a 30-iteration CartPole run's
transcript takes 0.18 MB instead of 2.6 MB; every reader of the package gives the lines back whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..clients.base import CallKey, Message
from ..clients.session import Answer
from ..clients.transcript import Transcript
from ..clients.usage import Usage
from ..errors import ProposalError
from ..prompting.context import IterationState

__all__ = ["Proposer", "TableSearch"]


@runtime_checkable
class Proposer(Protocol):
    """Context in, K candidates out."""

    name: str
    """Backend name (offline, q-learning, random, gemini, openai, ...)."""
    model: str
    is_llm: bool

    def propose(self, ctx: IterationState, messages: Sequence[Message], k: int) -> list[Answer[Any]]:
        """K candidate answers for ``ctx`` (``messages`` is the prompt rendered from it)."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for config.json."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the next proposal (for checkpoints)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...


class TableSearch:
    """Base of the non-LLM proposers: subclasses set ``name`` and ``label`` and implement :meth:`tables`."""

    name = "search"
    model = ""
    is_llm = False
    label = "not an LLM"
    """What transcripts show as the answering model."""
    phase = "propose"
    """What transcripts show as the call's phase."""

    def __init__(self, seed: int = 0, transcript: Transcript | None = None) -> None:
        self.seed = int(seed)
        self.transcript = transcript or Transcript(None, {})

    def tables(self, ctx: IterationState, k: int) -> list[tuple[Any, str]]:
        """``k`` tables (entries of ``ctx.target``), or values the run's answer format renders (rules), and a
        one-line rationale each."""
        raise NotImplementedError

    def propose(self, ctx: IterationState, messages: Sequence[Message], k: int) -> list[Answer[Any]]:
        out: list[Answer[Any]] = []
        fctx = ctx.format_context()
        for c, (table, rationale) in enumerate(self.tables(ctx, k), start=1):
            t0 = time.perf_counter()
            text = ctx.fmt.render(table, fctx, rationale)
            answer: Answer[Any] = Answer(c, text=text, usage=Usage(calls=1))
            try:
                answer.parsed = ctx.fmt.parse(text, fctx)
            except ProposalError as exc:  # a renderer bug, never a silent success
                answer.errors = exc.errors
            self.transcript.write({
                **CallKey(ctx.iteration, c, 1).to_dict(), "phase": self.phase, "backend": self.name,
                "model": self.label, "messages": [m.to_dict() for m in messages],
                "prompt_chars": sum(len(m.content) for m in messages), "response_text": text,
                "response_model": self.label, "valid": answer.ok, "errors": answer.errors,
                "notes": answer.parsed.notes if answer.parsed else [], "failed": False, "input_tokens": 0,
                "output_tokens": 0, "cost_usd": 0.0, "cached": False, "latency_s": round(time.perf_counter() - t0, 4),
            }, pack=True)
            out.append(answer)
        return out

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "model": self.label, "is_llm": False, "seed": self.seed}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
