"""The ``--lm-cache`` folder, never trusted: every array checked, the converted weights verified, one writer at a time.

The cache (default ``~/.cache/llm-policy-gen/lm``, one folder per model: ``<model sha256>/``) only saves time. A disk
that fills, a process killed in the middle of a write or a hand that edits a file may damage it; nothing read from
it is used unchecked, and nothing about it fails a run:

* **Arrays** (an encoding, a state's scores: :class:`ArrayCache`) are read without pickle and used only when their
  dtype and shape are the ones a new computation gives and every value is finite. A damaged file is removed, its
  value computed again and written again (atomically); the run says so in one note line per folder.
* **The converted weights** ``<sha256>/weights/`` (a GGUF file's dequantised safetensors copy) carry a manifest,
  ``identity.json``, written last: the source file's sha256 and every file's own sha256. A folder whose manifest is
  missing, names another source or lists other files or digests, or whose files do not load, is converted again
  from the GGUF file (:func:`weights_problem`; one note line).
* **A write that fails**, for any reason (a full disk, a read-only folder, a short write inside the safetensors
  writer), is one note line: the run goes on without the cache (an :class:`ArrayCache` stops writing for the run).
* **One writer per model folder.** The weights and the output layer are written only by the process that holds
  ``<sha256>/writer.lock`` (:func:`model_folder_lock`: an operating-system lock, which the kernel releases when its
  holder ends in any way, ``kill -9`` included). Holding it, a process first removes what a killed writer left there
  (``weights.tmp-<pid>``, ``output.safetensors.tmp-<pid>``: up to the model's size); a process that finds the lock
  held neither writes nor removes anything, so a live writer's temporary files are never touched.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..storage.model_file import file_sha256
from ..storage.runlog import write_bytes_atomic, write_json_atomic
from ..storage.safe_json import loads as safe_loads

__all__ = ["Note", "unheard", "ArrayCache", "array_problem", "model_folder_lock", "FolderWriter", "weights_problem",
           "write_weights", "remove_entry", "damaged_note", "unwritable_note", "first_line", "MANIFEST", "LOCK",
           "WEIGHTS_FILE"]

Note = Callable[[str], None]
"""Where a cache's note lines go (the run's console)."""

MANIFEST = "identity.json"
"""Written last into a weights folder: the source's identity and every file's sha256."""
WEIGHTS_FILE = "model.safetensors"
LOCK = "writer.lock"
"""``<sha256>/writer.lock``: held by the one process that writes the model's folder."""

_NPY_HEADER = 1 << 16
"""More than any ``.npy`` header takes (numpy pads it to 64 bytes; one of ``np.save``'s stays well under 1 KiB)."""
_LEFTOVER = re.compile(r"(?:weights|output\.safetensors)\.tmp-[0-9]+")
"""The temporary names of the weights' and the output layer's writers (the writer's pid after ``tmp-``)."""


def unheard(text: str) -> None:
    """A note nobody reads: the default where a caller (a test, a bench script) passes no console."""


def first_line(exc: BaseException) -> str:
    """An exception as one short line (its type when it says nothing)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def damaged_note(what: str, where: Path, problem: str, then: str = "computed again and replaced") -> str:
    return f"note: the lm cache's {what} {where} was damaged ({problem}); {then}"


def unwritable_note(where: Path, exc: BaseException) -> str:
    return (f"note: cannot write the lm cache {where} ({first_line(exc)}); this run goes on without it "
            "(a later run computes what is missing again)")


def remove_entry(path: Path) -> None:
    """Remove a file, a link or a folder at ``path`` (a damaged cache entry); what cannot be removed stays."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------ arrays
