"""Model files on disk: the GGUF magic number and a file's sha256, for every part that reads a local model.

The in-process LLM client (:mod:`llm_policy_gen.clients.llamacpp`) and the language model as the policy network
(:mod:`llm_policy_gen.lm.backbone`) both check that a file is GGUF before handing it to a loader, and both name a
model by the sha256 of its bytes; each keeps its own error lines (what the user gave differs: ``--backend`` or
``--lm-model``).

:func:`loading` is what both say while a model loads: a line before (the file and its size) and one after (the
seconds it took), since a load of a few hundred MB takes from seconds to minutes on a small machine, which must not
pass in silence.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["GGUF_MAGIC", "is_gguf", "file_sha256", "loading", "size_text"]

GGUF_MAGIC = b"GGUF"
"""The first four bytes of every GGUF file."""

_hash_lock = threading.Lock()
_hashes: dict[tuple[str, int, int, int, int, int], str] = {}


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the GGUF magic number; an unreadable file raises its ``OSError``."""
    with Path(path).open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def file_sha256(path: Path) -> str:
    """The file's sha256, computed once per process for a given path and file: its device, inode, size,
    modification time and change time (``ctime``, which no one can set back: a file rewritten or replaced in place
    with its size and ``mtime`` kept is hashed again, never taken for the one hashed before)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _hash_lock:
        if key in _hashes:
            return _hashes[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    with _hash_lock:
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def size_text(n_bytes: int) -> str:
    """``812 KB``, ``270 MB``, ``4.4 GB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{max(1, round(n_bytes / 1e3))} KB"


def _bytes(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


@contextmanager
def loading(say: Callable[[str], None] | None, who: str, path: Path, source: str = "") -> Iterator[None]:
    """Say ``who: loading NAME (SIZE)[ from SOURCE] ...`` before the body and ``who: loaded NAME in S s`` after it
    (nothing after a load that failed: its error says why). ``say`` None says nothing."""
    if say is None:
        yield
        return
    path = Path(path)
    try:
        size = f" ({size_text(_bytes(path))})"
    except OSError:
        size = ""
    say(f"{who}: loading {path.name}{size}{' from ' + source if source else ''} ...")
    t0 = time.perf_counter()
    yield
    say(f"{who}: loaded {path.name} in {time.perf_counter() - t0:.1f} s")
