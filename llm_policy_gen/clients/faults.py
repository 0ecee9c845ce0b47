"""The faults every SDK shares, sorted into the contract's fault kinds (:data:`~.retry.FaultKind`).

* **Unreachable server.** A refused connection or a host name that does not resolve becomes :class:`Unreachable`
  (fault kind ``"unreachable"``), a connect or read timeout :class:`TimedOut` (fault kind ``"timeout"``), whose
  text names the underlying error (:func:`unreachable_reason`); when no attempt of a call reached the server, the
  retry loop raises :class:`~llm_policy_gen.errors.BackendUnreachable` naming the URL (without userinfo).
* **A whole attempt too slow.** :class:`DeadlinePassed` (see :mod:`.deadline`): retried as a timeout is, but counted
  as a failed call, not as a server that was never reached.
* **A 2xx body that is not the provider's JSON** (a proxy's HTML page, a JSON object without ``choices`` /
  ``content`` / ``candidates``) becomes :class:`MalformedResponse` (fault kind ``"retry"``; :func:`not_json`,
  :func:`require`): never an ``AttributeError`` from deep inside the answer's parsing.
* **Other transport faults** (the server hung up, a broken read; :func:`is_transport_fault`) are retried like a 5xx.

The SDKs wrap the HTTP package's errors in their own, so each test looks along the chain of causes.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = [
    "MalformedResponse",
    "DeadlinePassed",
    "TimedOut",
    "Unreachable",
    "is_timeout",
    "is_transport_fault",
    "not_json",
    "preview",
    "require",
    "unreachable_reason",
]

T = TypeVar("T")


class MalformedResponse(Exception):
    """A 2xx answer whose body is not the provider's JSON (retried under the policy)."""


class Unreachable(Exception):
    """No answer from the server: connection refused, DNS failure, or a connect or read timeout."""


class TimedOut(Unreachable):
    """No answer within the attempt's timeout: a phase of the attempt (connect, write, a read) timed out."""


class DeadlinePassed(Exception):
    """The attempt's whole-attempt deadline passed while the server was still answering (its bytes trickled in, each
    within the SDK's per-read timeout): the server was reached, so the call failed rather than found no server."""


def _http_modules() -> list[Any]:
    """The HTTP packages the SDKs may use (httpx2 by default; legacy httpx when google-genai is told to)."""
    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


_HTTP = _http_modules()
#: Timeouts of any phase (connect, read, write, pool): the server never answered in time.
_TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, *(m.TimeoutException for m in _HTTP))
#: Failures to open a connection: refused, unresolvable host name, unroutable address.
_CONNECT_FAILURES: tuple[type[BaseException], ...] = (
    ConnectionRefusedError,
    socket.gaierror,
    *(m.ConnectError for m in _HTTP),
)
#: Other transport faults (the server hung up, a broken read): retried like a 5xx.
_TRANSPORT_FAULTS: tuple[type[BaseException], ...] = (ConnectionError, *(m.TransportError for m in _HTTP))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (SDKs wrap the HTTP package's error in their own)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_timeout(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) is a timeout of some phase of an attempt."""
    return any(isinstance(e, _TIMEOUTS) for e in _chain(exc))


def unreachable_reason(exc: BaseException, timeout_s: float | None = None) -> str | None:
    """A short text when ``exc`` means the server never answered (refused, DNS failure, timeout), else None."""
    for e in _chain(exc):
        if isinstance(e, _TIMEOUTS):
            within = f" within {timeout_s:g} s" if timeout_s else ""
            return f"no answer{within} ({type(e).__name__})"
        if isinstance(e, _CONNECT_FAILURES):
            return f"{type(e).__name__}: {e}"
    return None


def is_transport_fault(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) is a network fault other than an unreachable server."""
    return any(isinstance(e, _TRANSPORT_FAULTS) for e in _chain(exc))


def preview(text: str, limit: int = 80) -> str:
    """The start of a body that is not JSON, on one line, as an error quotes it."""
    line = " ".join(text.split())
    return repr(line if len(line) <= limit else line[:limit] + "...")


def not_json(label: str, detail: str) -> MalformedResponse:
    """The error of a 2xx body that is not ``label``'s JSON."""
    return MalformedResponse(f"the body was not {label}'s JSON ({detail})")


def require(value: T | None, what: str, label: str, kind: type | None = None) -> T:
    """``value``, or :class:`MalformedResponse` when the answer lacks it (the SDKs fill missing fields with None) or
    it is not a ``kind``."""
    if value is None:
        raise not_json(label, f"no {what}")
    if kind is not None and not isinstance(value, kind):
        raise not_json(label, f"{what} is a {type(value).__name__}, not a {kind.__name__}")
    return value
