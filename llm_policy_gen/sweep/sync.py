"""How a run directory on a Ray node reaches the driver's copy under ``--out``: changes, not copies.

A task runs in a scratch folder on its node. :class:`DirSync` says what changed there since the last look -- the
checkpoint first, then new lines of the JSONL files, new, rewritten and deleted files -- as :data:`Change` s, and
:func:`apply_changes` writes them into the driver's copy, which is therefore always resumable (the engine's resume
drops whatever is newer than the checkpoint). :func:`pack_dir` and :func:`unpack_dir` carry a whole run directory to
a new attempt; :func:`resume_point` says where that attempt carries on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from ..errors import UserError
from ..run.files import CHECKPOINT, RunDir
from ..storage.runlog import write_bytes_atomic

__all__ = ["CHECKPOINT", "Change", "DirSync", "pack_dir", "unpack_dir", "apply_changes", "resume_point"]

Change = tuple[str, str, int, bytes]
"""``(kind, path relative to the run directory, offset, data)``; kind is ``write``, ``append`` or ``delete``."""


def _files(root: Path) -> dict[str, os.stat_result]:
    """Files under ``root`` by relative path, without the temporary files of atomic writes (dot names)."""
    out: dict[str, os.stat_result] = {}
    if not root.is_dir():
        return out
    for p in root.rglob("*"):
        if p.name.startswith("."):
            continue
        try:
            st = p.stat()
        except OSError:  # replaced or removed while we looked
            continue
        if p.is_file():
            out[p.relative_to(root).as_posix()] = st
    return out


def _checkpoint_first(rel: str) -> tuple[bool, str]:
    return rel != CHECKPOINT, rel


class DirSync:
    """What changed in a directory since the last look, as :data:`Change` s the driver applies in order.

    The checkpoint comes first, so a copy that applies the changes in order never holds a checkpoint newer than its
    events, transcripts and policies (the engine's resume handles the other way round). A JSONL file that grew in
    place travels as its new bytes only.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._seen: dict[str, tuple[int, int, int]] = {}

    def mark(self) -> None:
        """Take the directory as it is now as already handed over."""
        self._seen = {rel: (st.st_ino, st.st_size, st.st_mtime_ns) for rel, st in _files(self.root).items()}

    def changes(self) -> list[Change]:
        now = _files(self.root)
        out: list[Change] = []
        for rel in sorted(now, key=_checkpoint_first):
            st = now[rel]
            old = self._seen.get(rel)
            if old == (st.st_ino, st.st_size, st.st_mtime_ns):
                continue
            path = self.root / rel
            grown = old is not None and rel.endswith(".jsonl") and old[0] == st.st_ino and st.st_size >= old[1]
            try:
                if grown:
                    assert old is not None
                    with open(path, "rb") as fh:
                        fh.seek(old[1])
                        data = fh.read()
                    change: Change = ("append", rel, old[1], data)
                    size = old[1] + len(data)
                else:
                    data = path.read_bytes()
                    change, size = ("write", rel, 0, data), len(data)
            except FileNotFoundError:
                continue
            self._seen[rel] = (st.st_ino, size, st.st_mtime_ns)
            out.append(change)
        for rel in sorted(set(self._seen) - set(now)):
            del self._seen[rel]
            out.append(("delete", rel, 0, b""))
        return out


def _inside(root: Path, rel: str) -> Path:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise ValueError(f"refusing a path outside the run directory: {rel!r}")
    return root.joinpath(*parts)


def pack_dir(root: Path) -> dict[str, bytes]:
    """Every file of ``root`` (a run directory) by relative path."""
    return {rel: (Path(root) / rel).read_bytes() for rel in sorted(_files(Path(root)))}


def unpack_dir(root: Path, files: Mapping[str, bytes]) -> None:
    for rel, data in files.items():
        write_bytes_atomic(_inside(Path(root), rel), data)


def apply_changes(root: Path, changes: Sequence[Change]) -> None:
    """Apply a task's changes to the driver's copy of its run directory."""
    for kind, rel, offset, data in changes:
        path = _inside(Path(root), rel)
        if kind == "delete":
            path.unlink(missing_ok=True)
        elif kind == "write":
            write_bytes_atomic(path, data)
        elif kind == "append":
            size = path.stat().st_size if path.exists() else 0
            if size < offset:
                raise RuntimeError(f"{path} has {size} bytes here but the task appended at byte {offset}")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "r+b" if path.exists() else "wb") as fh:
                fh.truncate(offset)
                fh.seek(offset)
                fh.write(data)
        else:
            raise ValueError(f"unknown change {kind!r} for {rel}")


def resume_point(run_dir: Path) -> tuple[int, float]:
    """(iteration of the run's checkpoint, cost of the recorded calls after it, which a resume counts again)."""
    from ..run.checkpoint import load_checkpoint

    rd = RunDir(run_dir)
    done = 0
    if rd.checkpoint.is_file():
        try:
            done = int(load_checkpoint(rd.checkpoint)["iteration"])
        except UserError:
            done = 0
    later = rd.load_transcripts()
    return done, sum(float(r.get("cost_usd") or 0.0) for r in later if int(r.get("iteration", 0)) > done)
