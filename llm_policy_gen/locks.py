"""One writer at a time per run directory and per comparison folder.

A :class:`FolderLock` holds an operating-system lock on ``FOLDER/.lock`` (the ``filelock`` library: ``flock`` on
Unix, ``LockFileEx`` on Windows) for as long as a ``train``, a ``train --resume`` or a ``compare`` writes the folder.
Once it holds the lock it writes a small note, ``FOLDER/.lock.holder.json``, with its pid, host, command line (secrets
redacted) and start time. A second process that wants the folder gets the lock refused at once and raises
:class:`FolderBusy` (a user error: one line naming the holder, exit 2) -- it never waits and never writes.

The kernel releases the lock of a process that ends in any way, ``kill -9`` included, so a lock left by a killed
process never blocks: its note is only a leftover, overwritten by the next holder.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from .errors import UserError

__all__ = ["FolderLock", "FolderBusy", "LOCK_FILE", "HOLDER_FILE", "LOCK_FILES"]

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.holder.json"
LOCK_FILES = (LOCK_FILE, HOLDER_FILE)
"""Files of the lock in a folder (not part of a run: copies and listings leave them out)."""


class FolderBusy(UserError):
    """Another process holds the folder's lock."""


def _holder_text(note: Any) -> str:
    if not isinstance(note, dict):
        return "another process (it has not written its note yet)"
    pid, host, command = note.get("pid"), note.get("host"), note.get("command")
    since = f", since {note['since']}" if note.get("since") else ""
    return f"pid {pid} on {host} ({command}{since})"


class FolderLock:
    """The lock of ``folder`` for one writer (a context manager); ``what`` names the folder in messages.

    Raises:
        FolderBusy: On :meth:`acquire`, when another process holds it.
    """

    def __init__(self, folder: Path, what: str) -> None:
        from filelock import FileLock

        self.folder = Path(folder)
        self.what = what
        self._lock = FileLock(str(self.folder / LOCK_FILE), timeout=0)

    @property
    def note_path(self) -> Path:
        return self.folder / HOLDER_FILE

    def acquire(self) -> FolderLock:
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise FolderBusy(f"{self.what} {self.folder} is being written by {self.holder()}; one process writes it "
                             "at a time: wait for that one to end (or stop it), then run this again") from None
        try:
            self._write_note()
        except BaseException:
            self._lock.release()
            raise
        return self

    def holder(self) -> str:
        """Who holds the lock, as its note says."""
        try:
            note = json.loads(self.note_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            note = None
        return _holder_text(note)

    def _write_note(self) -> None:
        from .clients.keys import redact
        from .runlog import write_json_atomic

        write_json_atomic(self.note_path, {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": redact(shlex.join(["llm-policy-gen" if i == 0 else a for i, a in enumerate(sys.argv)])),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        })

    def release(self) -> None:
        """Remove the note and release the lock (the note first: whoever holds the lock next writes its own)."""
        if not self._lock.is_locked:
            return
        try:
            self.note_path.unlink(missing_ok=True)
        except OSError:
            pass
        self._lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
