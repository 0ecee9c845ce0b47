"""What every drawing of the package is made and saved with: :data:`plt`, a few pyplot-like calls on matplotlib's
object API, and :func:`save_figure`.

Each figure has its own Agg canvas, so no screen is needed, and importing or drawing selects no backend and leaves
pyplot's state alone (a notebook that imports the package keeps its own backend).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..errors import UserError
from ..schema.argtypes import check_out_file

__all__ = ["plt", "save_figure", "png_bytes", "check_image_path", "IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
"""The image files ``plot --out`` writes."""


class _Figures:
    """The few pyplot calls the package draws with, each figure on its own Agg canvas (see the module doc)."""

    Rectangle = Rectangle

    @staticmethod
    def figure(*, figsize: tuple[float, float] | None = None, dpi: float | None = None, **kw: Any) -> Figure:
        fig = Figure(figsize=figsize, dpi=dpi, **kw)
        FigureCanvasAgg(fig)
        return fig

    @staticmethod
    def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
                 dpi: float | None = None, **kw: Any) -> tuple[Figure, Any]:
        fig = _Figures.figure(figsize=figsize, dpi=dpi)
        return fig, fig.subplots(nrows, ncols, **kw)

    @staticmethod
    def get_cmap(name: str, lut: int | None = None) -> Any:
        cmap = matplotlib.colormaps[name]
        return cmap if lut is None else cmap.resampled(lut)

    @staticmethod
    def close(fig: Figure) -> None:
        """Nothing to release: no pyplot manager holds the figure."""


plt = _Figures()


def check_image_path(out: Path) -> Path:
    """``out``, or :class:`~llm_policy_gen.errors.UserError` when it does not end with one of
    :data:`IMAGE_SUFFIXES` or its folder does not exist."""
    if out.suffix.lower() not in IMAGE_SUFFIXES:
        raise UserError(f"bad --out {str(out)!r}: the file must end with one of {', '.join(IMAGE_SUFFIXES)}")
    return check_out_file(out, "--out")


def save_figure(fig: Any, out: Path) -> Path:
    """Save ``fig`` to ``out`` atomically (temporary file in the same folder, then rename) and close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    try:
        fig.savefig(tmp)
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return out


def png_bytes(fig: Any) -> bytes:
    """``fig`` as PNG bytes (for a page that inlines its images)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
