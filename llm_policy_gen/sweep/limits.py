"""Provider limits and one spending ceiling, shared by every run of a sweep, on one machine or many.

``compare`` gives all its runs one :class:`SweepLimits`: per provider, at most ``max_concurrent`` calls in flight and
at most ``rpm`` call starts a minute; for the whole sweep, one budget that counts calls in flight. The object reaches
the runs through whatever they share: itself when they run in this process, a :mod:`multiprocessing` manager for a
local process pool (:func:`managed_limits`), a Ray actor on a cluster (:mod:`llm_policy_gen.sweep.ray`). A run
sees it through the engine's two seams, :class:`SharedLimiter` (a :class:`~llm_policy_gen.clients.usage.CallLimiter`)
and :class:`SharedBudget` (a :class:`~llm_policy_gen.clients.usage.Budget`).

Every slot and every reservation is held in the name of a *holder*, one attempt of one run, so that the sweep can
give back what an attempt held when its process or its node died (:meth:`SweepLimits.forget`).

Calls are counted per provider *key*: the backend name, and the base URL when one is set
(:func:`provider_key`), so two OpenAI-compatible servers do not share a limit but every run against one does.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.managers import BaseManager
from typing import Any, Protocol, cast

from ..clients.usage import Budget

__all__ = ["DEFAULT_MAX_CONCURRENT_CALLS", "Limits", "SweepLimits", "SharedLimiter", "SharedBudget", "provider_key",
           "managed_limits"]

DEFAULT_MAX_CONCURRENT_CALLS = 8
"""Calls in flight at once per provider across a sweep, when ``compare --max-concurrent-calls`` is not given."""


class Limits(Protocol):
    """What a run needs from the sweep's limits (a :class:`SweepLimits` or a proxy of one in another process)."""

    def try_acquire(self, key: str, holder: str) -> bool: ...

    def release(self, key: str, holder: str) -> None: ...

    def start_delay(self, key: str) -> float: ...

    def reserve(self, holder: str, estimate: float) -> bool: ...

    def settle(self, holder: str, estimate: float, actual: float) -> float: ...

    def forget(self, holder: str) -> None: ...

    def refund(self, amount: float) -> None: ...

    def report(self) -> dict[str, Any]: ...


class SweepLimits:
    """The sweep's shared state: call slots and start times per provider key, and the budget (thread-safe).

    Args:
        max_concurrent: Calls in flight at once per provider key.
        rpm: Call starts per minute per provider key (None: no rate limit).
        budget_usd: The sweep's spending ceiling (None: none).
        spent_usd: What earlier invocations of the sweep already spent (their committed costs).
    """

    def __init__(self, max_concurrent: int = DEFAULT_MAX_CONCURRENT_CALLS, rpm: float | None = None,
                 budget_usd: float | None = None, spent_usd: float = 0.0) -> None:
        self.max_concurrent = max(1, int(max_concurrent))
        self.rpm = float(rpm) if rpm else None
        self.limit = budget_usd
        self._lock = threading.Lock()
        self._slots: dict[str, Counter[str]] = {}
        self._peak: dict[str, int] = {}
        self._next_start: dict[str, float] = {}
        self._reserved: dict[str, float] = {}
        self._reserved_total = 0.0
        self._spent = float(spent_usd)
        self._refused = 0

    # ------------------------------------------------------------------ calls in flight
    def try_acquire(self, key: str, holder: str) -> bool:
        """Take a call slot of ``key`` for ``holder``; False when all ``max_concurrent`` are taken."""
        with self._lock:
            held = self._slots.setdefault(key, Counter())
            n = sum(held.values())
            if n >= self.max_concurrent:
                return False
            held[holder] += 1
            self._peak[key] = max(self._peak.get(key, 0), n + 1)
            return True

    def release(self, key: str, holder: str) -> None:
        with self._lock:
            held = self._slots.get(key)
            if held is not None and held[holder] > 0:
                held[holder] -= 1
                if not held[holder]:
                    del held[holder]

    def start_delay(self, key: str) -> float:
        """Book the next start of ``key`` under the rate limit; returns the seconds to wait before starting."""
        if not self.rpm:
            return 0.0
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start.get(key, 0.0))
            self._next_start[key] = start + 60.0 / self.rpm
            return start - now

    # ------------------------------------------------------------------ the budget
    def reserve(self, holder: str, estimate: float) -> bool:
        """Hold ``estimate`` USD for a call about to start; False (and counted) when it would pass the ceiling."""
        with self._lock:
            if self.limit is not None and self._spent + self._reserved_total + estimate > self.limit:
                self._refused += 1
                return False
            self._reserved[holder] = self._reserved.get(holder, 0.0) + estimate
            self._reserved_total += estimate
            return True

    def settle(self, holder: str, estimate: float, actual: float) -> float:
        """Release a reservation and count what the call cost; returns the sweep's spending so far."""
        with self._lock:
            held = self._reserved.pop(holder, 0.0)
            give_back = min(estimate, held)
            if held - give_back > 0:
                self._reserved[holder] = held - give_back
            self._reserved_total = max(0.0, self._reserved_total - give_back)
            self._spent += actual
            return self._spent

    def refund(self, amount: float) -> None:
        """Take back costs that will be counted again (calls a resumed run answers from its record)."""
        with self._lock:
            self._spent = max(0.0, self._spent - amount)

    def forget(self, holder: str) -> None:
        """Give back every slot and reservation of ``holder`` (an attempt whose process or node died)."""
        with self._lock:
            for held in self._slots.values():
                held.pop(holder, None)
            self._reserved_total = max(0.0, self._reserved_total - self._reserved.pop(holder, 0.0))

    def report(self) -> dict[str, Any]:
        """The limits, the spending and what they did (for compare.json and results.md)."""
        with self._lock:
            return {"max_concurrent_calls": self.max_concurrent, "rpm": self.rpm, "budget_usd": self.limit,
                    "spent_usd": round(self._spent, 6), "calls_refused_by_budget": self._refused,
                    "peak_calls_in_flight": dict(self._peak)}


