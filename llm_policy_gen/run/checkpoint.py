"""Checkpoints: a run's whole state after an iteration, in one file written atomically.

The state is a nested structure of dicts, lists, numbers, strings and numpy arrays (each component's
``state_dict()``). Arrays go into a ``.npz`` archive under generated names; everything else is JSON stored in the
same archive (``__state__``), with floats written exactly (``repr``) and NaN allowed. Nothing is pickled: loading a
checkpoint runs no code. The file is written to a temporary name and renamed, so a run killed at any moment leaves
the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import JSONBounds, UserError
from ..storage.runlog import MAX_JSON_BYTES, write_bytes_atomic
from ..storage.safe_json import loads
from ..storage.sizes import gib, memory_limit

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 1
_ARRAY = "__ndarray__"
_CHUNK = 16 * 2**20
"""An array's data is read in pieces of this size."""


def _encode(x: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(x, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = x
        return {_ARRAY: name}
    if isinstance(x, dict):
        return {str(k): _encode(v, arrays) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_encode(v, arrays) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return x


def _decode(x: Any, arrays: Any) -> Any:
    if isinstance(x, dict):
        if set(x) == {_ARRAY}:
            return np.asarray(arrays[x[_ARRAY]])
        return {k: _decode(v, arrays) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v, arrays) for v in x]
    return x


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically."""
    arrays: dict[str, np.ndarray] = {}
    meta = {"version": CHECKPOINT_VERSION, "state": _encode(state, arrays)}
    text = json.dumps(meta, allow_nan=True)
    buf = io.BytesIO()
    bad = [k for k, a in arrays.items() if a.dtype.hasobject]
    if bad:
        raise TypeError(f"checkpoint state holds an object array ({bad[0]}); give numbers, strings or plain lists")
    np.savez(buf, allow_pickle=False, __state__=np.frombuffer(text.encode("utf-8"), dtype=np.uint8), **arrays)
    write_bytes_atomic(Path(path), buf.getvalue())


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`; an unreadable file, or one over the bounds below, is a
    :class:`UserError`.

    A checkpoint may come from someone else, so its members are read within bounds: only ``__state__`` and the arrays
    the state names (any other member is refused, never loaded); each member's ``.npy`` header (shape and dtype) is
    read first, without the data, and must agree with the size the zip declares for the member; and the arrays
    declared must fit in the file (:func:`save_checkpoint` stores them uncompressed, so a member that would inflate
    past the file, as a 20 GiB array deflated to 21 MB would, is refused before anything is allocated) and in memory
    (:func:`llm_policy_gen.storage.sizes.memory_limit`)."""
    try:
        with zipfile.ZipFile(Path(path)) as zf:
            members = {i.filename: i for i in zf.infolist()}
            bound = min(Path(path).stat().st_size, memory_limit())
            text = _member(zf, members, "__state__", path, min(bound, MAX_JSON_BYTES))
            meta = loads(bytes(text).decode("utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("state"), dict):
                raise UserError(f"checkpoint {path} holds no state object; it was not written by llm-policy-gen")
            if meta.get("version") != CHECKPOINT_VERSION:
                raise UserError(f"checkpoint {path} has version {str(meta.get('version'))[:20]}, expected "
                                f"{CHECKPOINT_VERSION}")
            names = sorted(_named(meta["state"]))
            unexpected = sorted(set(members) - {f"{n}.npy" for n in ["__state__", *names]})
            if unexpected:
                raise UserError(f"checkpoint {path} holds a member its state does not name ({unexpected[0][:60]!r}); "
                                "it was not written by llm-policy-gen, and is not loaded")
            declared = sum(members[f"{n}.npy"].file_size for n in names if f"{n}.npy" in members)
            if declared > bound:
                raise UserError(f"checkpoint {path} declares {declared:,} bytes of arrays, more than "
                                + (f"the file holds ({bound:,} bytes; llm-policy-gen stores them uncompressed)"
                                   if bound < memory_limit() else f"the memory limit of {gib(bound)}")
                                + "; it is not loaded")
            arrays = {n: _member(zf, members, n, path, bound) for n in names}
        state = _decode(meta["state"], arrays)
    except JSONBounds as exc:
        raise UserError(f"cannot read checkpoint {path}: its state {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"cannot read checkpoint {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    return dict(state)


def _named(x: Any) -> set[str]:
    """The array names the encoded state refers to."""
    if isinstance(x, dict):
        if set(x) == {_ARRAY}:
            return {str(x[_ARRAY])}
        return set().union(*map(_named, x.values()))
    if isinstance(x, list):
        return set().union(*map(_named, x))
    return set()


def _member(zf: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], name: str, path: Path, bound: int) -> np.ndarray:
    """The array ``name`` of the archive, its ``.npy`` header read and checked (see :func:`load_checkpoint`) before
    its data: at most ``bound`` bytes, exactly what the zip declares for the member, no object dtype."""
    info = members.get(f"{name}.npy")
    if info is None:
        raise UserError(f"cannot read checkpoint {path}: it has no member {name!r}" + (
            "; it was not written by llm-policy-gen" if name == "__state__" else ", which its state names"))
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version not in ((1, 0), (2, 0)):
            raise UserError(f"checkpoint {path}: member {name!r} has .npy format {version}; accepted 1.0 or 2.0")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fh)
        header = fh.tell()
        if dtype.hasobject:
            raise UserError(f"checkpoint {path}: member {name!r} holds objects; a checkpoint holds numbers only")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > bound:
            raise UserError(f"checkpoint {path}: member {name!r} declares {nbytes:,} bytes ({shape}, {dtype}), over "
                            f"the bound of {bound:,}; it is not loaded")
        if info.file_size != header + nbytes:
            raise UserError(f"checkpoint {path}: member {name!r} declares {nbytes:,} bytes of data ({shape}, {dtype}) "
                            f"but the archive holds {info.file_size - header:,}; it is not loaded")
        flat = np.zeros(math.prod(shape), dtype=dtype)
        raw = flat.view(np.uint8) if nbytes else np.zeros(0, dtype=np.uint8)
        for lo in range(0, nbytes, _CHUNK):  # into the array itself: no second copy of a large one
            chunk = fh.read(min(_CHUNK, nbytes - lo))
            if len(chunk) != min(_CHUNK, nbytes - lo):
                raise EOFError(f"member {name!r} ends before its data")
            raw[lo:lo + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
    return flat.reshape(shape, order="F" if fortran else "C")
