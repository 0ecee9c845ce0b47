"""One writer at a time per run directory and per comparison folder, and writes a Ctrl-C cannot cut in two.

A :class:`FolderLock` holds an operating-system lock on ``FOLDER/.lock`` (the ``filelock`` library: ``flock`` on
Unix, ``LockFileEx`` on Windows) for as long as a ``train``, a ``train --resume`` or a ``compare`` writes the folder.
Once it holds the lock it writes a small note, ``FOLDER/.lock.holder.json``, with its pid, host, command line (secrets
redacted) and start time. A second process that wants the folder gets the lock refused at once and raises
:class:`FolderBusy` (a user error: one line naming the holder, exit 2) -- it never waits and never writes.

The kernel releases the lock of a process that ends in any way, ``kill -9`` included, so a lock left by a killed
process never blocks: its note is only a leftover, overwritten by the next holder.

:class:`HeldInterrupts` holds a Ctrl-C (SIGINT) back while a group of writes that must go together is done -- an
iteration's record and its checkpoint, a run's closing files -- so that the files always agree on the iterations a
run finished; the interrupt then takes effect as soon as the group is written.

:func:`stops_as_interrupts` makes SIGTERM and SIGHUP (what Slurm, systemd and a closed ssh connection send) raise
:class:`~llm_policy_gen.errors.Interrupted`, a ``KeyboardInterrupt``: the command line handles them as Ctrl-C (the
summary written, the lock and its note released, the resume command printed; exit 143 and 129), and
:class:`HeldInterrupts` holds them back the same way.

:func:`sweep_worker` does the same in the worker processes of ``compare --workers N``, once per process: a stop sent
to the process group and passed on by the sweep interrupts the worker's run once, and a stopped worker starts no other
run (:func:`worker_run`); :func:`sweep_helper` keeps the sweep's limits manager alive until the sweep ends.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import Interrupted, UserError
from .safe_json import loads as safe_loads

__all__ = ["FolderLock", "FolderBusy", "HeldInterrupts", "LOCK_FILE", "HOLDER_FILE", "LOCK_FILES", "die_with_parent",
           "stops_as_interrupts", "STOP_SIGNALS", "sweep_worker", "worker_run", "sweep_helper"]

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.holder.json"
"""The holder's note beside the lock: who holds the folder (written and read here only)."""
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

    def __init__(self, folder: Path, what: str, program: str = "llm-policy-gen") -> None:
        from filelock import FileLock

        self.folder = Path(folder)
        self.what = what
        self.program = program
        """The name the holder's note gives the command (its first word), not the path it was started by."""
        self._lock = FileLock(str(self.folder / LOCK_FILE), timeout=0)

    @property
    def note_path(self) -> Path:
        return self.folder / HOLDER_FILE

    def acquire(self) -> FolderLock:
        from filelock import Timeout

        for name in LOCK_FILES:  # never open, write or replace through a link someone planted there
            if (self.folder / name).is_symlink():
                raise UserError(f"{self.folder / name} is a symbolic link; {self.what} {self.folder} is refused "
                                "(remove the link if you trust the folder)")
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
            note = safe_loads(self.note_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            note = None
        return _holder_text(note)

    def _write_note(self) -> None:
        from .runlog import write_json_atomic
        from .secrets import redact

        write_json_atomic(self.note_path, {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": redact(shlex.join([self.program if i == 0 else a for i, a in enumerate(sys.argv)])),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        })

    def moved_to(self, folder: Path) -> None:
        """The locked folder was renamed to ``folder`` (a new run put in place): the lock, held on the lock file
        itself, moves with it; its note is found there from now on."""
        self.folder = Path(folder)

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


STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP")
                                                  if hasattr(signal, n))
"""The signals handled as Ctrl-C is (SIGHUP does not exist on Windows)."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _arm_stops() -> dict[int, Any]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` in this (main) thread; returns the handlers replaced. A signal
    ignored on purpose (``nohup``) stays ignored, and a handler someone else installed stays."""
    replaced: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_DFL:
                replaced[sig] = signal.signal(sig, _raise_stop)
    return replaced


@contextmanager
def stops_as_interrupts() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise :class:`~llm_policy_gen.errors.Interrupted` (a
    ``KeyboardInterrupt``) as Ctrl-C raises ``KeyboardInterrupt``; the handlers before are put back after it."""
    replaced = _arm_stops()
    try:
        yield
    finally:
        for sig, previous in replaced.items():
            signal.signal(sig, previous)


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


class HeldInterrupts:
    """A context manager: a Ctrl-C (SIGINT), or a SIGTERM or SIGHUP made an interrupt by
    :func:`stops_as_interrupts`, that comes inside the block is held back and raised (``KeyboardInterrupt``, or
    :class:`~llm_policy_gen.errors.Interrupted`) when the block is done (unless the block itself raised). Outside the
    main thread, or where the signal is not Python's (or this package's) to handle, it does nothing.

    ``pending`` says whether an interrupt came (``signum``: the first one's signal); :meth:`allowed` lets one through
    at once inside the block (for work the user must be able to cut short, such as model calls), and ``cut`` says
    whether one cut that work short.
    """

    def __init__(self, raise_after: bool = True) -> None:
        self.raise_after = raise_after
        self.pending = False
        self.signum = int(signal.SIGINT)
        self.cut = False
        self._previous: dict[int, Any] = {}

    def _hold(self, signum: int, frame: Any) -> None:
        if not self.pending:
            self.signum = signum
        self.pending = True
        if self._previous.get(signum) is _worker_stop and _WORKER.stopped is None:
            _WORKER.stopped = signum  # a sweep worker's stop, held: the same stop sent again is not a second one

    @property
    def _installed(self) -> bool:
        return bool(self._previous)

    def _set(self, handler: Any | None) -> None:
        """Every held signal to ``handler`` (None: back to the handler before the block)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if handler is None else handler)

    def __enter__(self) -> HeldInterrupts:
        if threading.current_thread() is threading.main_thread():
            ours = {int(signal.SIGINT): signal.default_int_handler, **{int(s): _raise_stop for s in STOP_SIGNALS}}
            for sig, handler in ours.items():
                previous = signal.getsignal(sig)
                if previous in (handler, _worker_stop):  # Python's Ctrl-C, a stop made an interrupt; others stay
                    self._previous[sig] = previous
            self._set(self._hold)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._installed:
            self._set(None)
            self._previous = {}
        if self.pending and self.raise_after and exc_type is None:
            raise _interrupt(self.signum)

    @contextmanager
    def allowed(self) -> Iterator[None]:
        """Inside the block, an interrupt interrupts at once (one already held is raised on entry); it is noted in
        ``pending``, and the hold resumes after the block."""
        if not self._installed:
            yield
            return
        self._set(None)
        try:
            if self.pending:
                raise _interrupt(self.signum)
            yield
        except KeyboardInterrupt as exc:
            if not self.pending:
                self.signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
            self.pending = self.cut = True
            raise
        finally:
            self._set(self._hold)


class _WorkerStops:
    """A sweep worker's stop (:func:`sweep_worker`): the first stop signal it got, and whether a run is going."""

    stopped: int | None = None
    running: bool = False


_WORKER = _WorkerStops()


def _worker_stop(signum: int, frame: Any) -> None:
    if _WORKER.stopped is not None:  # the same stop again: sent to the process group and passed on by the sweep
        return
    _WORKER.stopped = signum
    if _WORKER.running:
        raise _interrupt(signum)


def sweep_worker(parent: int) -> None:
    """The initializer of a sweep's worker processes (``compare --workers N``): the process ends with ``parent``
    (:func:`die_with_parent`), and Ctrl-C, SIGTERM and SIGHUP (a signal ignored on purpose stays ignored) stop it as
    they stop ``train``, once: the run in progress is interrupted as Ctrl-C interrupts it (its summary says
    ``interrupted``, its lock is released), the same signal sent again (to the process group and passed on by the
    sweep) is not a second interrupt, and a worker that was stopped starts no other run (:func:`worker_run`)."""
    die_with_parent(parent)
    for sig in (signal.SIGINT, *STOP_SIGNALS):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _worker_stop)


