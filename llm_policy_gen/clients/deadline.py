"""A whole-attempt deadline for the SDK clients.

The SDKs apply their timeout to each phase of an attempt (connect, write, each read), so a server that sends its
headers and then one byte a second is never timed out. :meth:`AttemptDeadline.run` runs each attempt on a worker
thread and the caller waits at most the attempt's timeout (and half a second) for it: past that the attempt is a
:class:`~.faults.DeadlinePassed`, and its connection is shut down (:meth:`AttemptDeadline.abandon`; each SDK's HTTP
client reports its answers' connections through :meth:`AttemptDeadline.event_hooks`), so the worker thread ends
with its next read.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .faults import DeadlinePassed

__all__ = ["AttemptDeadline", "DEADLINE_GRACE_S"]

T = TypeVar("T")

#: The whole-attempt deadline is the timeout plus this, so that an SDK's own timeout of one silent phase (which fires
#: at the timeout) is reported as what it is.
DEADLINE_GRACE_S = 0.5


class AttemptDeadline:
    """Runs attempts under a whole-attempt deadline and shuts down the connection of one that passes it; safe to
    share between threads (one per client)."""

    def __init__(self) -> None:
        self._connections: dict[int, Any] = {}
        """Attempt thread -> the connection its answer is coming on (:meth:`event_hooks`, :meth:`abandon`)."""

    def run(self, send: Callable[[], T], timeout: float) -> T:
        """``send()`` on a worker thread, waited for at most ``timeout`` (and :data:`DEADLINE_GRACE_S`) in all."""
        deadline = timeout + DEADLINE_GRACE_S
        outcome: list[Any] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append(("ok", send()))
            except BaseException as exc:  # handed to the caller as it is
                outcome.append(("error", exc))
            finally:
                self._connections.pop(threading.get_ident(), None)
                done.set()

        worker = threading.Thread(target=work, name="llm-attempt", daemon=True)
        worker.start()
        if not done.wait(deadline):
            self.abandon(worker)
            raise DeadlinePassed(f"no whole answer within {timeout:g} s (the attempt's deadline)")
        kind, value = outcome[0]
        if kind == "error":
            raise value
        return value

    def event_hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """``event_hooks`` for the SDK's HTTP client (httpx2 or httpx): once an answer's headers are in, its
        connection is kept by attempt thread, so that :meth:`abandon` can shut it down."""
        return {"response": [self._remember_connection]}

    def _remember_connection(self, response: Any) -> None:
        stream = response.extensions.get("network_stream")
        if stream is not None:
            self._connections[threading.get_ident()] = stream

    def abandon(self, worker: threading.Thread) -> None:
        """The attempt on ``worker`` passed its deadline: shut its connection down, so that the worker's next read
        fails at once and a trickling server stops sending. Before the headers there is nothing to shut (the SDK's
        per-read timeout ends that wait), nor for a client whose SDK does not install :meth:`event_hooks`."""
        stream = self._connections.pop(worker.ident or 0, None)
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass
