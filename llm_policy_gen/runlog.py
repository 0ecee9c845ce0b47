"""The run directory and atomic writes.

JSON files are written to a temporary file in the same folder, flushed, fsynced and renamed over the target, so a
run killed at any moment leaves either the old or the new file, never half a file. JSONL files grow by one complete
line per ``os.write`` on a descriptor opened with ``O_APPEND``; a line is never split across writes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .errors import UserError

__all__ = ["write_json_atomic", "write_bytes_atomic", "append_jsonl", "read_jsonl", "RunDir", "to_jsonable", "slug"]


def to_jsonable(x: Any) -> Any:
    """numpy scalars/arrays and paths to plain JSON types."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, Path):
        return str(x)
    return x


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path: Path, obj: Any, indent: int | None = 2) -> None:
    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False) + "\n"
    write_bytes_atomic(Path(path), text.encode("utf-8"))


def append_jsonl(path: Path, obj: Any) -> None:
    line = (json.dumps(to_jsonable(obj), allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(line)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Complete lines of a JSONL file (a trailing partial line, from a crash, is skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def slug(text: str) -> str:
    """``text`` as a safe file name: runs of other characters than letters, digits, ``_.-`` become ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


class RunDir:
    """``logs/<env-id>/<run-id>/`` and the files of the contract."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, logs_dir: Path, env_id: str, backend: str, seed: int, run_id: str | None = None) -> RunDir:
        base = Path(logs_dir) / slug(env_id)
        if run_id is None:
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            run_id = f"{stamp}_{slug(backend)}_s{seed}"
        path = base / run_id
        k = 1
        while path.exists():
            k += 1
            path = base / f"{run_id}-{k}"
        try:
            (path / "policies").mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"cannot create the run directory {path}: {exc.strerror}; choose --logs-dir") from None
        return cls(path)

    config = property(lambda self: self.path / "config.json")
    events = property(lambda self: self.path / "events.jsonl")
    transcripts = property(lambda self: self.path / "transcripts.jsonl")
    summary = property(lambda self: self.path / "summary.json")
    best_policy = property(lambda self: self.path / "best_policy.json")
    training_png = property(lambda self: self.path / "training.png")
    testing_png = property(lambda self: self.path / "testing.png")

    def policy_file(self, iteration: int) -> Path:
        return self.path / "policies" / f"iter_{iteration:04d}.json"
