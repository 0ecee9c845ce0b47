"""``replay:PATH``: answers each call with the next line's ``response_text`` of a JSONL file.

Any run's ``transcripts.jsonl`` replays that run: the calls come in the same order (repair attempts included), so
the same answers give the same policies. When the lines run out, :class:`ReplayExhausted` ends the run cleanly.
Lines may also be hand-written: ``{"response_text": "..."}`` is enough.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError, ReplayExhausted
from ..prompt import PromptContext
from .base import Completion, Message, OutputFormat

__all__ = ["ReplayBackend"]


class ReplayBackend:
    """Replays recorded answers in order."""

    name = "replay"
    is_llm = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            self.path = self.path / "transcripts.jsonl"
        self.model = str(self.path)
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BackendConfigError(f"replay file {self.path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise BackendConfigError(f"cannot read replay file {self.path}: {exc}") from None
        self.lines: list[dict[str, Any]] = []
        for k, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BackendConfigError(f"replay file {self.path} line {k} is not JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("response_text"), str):
                raise BackendConfigError(
                    f"replay file {self.path} line {k} has no string 'response_text' (use a transcripts.jsonl)"
                )
            self.lines.append(obj)
        self.position = 0
        first = self.lines[0] if self.lines else {}
        self.source_backend = str(first.get("backend", ""))
        self.source_model = str(first.get("model", ""))

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "replay",
            "model": str(self.path),
            "is_llm": False,
            "lines": len(self.lines),
            "source_backend": self.source_backend,
            "source_model": self.source_model,
        }

    def complete(
        self, messages: Sequence[Message], output: OutputFormat, context: PromptContext | None = None
    ) -> Completion:
        if self.position >= len(self.lines):
            raise ReplayExhausted(f"replay file {self.path} has no more answers after {len(self.lines)} lines")
        t0 = time.perf_counter()
        line = self.lines[self.position]
        self.position += 1
        return Completion(
            text=line["response_text"],
            latency_s=time.perf_counter() - t0,
            model=f"replay of {self.source_backend or 'unknown'}:{line.get('model', '')}",
            extra={"replay_line": self.position},
        )
