"""``transcripts.jsonl``: one line per call, written as calls end (:class:`Transcript`), read back whole through
:func:`read_transcript` (every reader of the package: the run directory, the report, a resume, ``replay:``), and on a
resume split so that the calls after the checkpoint are answered from their lines (:class:`RecordedCalls`) instead of
being sent again.

**Packed lines.** A call that no model answered (a non-LLM proposer's table: ``offline``, ``random``, a refinement,
...) is written packed (``Transcript.write(..., pack=True)``): its line says ``"packed": 1``, and each of its texts
(a message's ``content``, the ``response_text``) is either the text itself, ``{"same": KEY}`` (the same text as that
slot of the earlier line whose call key is ``KEY``, ``[iteration, candidate, attempt]`` or ``[..., state]``), or
``{"base": KEY, "zlib": B64}`` (the text deflated with that earlier text as zlib's preset dictionary, in base64).
The K candidates of an iteration share their prompt, and consecutive prompts and tables differ in a few lines, so a
30-iteration CartPole offline run writes 0.18 MB instead of 2.6 MB. :func:`unpack_lines` gives each line back
whole (the exact texts: zlib is lossless and checks its dictionary), without the marker; a line of a model's call is
written and read as it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..storage.runlog import TRANSCRIPT_FIELDS, append_jsonl, check_fields, read_jsonl
from .base import CallKey, Message
from .keys import redact_all

__all__ = ["Transcript", "RecordedCalls", "messages_digest", "read_transcript", "unpack_lines", "MAX_TEXT_BYTES"]

PACKED = "packed"
"""The marker of a packed line (its value is the packing's version, 1)."""
MAX_TEXT_BYTES = 64 * 2**20
"""The longest text a packed line unpacks to (a hand-made deflate stream could expand to gigabytes)."""
_BASES = 4
"""Earlier texts of a slot a new one is deflated against (the shortest result is kept): a table often resembles
the candidate before the last more than the last."""
_LONG = 64 * 1024
"""A text longer than this is deflated against the latest earlier text only, at zlib's default level: zlib's window
is 32 KiB, so a dictionary shapes only the start of a long text, and level 9 takes four times as long on 1.7 MB."""

Slot = tuple[str, int]
"""Which text of a line: ``("m", i)`` message i's content, ``("r", 0)`` the answer."""


def messages_digest(messages: Sequence[Message] | Sequence[dict[str, str]]) -> str:
    """A short hash of a conversation (to tell that a recorded call is the same call)."""
    rows = [m.to_dict() if isinstance(m, Message) else {"role": m["role"], "content": m["content"]} for m in messages]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _key_list(line: dict[str, Any]) -> list[int]:
    k = CallKey.of(line)
    return [k.iteration, k.candidate, k.attempt] + ([] if k.state is None else [k.state])


def _deflate(text: str, base: str) -> str:
    z = zlib.compressobj(9 if len(text) <= _LONG else 6, zdict=base.encode("utf-8"))
    return base64.b64encode(z.compress(text.encode("utf-8")) + z.flush()).decode("ascii")


class _Packer:
    """Remembers the last texts of each slot of the packed lines written, and writes a text as a reference to an
    equal one or deflated against the most alike (the texts stay whole where that is not shorter)."""

    def __init__(self) -> None:
        self._seen: dict[Slot, deque[tuple[list[int], str]]] = {}

    def forget(self, key: list[int]) -> None:
        """A line of ``key`` is being written: earlier lines of that key can no longer be named by it."""
        for slot, earlier in self._seen.items():
            self._seen[slot] = deque(((k, t) for k, t in earlier if k != key), maxlen=_BASES)

    def text(self, slot: Slot, key: list[int], text: str) -> str | dict[str, Any]:
        earlier = self._seen.setdefault(slot, deque(maxlen=_BASES))
        out: str | dict[str, Any] = text
        same = next((k for k, t in reversed(earlier) if t == text), None)
        if same is not None:
            out = {"same": same}
        elif earlier:
            bases = {t: k for k, t in (earlier if len(text) <= _LONG else [earlier[-1]])}  # each text once
            packed = min(({"base": k, "zlib": _deflate(text, t)} for t, k in reversed(bases.items())),
                         key=lambda p: len(p["zlib"]))
            if len(packed["zlib"]) + 24 < len(json.dumps(text)):
                out = packed
        earlier.append((key, text))
        return out

    def line(self, line: dict[str, Any]) -> dict[str, Any]:
        key = _key_list(line)
        messages = [{**m, "content": self.text(("m", i), key, m["content"])} for i, m in enumerate(line["messages"])]
        answer = self.text(("r", 0), key, line["response_text"])
        return {**line, PACKED: 1, "messages": messages, "response_text": answer}


class Transcript:
    """Appends one line per call to ``transcripts.jsonl`` (thread-safe), with the run's common fields."""

    def __init__(self, path: Path | None, common: dict[str, Any]) -> None:
        self.path = path
        self.common = dict(common)
        self._lock = threading.Lock()
        self._packer = _Packer()
        self.lines_written = 0

    def write(self, record: dict[str, Any], pack: bool = False) -> None:
        """Append ``record`` (secrets redacted first); ``pack``: a call no model answered, written packed."""
        line = redact_all({**record, **{k: v for k, v in self.common.items() if k not in record}})
        with self._lock:
            self._packer.forget(_key_list(line))
            if pack:
                line = self._packer.line(line)
            if self.path is not None:
                append_jsonl(self.path, line)
            self.lines_written += 1


def unpack_lines(rows: Sequence[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """``rows`` (the lines of one transcript, in order) with every packed text given back whole; a packed text that
    cannot be rebuilt is a :class:`UserError` naming ``where`` and the line. A field of another type (``messages:
    5``, ``candidate: "x"``) is left as it is, for :func:`~llm_policy_gen.storage.runlog.check_fields` to name."""
    texts: dict[tuple[tuple[int, ...], Slot], str] = {}
    out: list[dict[str, Any]] = []
    for number, row in enumerate(rows, 1):
        try:
            key = tuple(_key_list(row))
        except (TypeError, ValueError):
            out.append(row)
            continue
        line = row
        if row.get(PACKED) is not None:
            try:
                line = _unpacked(row, lambda slot, ref: texts.get((tuple(ref), slot)))
            except (KeyError, TypeError, ValueError, zlib.error, binascii.Error) as exc:
                raise UserError(f"{where} line {number}: a packed text cannot be read back ({str(exc)[:80]}); the "
                                "file was changed by hand or by another program") from None
        messages, answer = line.get("messages"), line.get("response_text")
        for i, m in enumerate(messages if isinstance(messages, list) else []):
            if isinstance(m, dict) and isinstance(m.get("content"), str):
                texts[key, ("m", i)] = m["content"]
        if isinstance(answer, str):
            texts[key, ("r", 0)] = answer
        out.append(line)
    return out


def _unpacked(row: dict[str, Any], earlier: Callable[[Slot, Any], str | None]) -> dict[str, Any]:
    """``row`` without its marker, its packed texts (objects) rebuilt from ``earlier`` (slot, key -> text)."""
    if row[PACKED] != 1:
        raise ValueError(f"packed version {row[PACKED]!r} is not 1")

    def text(slot: Slot, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        ref = value["same"] if "same" in value else value["base"]
        base = earlier(slot, ref)
        if base is None:
            raise ValueError(f"it refers to call {ref}, which no earlier line holds")
        if "same" in value:
            return base
        z = zlib.decompressobj(zdict=base.encode("utf-8"))
        data = z.decompress(base64.b64decode(value["zlib"], validate=True), MAX_TEXT_BYTES)
        if z.unconsumed_tail or z.unused_data or not z.eof:
            raise ValueError(f"a text over {MAX_TEXT_BYTES:,} bytes, cut, or followed by other data")
        return data.decode("utf-8")

    line = {k: v for k, v in row.items() if k != PACKED}
    messages = row.get("messages")
    if isinstance(messages, list):
        line["messages"] = [{**m, "content": text(("m", i), m["content"])} if isinstance(m, dict) and "content" in m
                            else m for i, m in enumerate(messages)]
    if "response_text" in row:
        line["response_text"] = text(("r", 0), row["response_text"])
    return line


def read_transcript(path: Path, on_torn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The lines of a ``transcripts.jsonl``, each whole (:func:`unpack_lines`), their computed fields checked."""
    rows = unpack_lines(read_jsonl(path, on_torn=on_torn), str(path))
    check_fields(rows, path, TRANSCRIPT_FIELDS)
    return rows


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
        """Split a transcript: lines of iterations up to ``after_iteration`` are kept as written (packed ones
        included: what they refer to is kept before them), later ones become records, whole (``on_torn`` hears of a
        last line cut by a kill, which is dropped)."""
        if not path.is_file():
            return cls(), []
        raw = read_jsonl(path, on_torn=on_torn)
        rows = unpack_lines(raw, str(path))
        check_fields(rows, path, TRANSCRIPT_FIELDS)  # a reused call's fields are computed with: one line if bad
        keep = [r for r in raw if int(r.get("iteration", 0)) <= after_iteration]
        return cls([r for r in rows if int(r.get("iteration", 0)) > after_iteration]), keep

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
