"""The on-disk answer cache the session keeps in front of an SDK client.

The key is a SHA-256 of provider, model, base URL, messages, output schema, sampling settings and the **sample
index** (the candidate number) and the call's seed where it has one, so the K candidates of an iteration are K
distinct samples and a re-run with the same inputs costs nothing. A hit returns the stored text with zero tokens (the
transcript marks it ``cached: true``).
Entries are JSON files written atomically; an unreadable entry (not JSON, not an object, or over the bounds of
:mod:`~llm_policy_gen.storage.safe_json`: a nesting or digit bomb) is a miss, and the new answer replaces it. Every
string of an entry has every known secret scrubbed from it when it is written (a key or URL password a server echoed, in
any field), and again when it is read (an entry written by an older version).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..storage.runlog import write_json_atomic
from ..storage.safe_json import loads
from .base import Completion, Request, Sampling
from .keys import redact_all

__all__ = ["ResponseCache", "cache_key"]


def cache_key(provider: str, model: str, base_url: str, request: Request, sampling: Sampling) -> str:
    payload = {
        "provider": provider,
        "model": model,
        "base_url": base_url,
        "messages": [m.to_dict() for m in request.messages],
        "output": {"name": request.output.name, "schema": request.output.json_schema},
        "sampling": asdict(sampling),
        "sample": request.key.candidate,
    }
    if request.seed is not None:  # the call's sampling seed (a function of the run seed and the key)
        payload["seed"] = request.seed
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


class ResponseCache:
    """Answers stored per (client, request, sample) under ``folder``."""

    def __init__(self, folder: Path, provider: str, model: str, base_url: str, sampling: Sampling) -> None:
        self.dir = Path(folder)
        self.provider, self.model, self.base_url, self.sampling = provider, model, base_url, sampling

    def _path(self, request: Request) -> tuple[str, Path]:
        key = cache_key(self.provider, self.model, self.base_url, request, self.sampling)
        return key, self.dir / key[:2] / f"{key}.json"

    def contains(self, request: Request) -> bool:
        """True when ``request`` would be answered from the cache (so it costs nothing)."""
        return self._path(request)[1].is_file()

    def get(self, request: Request) -> Completion | None:
        key, path = self._path(request)
        t0 = time.perf_counter()
        try:
            entry: dict[str, Any] = redact_all(loads(path.read_text(encoding="utf-8")))
            text = entry["text"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(text, str):
            return None
        return Completion(
            text=text,
            latency_s=time.perf_counter() - t0,
            model=str(entry.get("model", self.model)),
            finish_reason=entry.get("finish_reason"),
            truncated=bool(entry.get("truncated", False)),
            refusal=entry.get("refusal"),
            structured_output=str(entry.get("structured_output", "json_schema")),
            transport_attempts=0,
            extra={"cache_key": key},
        )

    def put(self, request: Request, completion: Completion) -> None:
        """Store an answer; a write that fails (a full disk) raises an ``OSError`` whose filename is the cache folder,
        so that the message names the cache, not the run directory."""
        _, path = self._path(request)
        try:
            self._write(path, completion)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.dir)) from exc

    @staticmethod
    def _write(path: Path, completion: Completion) -> None:
        write_json_atomic(path, redact_all({
            "text": completion.text,
            "model": completion.model,
            "input_tokens": completion.input_tokens,
            "output_tokens": completion.output_tokens,
            "finish_reason": completion.finish_reason,
            "truncated": completion.truncated,
            "refusal": completion.refusal,
            "structured_output": completion.structured_output,
            "created": time.time(),
        }))
