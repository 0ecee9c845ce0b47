"""The shared shape of the non-LLM backends (offline optimiser, q-learning, random table).

They read the :class:`~llm_policy_gen.prompt.PromptContext` the prompt was rendered from, never an environment,
compute a table, and answer with it as text in the run's output format, so that their answers go through the same
parser and validator as an LLM's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..errors import BackendError
from ..prompt import PromptContext
from ..schema import render_table_answer
from .base import Completion, Message, OutputFormat

__all__ = ["TableProposer", "render_answer"]


def render_answer(ctx: PromptContext, table: np.ndarray, rationale: str) -> str:
    """``table`` as answer text in the run's output format (full table, or edits against the current table)."""
    if ctx.output_format == "edits":
        from ..edits import render_edits_answer

        return render_edits_answer(ctx.current_table, table, ctx.observation, rationale)
    return render_table_answer(table, rationale)


class TableProposer:
    """Base class: subclasses set ``name`` and ``label`` and implement :meth:`propose`."""

    name = "proposer"
    model = ""
    is_llm = False
    label = "not an LLM"
    """What transcripts show as the answering model."""

    def propose(self, ctx: PromptContext) -> tuple[np.ndarray, str]:
        """The proposed table and a one-line rationale."""
        raise NotImplementedError

    def complete(
        self, messages: Sequence[Message], output: OutputFormat, context: PromptContext | None = None
    ) -> Completion:
        if context is None:
            raise BackendError(f"the {self.name} backend needs the prompt context (it cannot read free text)")
        t0 = time.perf_counter()
        table, rationale = self.propose(context)
        text = render_answer(context, table, rationale)
        return Completion(text=text, latency_s=time.perf_counter() - t0, model=self.label)
