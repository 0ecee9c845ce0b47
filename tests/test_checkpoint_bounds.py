"""A checkpoint from someone else is read within bounds (issue 59, item 5): only the members its state names, each
``.npy`` header checked against the zip's size for it, and nothing larger than the file or the memory limit is
allocated; a refused ``train --resume`` is one line, exit 2, every file left as it was."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_run_interruptions import offline_run, refused_resume  # noqa: F401  (a fixture and its helper)

from llm_policy_gen.errors import UserError
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint

BOMB = 256 * 2**20
"""The bytes a deflated member inflates to (its file holds a few hundred KB)."""


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def _zeros_npy_deflated(zf: zipfile.ZipFile, name: str, nbytes: int) -> None:
    """A member ``name`` holding ``nbytes`` of zeros as a uint8 array, deflated, written in pieces."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (nbytes,)})
    with zf.open(info, "w", force_zip64=True) as fh:
        fh.write(header.getvalue())
        piece = bytes(16 * 2**20)
        for _ in range(nbytes // len(piece)):
            fh.write(piece)


def _rewrite(path: Path, extra: dict[str, bytes] | None = None, bomb: str | None = None,
             replace: dict[str, bytes] | None = None) -> None:
    """``path``'s checkpoint with ``extra`` members added, member ``bomb`` replaced by a deflated zero array of
    :data:`BOMB` bytes, or members replaced by raw ``.npy`` bytes."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            if name == bomb:
                _zeros_npy_deflated(zf, name, BOMB)
            else:
                zf.writestr(name, (replace or {}).get(name, data))
        for name, data in (extra or {}).items():
            zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    path.write_bytes(out.getvalue())


def _state(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, {"iteration": 1, "table": np.arange(16), "q": np.zeros((16, 4))})
    return path


def _array_member(path: Path) -> str:
    with zipfile.ZipFile(path) as zf:
        return next(n for n in zf.namelist() if n != "__state__.npy")


def test_a_deflated_member_that_would_inflate_past_the_file_is_refused_before_it_is_allocated(tmp_path: Path) -> None:
    path = _state(tmp_path)
    _rewrite(path, bomb=_array_member(path))
    assert path.stat().st_size < BOMB // 100
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="declares [0-9,]+ bytes of arrays, more than the file holds"):
            load_checkpoint(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # the member's 256 MiB were never allocated


def test_a_member_the_state_does_not_name_is_refused_and_never_loaded(tmp_path: Path) -> None:
    path = _state(tmp_path)
    _rewrite(path, extra={"a99.npy": _npy(np.ones(3))})
    with pytest.raises(UserError, match="holds a member its state does not name \\('a99.npy'\\)"):
        load_checkpoint(path)


def test_a_header_that_disagrees_with_the_size_the_zip_declares_is_refused(tmp_path: Path) -> None:
    path = _state(tmp_path)
    name = _array_member(path)
    short = _npy(np.zeros((16, 4)))[:-8]  # the header says 512 bytes of data; the member holds 504
    _rewrite(path, replace={name: short})
    with pytest.raises(UserError, match=f"'{name[:-4]}' declares 512 bytes of data .* but the archive holds 504"):
        load_checkpoint(path)


def test_the_bounded_reader_gives_back_what_was_saved(tmp_path: Path) -> None:
    state = {"iteration": 2, "f": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "e": np.zeros((0, 2)),
             "s": np.array(["ab", "c"]), "deep": [{"b": np.array([True, False])}], "big": np.arange(3 * 2**20)}
    save_checkpoint(tmp_path / "c.npz", state)
    back = load_checkpoint(tmp_path / "c.npz")
    for key in ("f", "e", "s", "big"):
        assert back[key].dtype == state[key].dtype and np.array_equal(back[key], state[key])
    assert np.array_equal(back["deep"][0]["b"], [True, False])


def test_a_resume_from_a_checkpoint_with_a_bomb_is_one_line_and_changes_no_file(
        offline_run: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    ckpt = offline_run / "checkpoint.npz"
    _rewrite(ckpt, bomb=_array_member(ckpt))
    line = refused_resume(offline_run, capsys)
    assert f"checkpoint {ckpt} declares" in line and "llm-policy-gen stores them uncompressed" in line, line


def test_a_resume_from_a_checkpoint_with_an_unnamed_member_is_refused(
        offline_run: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    ckpt = offline_run / "checkpoint.npz"
    _rewrite(ckpt, extra={"x.npy": zlib.compress(b"not read")})
    line = refused_resume(offline_run, capsys)
    assert "holds a member its state does not name ('x.npy')" in line, line
