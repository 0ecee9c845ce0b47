"""Atomic writes, JSON and JSONL readers, and the logger that fans each iteration's record out to writers.

JSON files are written to a temporary file in the same folder, flushed, fsynced and renamed over the target, so a
run killed at any moment leaves either the old or the new file, never half a file; the file gets the permissions the
umask gives any new file (not the temporary file's 0600). JSONL files grow by one complete line per ``os.write`` on a
descriptor opened with ``O_APPEND``; a write that fails part-way (a full disk) is cut back, so a line is never half
there. Which files a run directory holds, and their readers, are :mod:`llm_policy_gen.run.files`'s.

:class:`Logger` is the one place an iteration's record goes; its :class:`KVWriter` s write it out (the events file,
the console, and the optional CSV and TensorBoard writers), in the manner of Stable-Baselines3's logger.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import JSONBounds, UserError
from .safe_json import loads as safe_loads

__all__ = ["write_json_atomic", "write_bytes_atomic", "unfinished_writes", "append_jsonl", "appends_undone_on_error",
           "cut_back", "read_jsonl", "read_json", "read_json_object",
           "run_id_problem",
           "check_fields", "CHECKS", "Check", "TRANSCRIPT_FIELDS",
           "rewrite_jsonl", "to_jsonable", "slug", "KVWriter", "JsonlWriter", "Logger", "current_umask"]


def current_umask() -> int:
    """The process's umask now: read without changing it from ``/proc/self/status`` on Linux; elsewhere by setting
    it and putting it back at once (the only portable way), which a thread creating a file at that moment could see.
    Nothing of this happens at import."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``path`` as its file (a failed ``write`` or ``fsync`` names none, or a temporary file): the
    message then says which file of the run could not be written."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` atomically (see the module docstring); a failed write raises an ``OSError`` naming
    ``path``, and leaves the old file and no temporary one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # what ``open`` would give a new file, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            raise _naming(exc, path) from exc
        raise


_TEMPORARY = re.compile(r"\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp")
"""The name :func:`write_bytes_atomic` gives its temporary file (``tempfile.mkstemp``'s eight random characters
between the target's name and ``.tmp``)."""


def unfinished_writes(folder: Path, targets: Callable[[str], bool]) -> list[Path]:
    """The temporary files of :func:`write_bytes_atomic` left in ``folder`` by a process killed (SIGKILL, a lost
    machine) between making one and renaming it over its target, for the targets whose name ``targets`` accepts;
    the target itself is whole (the old file). Only the folder's owner, holding its lock, may delete them."""
    try:
        entries = sorted(Path(folder).iterdir())
    except OSError:
        return []
    out = []
    for p in entries:
        m = _TEMPORARY.fullmatch(p.name)
        if m and targets(m["target"]) and p.is_file() and not p.is_symlink():
            out.append(p)
    return out


def write_json_atomic(path: Path, obj: Any, indent: int | None = 2) -> None:
    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False) + "\n"
    write_bytes_atomic(Path(path), text.encode("utf-8"))


