"""The transcript browser's data: each model call's header, and its prompt and answer texts stored once.

A run of 100 iterations x 8 candidates makes 800 calls of 10-20 kB of text each, mostly the same prompt: the K
candidates of an iteration share it, a repair repeats it, and consecutive iterations share most of its sections.
Texts are cut at their Markdown headings and each distinct piece is stored once; the pieces travel in the page as
one gzip-compressed, base64-encoded JSON list that the page's script unpacks (``DecompressionStream``) and pastes
into a call's folded text when it is opened. Short texts (errors, short answers) are written into the page as they
are, so they show without the script.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INLINE_CHARS", "TextStore", "TextView", "CallView", "IterationCalls", "build_calls"]

INLINE_CHARS = 400
"""Texts up to this length are written in place; longer ones are folded and filled in when opened."""

_HEADING = re.compile(r"(?m)^(?=# )")


class TextStore:
    """Distinct pieces of text, each kept once; a text is the list of its pieces' numbers."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, text: str) -> list[int]:
        ids = []
        for piece in _HEADING.split(text):
            if not piece:
                continue
            if piece not in self._index:
                self._index[piece] = len(self.pieces)
                self.pieces.append(piece)
            ids.append(self._index[piece])
        return ids

    @property
    def chars(self) -> int:
        return sum(len(p) for p in self.pieces)

    def packed(self) -> str:
        """The pieces as base64 of gzip of JSON (what the page's script unpacks)."""
        raw = json.dumps(self.pieces, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


@dataclass
class TextView:
    """One text of a call: written in place when short, else a reference into the :class:`TextStore`."""

    chars: int
    inline: str | None
    ref: str
    """Comma-separated piece numbers (empty when inline)."""

    @classmethod
    def of(cls, text: str, store: TextStore) -> TextView:
        if len(text) <= INLINE_CHARS:
            return cls(len(text), text, "")
        return cls(len(text), None, ",".join(map(str, store.add(text))))


@dataclass
class CallView:
    """The header of one call and its texts."""

    iteration: int
    candidate: int | None
    attempt: int | None
    phase: str
    ok: bool
    failed: bool
    errors: list[str]
    messages: list[tuple[str, TextView]]
    answer: TextView
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float | None
    cached: bool
    reused: bool
    flags: list[str]
    """Other facts worth a badge: finish reason, truncation, refusal, structured output, notices."""
    anchor: str

    @property
    def status(self) -> str:
        return "failed" if self.failed else ("valid" if self.ok else "invalid")


@dataclass
class IterationCalls:
    iteration: int
    calls: list[CallView] = field(default_factory=list)

    @property
    def invalid(self) -> int:
        return sum(not c.ok for c in self.calls)

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd or 0.0 for c in self.calls)

    @property
    def cached(self) -> int:
        return sum(c.cached for c in self.calls)


def _flags(r: dict[str, Any]) -> list[str]:
    out = []
    if r.get("finish_reason") not in (None, "", "stop", "end_turn", "STOP"):
        out.append(f"finish: {r['finish_reason']}")
    for key, label in (("truncated", "truncated"), ("refusal", "refusal"), ("structured_output", "structured")):
        if r.get(key):
            out.append(label if r[key] is True else f"{label}: {str(r[key])[:60]}")
    if r.get("notice"):
        out.append(str(r["notice"])[:120])
    if r.get("state") is not None:
        out.append(f"state {r['state']}")
    return out


def build_calls(transcripts: Sequence[dict[str, Any]], store: TextStore) -> list[IterationCalls]:
    """Calls grouped by iteration, in the order they were written."""
    groups: dict[int, IterationCalls] = {}
    seen: dict[str, int] = {}
    for r in transcripts:
        it = int(r.get("iteration") or 0)
        failed = bool(r.get("failed")) or (not r.get("response_text") and bool(r.get("error")))
        errors = [str(e) for e in r.get("errors") or []]
        if r.get("error") and str(r["error"]) not in errors:
            errors.append(str(r["error"]))
        base = f"call-{it}-{r.get('candidate') or 1}-{r.get('attempt') or 1}"
        seen[base] = seen.get(base, 0) + 1
        anchor = base if seen[base] == 1 else f"{base}-{seen[base]}"
        messages = [(str(m.get("role", "?")), TextView.of(str(m.get("content") or ""), store))
                    for m in r.get("messages") or [] if isinstance(m, dict)]
        groups.setdefault(it, IterationCalls(it)).calls.append(CallView(
            iteration=it, candidate=r.get("candidate"), attempt=r.get("attempt"), phase=str(r.get("phase") or ""),
            ok=bool(r.get("valid")) and not failed, failed=failed, errors=errors, messages=messages,
            answer=TextView.of(str(r.get("response_text") or ""), store),
            input_tokens=int(r.get("input_tokens") or 0), output_tokens=int(r.get("output_tokens") or 0),
            cost_usd=r.get("cost_usd"), latency_s=r.get("latency_s"), cached=bool(r.get("cached")),
            reused=bool(r.get("reused")), flags=_flags(r), anchor=anchor,
        ))
    return [groups[k] for k in sorted(groups)]
