"""``transcripts.jsonl``: one line per model call, written as calls end (:class:`Transcript`), and read back on a
resume, where the calls after the checkpoint are answered from their lines (:class:`RecordedCalls`) instead of
being sent again."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..storage.runlog import TRANSCRIPT_FIELDS, append_jsonl, check_fields, read_jsonl
from .base import CallKey, Message
from .keys import redact_all

__all__ = ["Transcript", "RecordedCalls", "messages_digest"]


def messages_digest(messages: Sequence[Message] | Sequence[dict[str, str]]) -> str:
    """A short hash of a conversation (to tell that a recorded call is the same call)."""
    rows = [m.to_dict() if isinstance(m, Message) else {"role": m["role"], "content": m["content"]} for m in messages]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode("utf-8")).hexdigest()[:16]


class Transcript:
    """Appends one line per call to ``transcripts.jsonl`` (thread-safe), with the run's common fields."""

    def __init__(self, path: Path | None, common: dict[str, Any]) -> None:
        self.path = path
        self.common = dict(common)
        self._lock = threading.Lock()
        self.lines_written = 0

    def write(self, record: dict[str, Any]) -> None:
        line = redact_all({**record, **{k: v for k, v in self.common.items() if k not in record}})
        with self._lock:
            if self.path is not None:
                append_jsonl(self.path, line)
            self.lines_written += 1


class RecordedCalls:
    """Answers of calls made before a resume, found by key and checked against the messages sent."""

    def __init__(self, records: Sequence[dict[str, Any]] = ()) -> None:
        self._by_key: dict[CallKey, dict[str, Any]] = {}
        for r in records:
            self._by_key[CallKey.of(r)] = r
        self._lock = threading.Lock()

    @classmethod
    def from_transcript(cls, path: Path, after_iteration: int, on_torn: Callable[[str], None] | None = None
                        ) -> tuple[RecordedCalls, list[dict[str, Any]]]:
        """Split a transcript: lines of iterations up to ``after_iteration`` are kept, later ones become records
        (``on_torn`` hears of a last line cut by a kill, which is dropped)."""
        if not path.is_file():
            return cls(), []
        keep: list[dict[str, Any]] = []
        later: list[dict[str, Any]] = []
        rows = read_jsonl(path, on_torn=on_torn)
        check_fields(rows, path, TRANSCRIPT_FIELDS)  # a reused call's fields are computed with: one line if bad
        for r in rows:
            (keep if int(r.get("iteration", 0)) <= after_iteration else later).append(r)
        return cls(later), keep

    def __len__(self) -> int:
        return len(self._by_key)

    def take(self, key: CallKey, messages: Sequence[Message]) -> dict[str, Any] | None:
        """The recorded line of ``key`` if it was made with the same messages (used once)."""
        with self._lock:
            rec = self._by_key.get(key)
            if rec is None or messages_digest(rec.get("messages", [])) != messages_digest(messages):
                return None
            del self._by_key[key]
            return rec
