"""An on-disk answer cache in front of any SDK backend.

The key is a SHA-256 of provider, model, base URL, messages, output schema and sampling settings, so a re-run with
the same inputs costs nothing. A hit returns the stored text with zero tokens and ``cached=True`` (marked in the
transcript). Entries are JSON files written atomically; an unreadable entry is a miss.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runlog import write_json_atomic
from .base import Backend, Completion, Message, OutputFormat, Sampling

if TYPE_CHECKING:
    from ..prompt import PromptContext

__all__ = ["CachingBackend", "cache_key"]


def cache_key(
    provider: str, model: str, base_url: str, messages: Sequence[Message], output: OutputFormat, sampling: Sampling
) -> str:
    payload = {
        "provider": provider,
        "model": model,
        "base_url": base_url,
        "messages": [m.to_dict() for m in messages],
        "output": {"name": output.name, "schema": output.json_schema},
        "sampling": asdict(sampling),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


class CachingBackend:
    """Wraps a backend; answers from ``cache_dir`` when the same call was made before."""

    def __init__(self, inner: Backend, cache_dir: Path, sampling: Sampling) -> None:
        self.inner = inner
        self.dir = Path(cache_dir)
        self.sampling = sampling
        self.name = inner.name
        self.model = inner.model
        self.is_llm = inner.is_llm
        self.hits = 0

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "cache_dir": str(self.dir)}

    def _path(self, messages: Sequence[Message], output: OutputFormat) -> tuple[str, Path]:
        base_url = str(self.inner.describe().get("base_url", "") or "")
        key = cache_key(self.name, self.model, base_url, messages, output, self.sampling)
        return key, self.dir / key[:2] / f"{key}.json"

    def would_hit(self, messages: Sequence[Message], output: OutputFormat) -> bool:
        """True when this call would be answered from the cache (so it costs nothing)."""
        return self._path(messages, output)[1].is_file()

    def complete(
        self, messages: Sequence[Message], output: OutputFormat, context: PromptContext | None = None
    ) -> Completion:
        key, path = self._path(messages, output)
        t0 = time.perf_counter()
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            text = entry["text"]
            if isinstance(text, str):
                self.hits += 1
                return Completion(
                    text=text,
                    latency_s=time.perf_counter() - t0,
                    model=str(entry.get("model", self.model)),
                    cached=True,
                    transport_attempts=0,
                    extra={"cache_key": key},
                )
        except (OSError, ValueError, KeyError, TypeError):
            pass
        result = self.inner.complete(messages, output, context)
        write_json_atomic(
            path,
            {
                "text": result.text,
                "model": result.model,
                "input_tokens": result.input_tokens,
                "output_tokens": result.output_tokens,
                "created": time.time(),
            },
        )
        return result
