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
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import JSONBounds, UserError
from ..storage.runlog import write_bytes_atomic
from ..storage.safe_json import loads

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 1
_ARRAY = "__ndarray__"


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
    """The state saved by :func:`save_checkpoint`; an unreadable file is a :class:`UserError`."""
    try:
        with np.load(Path(path), allow_pickle=False) as npz:  # never pickled: loading runs no code
            meta = loads(bytes(npz["__state__"]).decode("utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("state"), dict):
                raise UserError(f"checkpoint {path} holds no state object; it was not written by llm-policy-gen")
            if meta.get("version") != CHECKPOINT_VERSION:
                raise UserError(f"checkpoint {path} has version {str(meta.get('version'))[:20]}, expected "
                                f"{CHECKPOINT_VERSION}")
            arrays = {k: npz[k] for k in npz.files if k != "__state__"}
        state = _decode(meta["state"], arrays)
    except JSONBounds as exc:
        raise UserError(f"cannot read checkpoint {path}: its state {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"cannot read checkpoint {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    return dict(state)
