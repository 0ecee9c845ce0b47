"""``action``: one action as a line ``Action: N`` (the direct mode's answer, plain text, no JSON schema).

The answer's last ``Action: N`` is used (case-insensitive; ``Action = N`` and markdown bold are accepted). No such
line, or ``N`` outside ``0..n_actions-1``, refuses the answer. Plain text, so no JSON schema carries
that range: the parser alone checks it.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ProposalError
from ..storage.templates import fill
from .base import AnswerFormat, FormatContext, Parsed

__all__ = ["ActionFormat", "parse_action"]

_ACTION = re.compile(r"action\**\s*[:=]\s*\**\s*(-?\d+)", re.IGNORECASE)


def parse_action(text: str, n_actions: int) -> int:
    """The action of an ``Action: N`` answer (the last such line); :class:`ProposalError` when there is none."""
    found = _ACTION.findall(text or "")
    if not found:
        raise ProposalError([f"no 'Action: N' line found (N in 0..{n_actions - 1})"], text or "")
    a = int(found[-1])
    if not 0 <= a < n_actions:
        raise ProposalError([f"action {a} out of range 0..{n_actions - 1}"], text)
    return a


class ActionFormat(AnswerFormat[int]):
    """``action``: a single ``Action: N`` line."""

    name = "action"

    def json_schema(self, ctx: FormatContext) -> dict[str, Any] | None:
        return None

    def prompt_section(self, ctx: FormatContext) -> str:
        return fill("format_action.md", max_action=ctx.target.n_actions - 1)

    def parse(self, text: str, ctx: FormatContext) -> Parsed[int]:
        return Parsed(parse_action(text, ctx.target.n_actions))

    def render(self, value: int, ctx: FormatContext, rationale: str) -> str:
        return f"{rationale}\nAction: {int(value)}" if rationale else f"Action: {int(value)}"
