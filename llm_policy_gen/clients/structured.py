"""Structured output: how a client asks for JSON, and its one-way fallback when the provider refuses the request.

When the provider refuses the structured-output request itself (HTTP 400 from the big providers; any 4xx or 5xx
whose body names the structured-output field from a local server, such as ``llama_cpp.server``'s 500;
:func:`structured_refusal`), :class:`StructuredOutput` steps once to the next mode of :data:`~.base.STRUCTURED_MODES`
the provider offers and the same call is sent again at once, without a retry. The mode sticks for the client's life
(``SDKClient.structured_mode``, settable so that a resumed run can restore it); the next successful completion
carries ``extra["structured_output_fallback"] = "<from> -> <to>: <reason>"`` so the session can say so once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..errors import BackendConfigError
from .base import STRUCTURED_MODES

__all__ = ["StructuredOutput", "schema_name", "structured_refusal"]

T = TypeVar("T")

#: Words of an error that refuses the structured-output request itself (a parameter or a schema feature).
_STRUCTURED_WORDS = re.compile(
    r"response_format|json_schema|json_object|output_config|output_format|response_?json_?schema|response_?schema"
    r"|response_?mime_?type|input_schema|tool_choice|\btools?\b|\bschema\b",
    re.IGNORECASE,
)


def structured_refusal(text: str | None, limit: int = 160) -> str | None:
    """The short reason of an error whose ``text`` refuses structured output, else None (the error is handled as its
    status says)."""
    if not text or _STRUCTURED_WORDS.search(text) is None:
        return None
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 4].rstrip() + " ..."


class StructuredOutput:
    """The structured-output mode of one client and its one-way fallback; safe to share between threads.

    Args:
        modes: The modes the provider offers, strongest first (a subset of :data:`~.base.STRUCTURED_MODES`).
    """

    def __init__(self, modes: Sequence[str]) -> None:
        self.modes = tuple(m for m in STRUCTURED_MODES if m in modes)
        if not self.modes:
            raise ValueError(f"no structured-output mode among {modes!r}")
        self._mode = self.modes[0]
        self._notes: list[str] = []
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        """The mode the next structured call uses."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in self.modes:
            raise BackendConfigError(f"structured-output mode {value!r} is not offered here; choose from {self.modes}")
        with self._lock:
            self._mode = value

    def send(self, attempt: Callable[[str], T], refusal: Callable[[BaseException], str | None]) -> T:
        """``attempt(mode)`` in the current mode; when ``refusal`` finds the provider refused that mode, step down and
        send again at once (each mode is tried at most once per call)."""
        tried: set[str] = set()
        while True:
            mode = self._mode
            tried.add(mode)
            try:
                return attempt(mode)
            except Exception as exc:
                reason = refusal(exc) if mode != "prompt" else None
                if reason is None or not self._step_past(mode, reason) or self._mode in tried:
                    raise

    def _step_past(self, refused: str, reason: str) -> bool:
        """Leave ``refused`` for the next mode (once, whichever thread sees the refusal first); False if none is
        left."""
        with self._lock:
            if self._mode != refused:  # another call already stepped down
                return True
            following = self.modes[self.modes.index(refused) + 1 :]
            if not following:
                return False
            self._mode = following[0]
            self._notes.append(f"{refused} -> {following[0]}: {reason}")
            return True

    def take_notes(self) -> str | None:
        """The fallbacks not reported yet (``"<from> -> <to>: <reason>"``, joined by ``"; "``), once."""
        with self._lock:
            notes, self._notes = self._notes, []
        return "; ".join(notes) or None


_NAME = re.compile(r"[^A-Za-z0-9_-]")


def schema_name(name: str) -> str:
    """``name`` as a schema or tool name the APIs accept (``[A-Za-z0-9_-]{1,64}``)."""
    return _NAME.sub("_", name)[:64] or "answer"
