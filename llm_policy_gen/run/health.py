"""The health of a run's model calls, one object the driver asks (:class:`CallHealth`), built only for a run whose
backend has an LLM session: a mode without a backend, or a proposer that is not a model, has no calls to watch.

After each iteration it counts the iterations in a row without one answered call (``--unreachable-after`` of them
stop the run), and ends the run with an error naming the URL when the very first call of a run reached no server;
at the end of the iterations, a run whose calls all failed, or whose answers were all refused, ends with exit 1.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..backends import base_url_variable
from ..backends.factory import client_settings
from ..clients.keys import redact
from ..errors import BackendUnreachable, EndpointError, NoCallSucceeded, NoValidAnswer

if TYPE_CHECKING:
    from ..clients.session import Answer, LLMSession
    from ..config import TrainConfig
    from .counters import Counters

__all__ = ["CallHealth"]


class CallHealth:
    """The model calls' health of one run (see the module doc)."""

    def __init__(self, cfg: TrainConfig, backend: str, session: LLMSession) -> None:
        self.cfg, self.backend, self.session = cfg, backend, session
        self._ok = self._tried = 0

    def iteration_starts(self) -> None:
        self._ok, self._tried = self.session.calls_ok, self.session.calls_tried

    def iteration_ended(self, answers: list[Answer[Any]], counters: Counters) -> None:
        """Count an iteration without one answered call; the run's very first call that reached no server raises."""
        session = self.session
        tried, answered = session.calls_tried - self._tried, session.calls_ok - self._ok
        if tried and not answered:
            if session.calls_ok == 0 and any(a.unreachable for a in answers):
                raise self._endpoint_error(BackendUnreachable(next(a.errors[0] for a in answers if a.unreachable)))
            counters.unreachable_streak += 1
        elif answered:
            counters.unreachable_streak = 0

    def unreachable_after(self, counters: Counters) -> int | None:
        """``--unreachable-after`` when the run has gone that many iterations without one answered call, else None."""
        after = client_settings(self.cfg, self.backend).unreachable_after
        return after if counters.unreachable_streak >= after else None

    def _endpoint_error(self, exc: BaseException) -> Exception:
        """The run's first call reached no server: a user error when the URL is the user's own setting."""
        var = base_url_variable(self.backend)
        user_set = bool(client_settings(self.cfg, self.backend).base_url) or bool(os.environ.get(var, "").strip())
        msg = f"{redact(str(exc))}; no call of this run reached the server"
        if user_set:
            return EndpointError(f"{msg} (check --base-url / {var})")
        return BackendUnreachable(msg)

    def check_some_call_succeeded(self) -> None:
        """A run whose calls all failed ends with exit 1 and one line naming the first error and the URL, whatever
        ``--unreachable-after`` says: never "0 calls" and exit 0. So does a run whose calls were answered but whose
        answers were all refused (a server answering ``content: null``): never "iterations done" and exit 0."""
        session = self.session
        if not session.calls_ok and session.usage.failed_calls:
            error = session.first_error or "no error recorded"
            url = str(session.client.describe().get("base_url") or "")
            where = f" ({url})" if url and url not in error else ""
            n = session.usage.failed_calls
            raise NoCallSucceeded(f"no call of this run succeeded ({n} failed call{'s' if n != 1 else ''}); the "
                                  f"first error{where}: {error}")
        if session.calls_ok and not session.answers_valid:
            n = session.calls_ok
            raise NoValidAnswer(f"no answer of this run was valid ({n} answered call{'s' if n != 1 else ''}, 0 "
                                f"valid answers); the first answer was refused because: "
                                f"{session.first_invalid or 'unknown'}")