def append_jsonl(path: Path, obj: Any) -> None:
    """Append ``obj`` as one line in one write; a write that fails or falls short is cut back and raises."""
    line = (json.dumps(to_jsonable(obj), allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            n = os.write(fd, line)
            if n != len(line):
                raise OSError(28, f"No space left on device (wrote {n} of {len(line)} bytes)", str(path))
        except OSError as exc:
            os.ftruncate(fd, size)
            raise (exc if exc.filename else _naming(exc, path)) from None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _naming(exc, path) from None
    finally:
        os.close(fd)


def cut_back(path: Path, size: int | None) -> None:
    """``path`` cut back to ``size`` bytes (None: removed), never lengthened (with zeros) when something cut it
    shorter first; needs no room on the disk, and a failure is left unsaid (the caller is already failing)."""
    try:
        if size is None:
            path.unlink(missing_ok=True)
        elif path.stat().st_size > size:
            os.truncate(path, size)
    except OSError:
        pass


@contextmanager
def appends_undone_on_error(*paths: Path, done: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """The JSONL files ``paths`` cut back to their size before the block when the block raises before ``done()``
    holds (a file the block made is removed): a group of writes that must go together -- an iteration's record and
    its checkpoint -- leaves all of its lines or none. Cutting a file back needs no room on the disk."""
    sizes = {Path(p): (Path(p).stat().st_size if Path(p).exists() else None) for p in paths}
    try:
        yield
    except BaseException:
        if done():  # the group was written whole; what failed came after it
            raise
        for p, size in sizes.items():
            cut_back(p, size)
        raise


def rewrite_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Replace a JSONL file with ``rows`` atomically (a resume drops the lines of an unfinished iteration)."""
    text = "".join(json.dumps(to_jsonable(r), allow_nan=False, separators=(",", ":")) + "\n" for r in rows)
    write_bytes_atomic(Path(path), text.encode("utf-8"))


def read_jsonl(path: Path, on_torn: Callable[[str], None] | None = None,
               ints: Sequence[str] = ("iteration",)) -> list[dict[str, Any]]:
    """The lines of a JSONL file, each a JSON object.

    A last line without its newline is what a process killed in the middle of a write leaves: it is dropped, and
    ``on_torn`` (when given) gets one line saying so. Any other line that is not UTF-8, not JSON, nested too deeply,
    not a JSON object, or whose ``ints`` fields are not integers is a :class:`UserError` naming the file and the line.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with its newline
    if tail.strip() and on_torn is not None:
        on_torn(f"{path}: its last line was cut ({len(tail)} bytes without a newline, as a process killed in the "
                f"middle of a write leaves); it is dropped")
    out = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        value = _json_line(path, number, raw)
        bad = next((k for k in ints if k in value and (type(value[k]) is not int)), None)
        if bad is not None:
            raise UserError(f"{path} line {number}: {bad} {str(value[bad])[:40]!r} is not an integer")
        out.append(value)
    return out


def _json_line(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    where = f"{path} line {number}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") \
            from None
    try:
        value = safe_loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    except JSONBounds as exc:
        raise UserError(f"{where} cannot be read as JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UserError(f"{where} is not a JSON object (it holds a {type(value).__name__})")
    return value


def read_json_object(path: Path, *, lenient: bool = False) -> dict[str, Any] | None:
    """The JSON object a run or comparison file holds, or None when the file is missing or holds no object. A file
    that cannot be read as JSON is a :class:`UserError` naming it (:func:`read_json`), or None when ``lenient`` (a
    scan over folders that may hold anything)."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        data = read_json(p)
    except UserError:
        if lenient:
            return None
        raise
    return data if isinstance(data, dict) else None


MAX_JSON_BYTES = 256 << 20
"""Largest JSON file :func:`read_json` reads (a policy file of a million states is about 10 MB)."""


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file's value; a file that is missing, unreadable, not UTF-8, not JSON, larger than ``max_bytes``,
    nested too deeply or holding a number of too many digits (:mod:`~llm_policy_gen.storage.safe_json`) is a
    :class:`UserError` whose one line names it."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise UserError(f"{p} is larger than {max_bytes:,} bytes, more than any file this package writes")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{p} does not exist") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{p} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        return safe_loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{p} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except JSONBounds as exc:
        raise UserError(f"{p} cannot be read as JSON: {exc}") from None


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot name a run directory (None when it can): empty, a path separator, a name made only of
    dots, or a control or format character (a newline would spoof console lines)."""
    if not run_id.strip():
        return "it is empty"
    if "/" in run_id or "\\" in run_id:
        return "it holds a path separator"
    if not run_id.strip("."):
        return "it is made only of dots"
    bad = next((c for c in run_id if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        return f"it holds the control character U+{ord(bad):04X}"
    return None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


Check = tuple[str, Callable[[Any], bool]]
"""What a field must be (said in messages) and the test of a value that is not null."""

CHECKS: dict[str, Check] = {
    "number": ("a number", _is_number),
    "int": ("an integer", _is_int),
    "bool": ("true or false", lambda x: isinstance(x, bool)),
    "str": ("a string", lambda x: isinstance(x, str)),
    "numbers": ("a list of numbers", lambda x: isinstance(x, list) and all(v is None or _is_number(v) for v in x)),
    "list": ("a list", lambda x: isinstance(x, list)),
    "object": ("an object", lambda x: isinstance(x, dict)),
}
"""The checks of a record's fields by kind (:data:`TRANSCRIPT_FIELDS`, and the event fields
:mod:`~llm_policy_gen.run.schema` derives from its typed records)."""

TRANSCRIPT_FIELDS: dict[str, Check] = {
    **dict.fromkeys(("candidate", "attempt", "state", "input_tokens", "output_tokens", "cached_input_tokens"),
                    CHECKS["int"]),
    **dict.fromkeys(("cost_usd", "latency_s"), CHECKS["number"]),
    "errors": CHECKS["list"],
    "messages": ("a list of {role, content} objects", lambda x: isinstance(x, list) and all(map(_is_message, x))),
    "response_text": CHECKS["str"],
}
"""The fields of a ``transcripts.jsonl`` line that are computed with (what a resume reuses and a report shows), and
the type each must have when not null."""


def check_fields(rows: Sequence[Mapping[str, Any]], path: Path, types: Mapping[str, Check]) -> None:
    """Refuse, in one line naming the file, the line and the field, a row (line ``k + 1`` of ``path``) whose
    ``types`` fields have the wrong type: the file was changed by hand or by another program."""
    for number, row in enumerate(rows, 1):
        for key, (what, ok) in types.items():
            value = row.get(key)
            if value is not None and not ok(value):
                raise UserError(f"{path} line {number}: {key} is {json.dumps(value)[:60]}, not {what}; the file was "
                                "changed by hand or by another program")


def slug(text: str) -> str:
    """``text`` as a safe file name: runs of other characters than letters, digits, ``_.-`` become ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


class KVWriter(Protocol):
    """Writes one iteration's record somewhere."""

    def write(self, record: dict[str, Any]) -> None:
        ...

    def close(self) -> None:
        ...


class JsonlWriter:
    """One line per record in a JSONL file (``events.jsonl``), its keys renamed by ``keys`` (the file's names)."""

    def __init__(self, path: Path, keys: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.path = Path(path)
        self.keys = keys

    def write(self, record: dict[str, Any]) -> None:
        append_jsonl(self.path, self.keys(record) if self.keys is not None else record)

    def close(self) -> None:
        return None


class Logger:
    """Fans each record out to its writers, in order (the JSONL file first: it is the record of the run)."""

    def __init__(self, writers: Sequence[KVWriter]) -> None:
        self.writers = list(writers)

    def write(self, record: dict[str, Any]) -> None:
        for w in self.writers:
            w.write(record)

    def close(self) -> None:
        for w in self.writers:
            w.close()