@contextmanager
def worker_run() -> Iterator[bool]:
    """A run of a sweep worker (:func:`sweep_worker`): yields whether it may start (False once a stop came); a stop
    that comes inside the block interrupts it (a ``KeyboardInterrupt``)."""
    _WORKER.running = True
    try:
        yield _WORKER.stopped is None
    finally:
        _WORKER.running = False


def sweep_helper(parent: int) -> None:
    """The initializer of a sweep's helper process (the limits' manager): it ends with ``parent``
    (:func:`die_with_parent`) and outlives the stops sent to the process group (Python's manager already ignores
    Ctrl-C), so that the workers' runs it serves end as interrupted, not failed."""
    die_with_parent(parent)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def die_with_parent(parent: int) -> None:
    """The initializer of a sweep's helper processes (the pool's workers, the limits' manager): this process ends
    when ``parent`` does, however it ends (``kill -9`` included), so that no worker goes on writing run directories
    that a re-run then resumes. On Linux the kernel sends SIGKILL (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon
    thread watches the parent's pid and ends the process when it changes."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            set_pdeathsig = 1  # PR_SET_PDEATHSIG, <linux/prctl.h>
            armed = libc.prctl(set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
        if armed:
            if os.getppid() != parent:  # the parent ended before the signal was armed
                os._exit(1)
            return
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _watch_parent(parent: int, every_s: float = 0.5) -> None:
    """End this process once its parent is no longer ``parent`` (it ended and this one was re-parented)."""
    import time

    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)
