"""Model files on disk: the GGUF magic number and a file's sha256, for every part that reads a local model.

The in-process LLM client (:mod:`llm_policy_gen.clients.llamacpp`) and the language model as the policy network
(:mod:`llm_policy_gen.lm.backbone`) both check that a file is GGUF before handing it to a loader, and both name a
model by the sha256 of its bytes; each keeps its own error lines (what the user gave differs: ``--backend`` or
``--lm-model``).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

__all__ = ["GGUF_MAGIC", "is_gguf", "file_sha256"]

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
