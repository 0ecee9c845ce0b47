"""What a run's calls cost and how many may run at once: the session's books, also kept by the non-LLM proposers
and shared by the runs of a sweep.

* :class:`Usage` -- calls, tokens and cost, summed;
* :class:`Budget` -- a spending ceiling that counts calls in flight;
* :class:`CallLimiter` -- what bounds the calls in flight (:class:`LocalLimiter` in one process; a sweep's shared
  limiter across processes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Protocol

__all__ = ["Usage", "Budget", "CallLimiter", "LocalLimiter"]


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
