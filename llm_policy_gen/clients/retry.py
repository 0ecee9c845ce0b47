"""The one retry policy every SDK client's calls run under (the SDKs' own retries are switched off).

:class:`RetryPolicy` says how often and how long to wait; :func:`call_with_retries` runs a call under it, sorting
each exception into a fault kind with a :data:`Classifier`; :func:`timed_call_with_retries` adds the call's wall
time. :func:`retry_after_seconds` reads a server's ``Retry-After``, and :func:`http_status_fault` sorts an HTTP error
status into a fault kind.

Local servers (Ollama, ``llama_cpp.server`` or any OpenAI-compatible server on a loopback address, the in-process
model) get their own defaults (:meth:`RetryPolicy.resolved`): a long timeout, since a small machine may take minutes
over one prompt, and no retry of a call that timed out, since the server is still busy with it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal, Required, TypedDict, TypeVar

from ..errors import BackendAuthError, BackendError, BackendUnreachable

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "RetryPolicy",
    "FaultKind",
    "Classifier",
    "AUTH_STATUSES",
    "RETRY_STATUSES",
    "retry_after_seconds",
    "http_status_fault",
    "RetryOptions",
    "DEFAULT_TIMEOUT_S",
    "LOCAL_TIMEOUT_S",
    "call_with_retries",
    "timed_call_with_retries",
]

#: Default bound on one attempt to a remote provider, in seconds.
DEFAULT_TIMEOUT_S = 120.0
#: Default bound on one attempt to a local server: a 6,000-token prompt took 138 s on 2 cores (issue 18).
LOCAL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy for timeouts, HTTP 429 and 5xx.

    Attempt ``k`` (0-based) waits ``min(max_delay_s, initial_delay_s * 2**k)`` scaled by a random factor in
    ``[1 - jitter, 1]``; a ``Retry-After`` header from the server replaces that delay (capped at ``max_delay_s``).
    """

    max_retries: int = 4
    """Retries after the first attempt (0 disables retrying)."""
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    jitter: float = 0.5
    timeout_s: float | None = None
    """Bound on one whole attempt, however the answer's bytes trickle in (the SDK clients also hand it to the SDK,
    which applies it to each phase): a server that never answers costs about ``timeout_s * (max_retries + 1)`` per
    call. None: :data:`DEFAULT_TIMEOUT_S`, or :data:`LOCAL_TIMEOUT_S` for a local server."""
    retry_timeouts: bool | None = None
    """Whether an attempt that timed out is tried again. None: yes, except for a local server (it is still busy
    with the request, and another attempt would only queue behind it)."""

    def resolved(self, local: bool) -> RetryPolicy:
        """This policy with its defaults filled in for a remote (``local=False``) or a local server."""
        timeout = self.timeout_s if self.timeout_s is not None else (LOCAL_TIMEOUT_S if local else DEFAULT_TIMEOUT_S)
        retry = self.retry_timeouts if self.retry_timeouts is not None else not local
        return replace(self, timeout_s=timeout, retry_timeouts=retry)

    @property
    def attempt_timeout_s(self) -> float:
        """The bound on one attempt (the remote default when the policy was not :meth:`resolved`)."""
        return self.timeout_s if self.timeout_s is not None else DEFAULT_TIMEOUT_S

    def delay(self, attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        if retry_after_s is not None and retry_after_s >= 0:
            return min(self.max_delay_s, retry_after_s)
        base = min(self.max_delay_s, self.initial_delay_s * (2**attempt))
        r = (rng or random).random()
        return base * (1.0 - self.jitter * r)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



FaultKind = Literal["retry", "auth", "fatal", "unreachable", "timeout"]
T = TypeVar("T")
#: Maps an exception to ``("retry", seconds | None)``, ``("unreachable", None)``, ``("timeout", None)``,
#: ``("auth", None)`` or ``("fatal", None)``.
Classifier = Callable[[BaseException], tuple[FaultKind, float | None]]

#: HTTP statuses that refuse the credentials.
AUTH_STATUSES: frozenset[int] = frozenset({401, 403})
#: HTTP statuses worth another attempt besides every 5xx: request timeout, conflict, rate limit.
RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 429})


