"""What a run's calls cost and how many may run at once: the session's books, also kept by the non-LLM proposers
and shared by the runs of a sweep.

* :class:`Usage` -- calls, tokens and cost, summed;
* :class:`Budget` -- a spending ceiling that counts calls in flight;
* :class:`CallLimiter` -- what bounds the calls in flight (:class:`LocalLimiter` in one process; a sweep's shared
  limiter across processes).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Protocol

from .base import Completion

__all__ = ["Usage", "Budget", "CallLimiter", "LocalLimiter", "MAX_TOKENS", "token_count", "clamp_usage"]

MAX_TOKENS = 100_000_000
"""The most tokens one call may report in any usage field (a hundred times the longest context offered today): a
server's larger count, like a negative one, is not believed (see :func:`token_count`)."""


def token_count(value: object) -> tuple[int, bool]:
    """A token count a server reported, clamped to ``0..MAX_TOKENS``; the flag says it was changed (negative, too
    large, not a whole number). A negative count would make a negative cost, so that ``--budget-usd`` never stops a
    run; a huge one an infinite cost."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0, value is not None
    if value != value:  # nan
        return 0, True
    clamped = min(max(value, 0), MAX_TOKENS)
    whole = int(clamped)
    return whole, whole != value


@dataclass
class Usage:
    """Calls, tokens and cost, summed."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    """Answers received (from the client, the cache or a recorded call)."""
    cached_calls: int = 0
    """Answers from the on-disk cache (free)."""
    failed_calls: int = 0
    """Calls that failed after the retry policy."""
    unpriced_calls: int = 0
    """Paid calls of a model with no price (their cost is unknown)."""

    def add(self, other: Usage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def copy(self) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Usage:
        return cls(**{f.name: d.get(f.name, 0) for f in fields(cls)})


def clamp_usage(comp: Completion) -> Completion:
    """``comp`` with its token counts in ``0..MAX_TOKENS`` (:func:`token_count`), the reported values of
    those changed kept in ``usage_clamped``."""
    flagged: dict[str, str] = {}

    def count(name: str, reported: object) -> int:
        value, changed = token_count(reported)
        if changed:
            flagged[name] = str(reported)[:40]
        return value

    fresh = count("input_tokens", comp.input_tokens)
    out = count("output_tokens", comp.output_tokens)
    cached = min(count("cached_input_tokens", comp.cached_input_tokens), fresh)
    written = min(count("cache_write_tokens", comp.cache_write_tokens), fresh)
    if not flagged:
        return comp
    return dataclasses.replace(comp, input_tokens=fresh, output_tokens=out, cached_input_tokens=cached,
                               cache_write_tokens=written, usage_clamped={**comp.usage_clamped, **flagged})


class Budget:
    """A spending ceiling that counts calls in flight (thread-safe)."""

    def __init__(self, limit_usd: float | None, spent_usd: float = 0.0) -> None:
        self.limit = limit_usd
        self.spent = float(spent_usd)
        self.reserved = 0.0
        self._lock = threading.Lock()

    def reserve(self, estimate: float) -> bool:
        """Hold ``estimate`` for a call about to start; False when it would pass the limit."""
        with self._lock:
            if self.limit is not None and self.spent + self.reserved + estimate > self.limit:
                return False
            self.reserved += estimate
            return True

    def settle(self, estimate: float, actual: float) -> None:
        """Release a reservation and count what the call really cost."""
        with self._lock:
            self.reserved = max(0.0, self.reserved - estimate)
            self.spent += actual


class CallLimiter(Protocol):
    """Bounds the calls in flight (and, optionally, their rate)."""

    def slot(self) -> Any:
        """A context manager held for the duration of one call."""
        ...


class LocalLimiter:
    """At most ``max_concurrent`` calls at once in this process, and at most ``rpm`` starts per minute."""

    def __init__(self, max_concurrent: int = 8, rpm: float | None = None) -> None:
        self._sem = threading.BoundedSemaphore(max(1, int(max_concurrent)))
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._sem:
            if self.interval:
                with self._lock:
                    now = time.monotonic()
                    start = max(now, self._next)
                    self._next = start + self.interval
                if start > now:
                    time.sleep(start - now)
            yield