class SharedLimiter:
    """A run's :class:`~llm_policy_gen.clients.usage.CallLimiter` over the sweep's limits for one provider key."""

    def __init__(self, limits: Limits, key: str, holder: str, poll_s: float = 0.02) -> None:
        self.limits, self.key, self.holder, self.poll_s = limits, key, holder, poll_s

    @contextmanager
    def slot(self) -> Iterator[None]:
        wait = self.poll_s
        while not self.limits.try_acquire(self.key, self.holder):
            time.sleep(wait)
            wait = min(wait * 2, 0.25)
        try:
            delay = self.limits.start_delay(self.key)
            if delay > 0:
                time.sleep(delay)
            yield
        finally:
            self.limits.release(self.key, self.holder)


class SharedBudget(Budget):
    """A run's :class:`~llm_policy_gen.clients.usage.Budget` over the sweep's ceiling; ``spent`` is the sweep's spending
    as of this run's last call."""

    def __init__(self, limits: Limits, holder: str) -> None:
        super().__init__(None)
        self.limits, self.holder = limits, holder

    def reserve(self, estimate: float) -> bool:
        return bool(self.limits.reserve(self.holder, estimate))

    def settle(self, estimate: float, actual: float) -> None:
        self.spent = float(self.limits.settle(self.holder, estimate, actual))


def provider_key(backend: str | None, base_url: str | None = None) -> str:
    """The limit a run's calls count against: the backend name, plus the base URL (``--base-url`` or the SDK's
    variable) when one is set; ``none`` for a run without a backend (it makes no call)."""
    from ..backends import base_url_variable, parse_backend_spec
    from ..clients.keys import without_userinfo

    if backend is None:
        return "none"
    name, _ = parse_backend_spec(backend)
    variable = base_url_variable(name)
    url = base_url or (os.environ.get(variable, "") if variable else "")
    return f"{name} {without_userinfo(url)}".strip()  # it is reported in compare.json: never a password


class _LimitsManager(BaseManager):
    """Serves one :class:`SweepLimits` to the processes of a local pool."""


_LimitsManager.register("SweepLimits", SweepLimits)


@contextmanager
def managed_limits(**kwargs: Any) -> Iterator[Limits]:
    """A :class:`SweepLimits` in a manager process (spawned; a Unix socket), as a proxy that pickles into workers."""
    from ..storage.locks import sweep_helper

    manager = _LimitsManager(ctx=mp.get_context("spawn"))
    manager.start(sweep_helper, (os.getpid(),))  # it ends with the sweep, even a killed one, not before it
    try:
        yield cast(Limits, manager.SweepLimits(**kwargs))  # type: ignore[attr-defined]
    finally:
        manager.shutdown()