def _wait_s(value: str | None) -> float | None:
    """``value`` as a finite, non-negative number, else None."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _seconds_until(http_date: str) -> float | None:
    """Seconds from now until ``http_date`` (0.0 for a past date), or None when it is not a date."""
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC without a local zone (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asked the client to wait before the next attempt, or None if it asked nothing usable.

    ``retry-after-ms`` (milliseconds, sent by OpenAI and Anthropic) wins over ``retry-after``, which holds seconds or
    an HTTP date (a date in the past gives 0.0). A value that is neither a finite, non-negative number nor a date is
    ignored. ``headers`` should match names case-insensitively (``httpx.Headers`` does); a plain dict needs
    lower-case names.
    """
    if not headers:
        return None
    ms = _wait_s(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _wait_s(value)
    return seconds if seconds is not None else _seconds_until(value)


def http_status_fault(status: int, headers: Mapping[str, str] | None = None) -> tuple[FaultKind, float | None]:
    """The fault kind of an HTTP error answer, for :func:`call_with_retries`.

    401 and 403 are ``("auth", None)``; 408, 409, 429 and every status from 500 up are ``("retry", seconds)`` with
    the server's :func:`retry_after_seconds` (None: the policy's backoff); anything else is ``("fatal", None)``.
    """
    if status in AUTH_STATUSES:
        return "auth", None
    if status in RETRY_STATUSES or status >= 500:
        return "retry", retry_after_seconds(headers)
    return "fatal", None


def _short(text: str, limit: int = 240) -> str:
    """First line of ``text``, cut at a word boundary to at most ``limit`` characters."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


def call_with_retries(
    fn: Callable[[], T],
    classify: Classifier,
    policy: RetryPolicy,
    *,
    describe: str,
    key_variable: str = "",
    sleep: Callable[[float], None] = time.sleep,
    redact: Callable[[str], str] = lambda s: s,
    retry_unreachable: bool = True,
) -> tuple[T, int]:
    """Run ``fn`` under ``policy``; return its result and the number of attempts.

    ``classify`` maps an exception to ``("retry", retry_after_s)``, ``("unreachable", None)`` (no answer from the
    server: connection refused, DNS failure), ``("timeout", None)`` (no answer in time), ``("auth", None)`` or
    ``("fatal", None)``. Retry and unreachable faults are tried again under ``policy``, timeouts only when
    ``policy.retry_timeouts`` is not False. An auth fault raises :class:`BackendAuthError` naming
    ``key_variable``; spent retries raise :class:`BackendUnreachable` when no attempt reached the server, else
    :class:`BackendError`, as does a fatal fault. Messages go through ``redact`` so that a key never reaches an error
    text. ``retry_unreachable`` False: an unreachable fault (a refused connection, a host name that does not resolve;
    not a timeout) is a definite answer, raised at once as :class:`BackendUnreachable` (the client passes it while
    none of its attempts ever reached the server: a wrong URL at the first call is said at once, not after a minute of
    backoff).
    """
    attempt = 0
    answered = False
    while True:
        try:
            return fn(), attempt + 1
        except Exception as exc:  # classified below; unknown kinds are fatal for this call only
            kind, retry_after = classify(exc)
            answered = answered or kind not in ("unreachable", "timeout")
            reason = _short(redact(f"{type(exc).__name__}: {exc}"))
            if kind == "auth":
                hint = f"; set {key_variable} to a valid key" if key_variable else ""
                raise BackendAuthError(f"{describe} refused the credentials ({reason}){hint}") from None
            spent = (attempt >= policy.max_retries or (kind == "timeout" and policy.retry_timeouts is False)
                     or (kind == "unreachable" and not retry_unreachable))
            if kind == "fatal" or spent:
                n = attempt + 1
                definite = kind == "fatal" or (kind == "unreachable" and not retry_unreachable)
                tail = "" if definite else f" after {n} attempt{'s' if n > 1 else ''}"
                if not answered:
                    raise BackendUnreachable(f"{describe} could not be reached{tail}: {reason}") from None
                raise BackendError(f"{describe} failed{tail}: {reason}") from None
            sleep(policy.delay(attempt, retry_after))
            attempt += 1


class RetryOptions(TypedDict, total=False):
    """The keyword arguments of :func:`call_with_retries`, for the helpers that pass them on."""

    describe: Required[str]
    key_variable: str
    sleep: Callable[[float], None]
    redact: Callable[[str], str]
    retry_unreachable: bool


def timed_call_with_retries(
    fn: Callable[[], T], classify: Classifier, policy: RetryPolicy, *,
    clock: Callable[[], float] = time.perf_counter, **options: Unpack[RetryOptions]
) -> tuple[T, int, float]:
    """:func:`call_with_retries` (same arguments) plus the wall time of the whole call, read from ``clock``.

    Returns ``(result, attempts, latency_s)``; the latency counts every attempt and every wait between attempts,
    which is what a backend reports as ``Completion.latency_s``.
    """
    start = clock()
    result, attempts = call_with_retries(fn, classify, policy, **options)
    return result, attempts, clock() - start