def array_problem(value: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> str | None:
    """What is wrong with ``value`` read from the cache (None: an array of ``dtype`` and ``shape``, all finite)."""
    if not isinstance(value, np.ndarray):
        return f"not an array but {type(value).__name__}"
    if value.dtype != dtype:
        return f"dtype {value.dtype}, not {dtype}"
    if value.shape != shape:
        return f"shape {value.shape}, not {shape}"
    if not np.isfinite(value).all():
        return "NaN or infinite values"
    return None


class ArrayCache:
    """``.npy`` files in ``folder``, one per key (named by the key's sha256), each a ``dtype`` array; ``what`` names
    them in notes. ``folder`` None: no disk cache (every read misses, writes do nothing)."""

    def __init__(self, folder: Path | None, what: str, dtype: np.dtype[Any], note: Note = unheard) -> None:
        self.folder = folder
        self.what = what
        self.dtype = dtype
        self.note = note
        self.damaged = 0
        """Entries found damaged (and removed) by this cache."""
        self.writing = folder is not None
        """False after a write failed: the rest of the run does without the disk cache."""

    def path(self, key: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()}.npy"

    def read(self, key: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The kept array of ``key``, or None when there is none or it was damaged (then it is removed, and the
        first damaged entry of this cache is a note line)."""
        path = self.path(key)
        if path is None or not os.path.lexists(path):
            return None
        most = int(np.prod(shape)) * self.dtype.itemsize + _NPY_HEADER
        try:
            if path.stat().st_size > most:  # never read a huge file into memory
                raise ValueError(f"{path.stat().st_size:,} bytes, more than an array of shape {shape} takes")
            value: Any = np.load(path, allow_pickle=False)
        except Exception as exc:  # numpy raises ValueError, EOFError, OSError, ... for a bad file
            problem: str | None = f"unreadable: {first_line(exc)}"
        else:
            problem = array_problem(value, self.dtype, shape)
        if problem is None:
            return np.asarray(value)
        self.damaged += 1
        if self.damaged == 1:
            self.note(damaged_note(self.what, path, problem, "computed again and replaced (and any other damaged "
                                   "one of this folder)"))
        remove_entry(path)
        return None

    def write(self, key: str, value: np.ndarray) -> None:
        """Keep ``value`` for ``key`` (atomically); a write that fails is a note line and the last one tried."""
        path = self.path(key)
        if path is None or not self.writing:
            return
        buf = io.BytesIO()
        np.save(buf, np.asarray(value, dtype=self.dtype), allow_pickle=False)
        try:
            write_bytes_atomic(path, buf.getvalue())
        except Exception as exc:  # a full or read-only cache costs time later, never this run
            self.writing = False
            self.note(unwritable_note(path.parent, exc))


# ------------------------------------------------------------------------------------------------ one writer
@dataclass
class FolderWriter:
    """What :func:`model_folder_lock` got: ``held``, the lock (this process may write the folder); else ``problem``,
    why the folder could not be locked (None: another process holds the lock and writes it)."""

    held: bool
    problem: BaseException | None = None

    def cannot(self, note: Note, where: Path) -> None:
        """The note of a write this process cannot make (none when another process makes it)."""
        if self.problem is not None:
            note(unwritable_note(where, self.problem))


def _acquire(root: Path) -> tuple[Any, BaseException | None]:
    """(``root``'s lock held by this process, None), or (None, why not: None when another process holds it)."""
    from filelock import FileLock, Timeout

    try:
        root.mkdir(parents=True, exist_ok=True)
        if (root / LOCK).is_symlink():  # never open a lock through a link someone planted
            return None, OSError(f"{root / LOCK} is a symbolic link")
        lock = FileLock(str(root / LOCK), timeout=0)
        lock.acquire(timeout=0)
    except Timeout:
        return None, None
    except Exception as exc:  # a read-only, full or missing cache: the run goes on without writing it
        return None, exc
    return lock, None


def _remove_leftovers(root: Path) -> None:
    """The temporary weights and output layers under ``root`` of writers that are gone (the caller holds the lock
    every writer holds while it writes, so none of them is being written)."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if _LEFTOVER.fullmatch(entry.name):
            remove_entry(entry)


@contextmanager
def model_folder_lock(root: Path) -> Iterator[FolderWriter]:
    """Inside the block, ``held`` when this process holds ``root``'s lock (the folder's leftovers removed: see the
    module doc) and may write the folder; not when another process does, or the folder cannot be locked."""
    lock, problem = _acquire(root)
    try:
        if lock is not None:
            _remove_leftovers(root)
        yield FolderWriter(lock is not None, problem)
    finally:
        if lock is not None:
            lock.release()


# ------------------------------------------------------------------------------------------------ the weights
def _files(folder: Path) -> dict[str, Path]:
    """Every file and link under ``folder`` (folders walked) but the manifest, by its relative path."""
    out = {}
    for top, dirs, files in os.walk(folder):  # links to folders are not followed: they are entries
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
            p = Path(top, name)
            rel = p.relative_to(folder).as_posix()
            if rel != MANIFEST:
                out[rel] = p
    return out


def weights_problem(folder: Path, source_sha256: str) -> str | None:
    """None when ``folder`` is a whole copy converted from the model of sha256 ``source_sha256``, every file as its
    manifest lists it; else what is wrong."""
    try:
        manifest = safe_loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"no readable {MANIFEST}: {first_line(exc)}"
    if not isinstance(manifest, dict) or manifest.get("sha256") != source_sha256:
        return f"its {MANIFEST} names another model"
    listed = manifest.get("files")
    if not isinstance(listed, dict) or WEIGHTS_FILE not in listed:
        return f"its {MANIFEST} lists no digests (an older copy)"
    try:
        present = _files(folder)
        if set(present) != set(listed):
            return f"its files are not the ones its {MANIFEST} lists"
        for name, p in sorted(present.items()):
            if p.is_symlink() or not p.is_file() or file_sha256(p) != listed[name]:
                return f"{name} is not the file converted"
    except OSError as exc:
        return first_line(exc)
    return None


def write_weights(folder: Path, record: dict[str, str], save: Callable[[Path], None]) -> None:
    """``save`` the converted model into a temporary folder beside ``folder``, add the manifest (``record`` and every
    file's sha256) and rename it into place, replacing what was there. The caller holds the lock of
    ``folder.parent`` (:func:`model_folder_lock`); any failure is raised, with no temporary folder left."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    remove_entry(tmp)
    tmp.mkdir(parents=True)
    try:
        save(tmp)
        files = {name: file_sha256(p) for name, p in sorted(_files(tmp).items())}
        write_json_atomic(tmp / MANIFEST, {**record, "files": files})
        remove_entry(folder)
        os.replace(tmp, folder)
    finally:
        remove_entry(tmp)
