"""Observation and action discretizers: continuous spaces to table indices and back to readable text.

Observations are binned per dimension with ``np.digitize`` over explicit edges after clipping to finite bounds
(the habit of gymnasium's ``DiscretizeObservation``). The flat state index is the row-major (C order) index of the
bin tuple, so for CartPole with bins (3, 3, 6, 6) state 0 is bin (0, 0, 0, 0) and state 323 is bin (2, 2, 5, 5).

Two binnings exist:

* ``uniform`` (default): ``bins`` bins of equal width between ``low`` and ``high``.
* ``seed``: the seed project's ``round((bins - 1) * ratio)``, kept only for reproducing its numbers; its two edge
  bins are half as wide as the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .errors import SpecError

__all__ = [
    "DimSpec",
    "ObservationDiscretizer",
    "BoxDiscretizer",
    "DiscreteDiscretizer",
    "ActionDiscretizer",
    "DiscreteActions",
    "BoxActions",
    "MultiDiscreteActions",
    "observation_discretizer_from_spec",
    "action_discretizer_from_spec",
]

Binning = Literal["uniform", "seed"]


@dataclass(frozen=True)
class DimSpec:
    """One observation dimension used by the table."""

    name: str
    """Readable name used in prompts, e.g. ``"pole angle"``."""
    low: float
    """Lower bound; values below are clipped into the first bin."""
    high: float
    """Upper bound; values above are clipped into the last bin."""
    bins: int
    """Number of bins (>= 1)."""
    index: int = -1
    """Index of this dimension in the raw observation vector (-1: its position in the spec)."""
    unit: str = ""
    """Unit shown in prompts, e.g. ``"rad"``."""
    estimated: bool = False
    """True when the bounds were estimated from sampled episodes rather than given."""

    def __post_init__(self) -> None:
        if not isinstance(self.bins, (int, np.integer)) or isinstance(self.bins, bool) or self.bins < 1:
            raise SpecError(f"dimension {self.name!r}: bins must be an integer >= 1, got {self.bins!r}")
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            raise SpecError(
                f"dimension {self.name!r}: bounds must be finite, got [{self.low}, {self.high}]; "
                "give finite low/high in the spec"
            )
        if not self.low < self.high:
            raise SpecError(f"dimension {self.name!r}: low must be < high, got low={self.low}, high={self.high}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "index": self.index,
            "low": float(self.low),
            "high": float(self.high),
            "bins": int(self.bins),
            "unit": self.unit,
            "estimated": self.estimated,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DimSpec:
        try:
            return cls(
                name=str(data["name"]),
                low=float(data["low"]),
                high=float(data["high"]),
                bins=int(data["bins"]),
                index=int(data.get("index", -1)),
                unit=str(data.get("unit", "")),
                estimated=bool(data.get("estimated", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"invalid dimension spec {data!r}: {exc}") from None


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


@runtime_checkable
class ObservationDiscretizer(Protocol):
    """Maps a batch of raw observations to flat state indices."""

    n_states: int

    def encode(self, obs: np.ndarray) -> np.ndarray:
        """(N, obs_dim) or (N,) observations -> (N,) int64 state indices."""
        ...

    def decode(self, state: int) -> tuple[int, ...]:
        """Flat state index -> bin tuple."""
        ...

    def describe_state(self, state: int) -> str:
        """Readable description of a state for prompts."""
        ...

    def describe_dims(self) -> list[str]:
        """One line per dimension listing the meaning of each bin."""
        ...

    def to_spec(self) -> dict[str, Any]:
        """JSON-able spec saved in policy files and compared on load."""
        ...


class BoxDiscretizer:
    """Bins selected dimensions of a ``Box`` observation."""

    def __init__(self, dims: Sequence[DimSpec], obs_dim: int | None = None, binning: Binning = "uniform") -> None:
        if len(dims) == 0:
            raise SpecError("a Box discretizer needs at least one dimension")
        if binning not in ("uniform", "seed"):
            raise SpecError(f"binning must be 'uniform' or 'seed', got {binning!r}")
        fixed = [DimSpec(**{**d.to_dict(), "index": i if d.index < 0 else d.index}) for i, d in enumerate(dims)]
        self.dims: tuple[DimSpec, ...] = tuple(fixed)
        self.indices = np.array([d.index for d in self.dims], dtype=np.int64)
        if obs_dim is not None and (self.indices.max() >= obs_dim):
            raise SpecError(
                f"dimension index {int(self.indices.max())} out of range for an observation of {obs_dim} values"
            )
        if len(set(self.indices.tolist())) != len(self.indices):
            raise SpecError(f"observation indices repeat: {self.indices.tolist()}")
        self.binning: Binning = binning
        self.bins = np.array([d.bins for d in self.dims], dtype=np.int64)
        self.low = np.array([d.low for d in self.dims], dtype=np.float64)
        self.high = np.array([d.high for d in self.dims], dtype=np.float64)
        self.n_states = int(np.prod(self.bins))
        # Interior edges per dimension (uniform binning); boundaries for descriptions.
        self.boundaries = [np.linspace(d.low, d.high, d.bins + 1) for d in self.dims]
        self.edges = [b[1:-1] for b in self.boundaries]
        if binning == "seed":
            # round((n-1)*ratio): bin k covers ratios in [(k-0.5)/(n-1), (k+0.5)/(n-1)), edge bins half as wide.
            self.boundaries = []
            for d in self.dims:
                if d.bins == 1:
                    self.boundaries.append(np.array([d.low, d.high]))
                    continue
                inner = d.low + (np.arange(d.bins - 1) + 0.5) / (d.bins - 1) * (d.high - d.low)
                self.boundaries.append(np.concatenate([[d.low], inner, [d.high]]))
            self.edges = [b[1:-1] for b in self.boundaries]
        self._strides = np.array(
            [int(np.prod(self.bins[i + 1 :])) for i in range(len(self.bins))], dtype=np.int64
        )

    def encode_bins(self, obs: np.ndarray) -> np.ndarray:
        """(N, obs_dim) -> (N, n_dims) bin indices."""
        x = np.asarray(obs, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        x = np.clip(x[:, self.indices], self.low, self.high)
        out = np.empty(x.shape, dtype=np.int64)
        for j, e in enumerate(self.edges):
            out[:, j] = np.digitize(x[:, j], e, right=False)
        return out

    def encode(self, obs: np.ndarray) -> np.ndarray:
        return self.encode_bins(obs) @ self._strides

    def decode(self, state: int) -> tuple[int, ...]:
        if not 0 <= int(state) < self.n_states:
            raise SpecError(f"state {state} out of range 0..{self.n_states - 1}")
        return tuple(int(b) for b in np.unravel_index(int(state), tuple(self.bins)))

    def bin_range(self, dim: int, b: int) -> tuple[float, float]:
        bounds = self.boundaries[dim]
        return float(bounds[b]), float(bounds[b + 1])

    def describe_bin(self, dim: int, b: int) -> str:
        d = self.dims[dim]
        lo, hi = self.bin_range(dim, b)
        close = "]" if b == d.bins - 1 else ")"
        lo_s = "<=" + _fmt(hi) if b == 0 and d.bins > 1 else None
        unit = f" {d.unit}" if d.unit else ""
        if d.bins == 1:
            return f"{d.name} any"
        if lo_s is not None:
            return f"{d.name} in [{_fmt(lo)}, {_fmt(hi)}){unit} (or below)"
        if b == d.bins - 1:
            return f"{d.name} in [{_fmt(lo)}, {_fmt(hi)}{close}{unit} (or above)"
        return f"{d.name} in [{_fmt(lo)}, {_fmt(hi)}){unit}"

    def describe_state(self, state: int) -> str:
        return ", ".join(self.describe_bin(j, b) for j, b in enumerate(self.decode(state)))

    def describe_dims(self) -> list[str]:
        lines = []
        for j, d in enumerate(self.dims):
            parts = []
            for b in range(d.bins):
                lo, hi = self.bin_range(j, b)
                parts.append(f"{b}=[{_fmt(lo)},{_fmt(hi)})")
            est = " (bounds estimated from sampled episodes)" if d.estimated else ""
            unit = f" {d.unit}" if d.unit else ""
            lines.append(f"dim {j} {d.name}{unit}, {d.bins} bins{est}: " + " ".join(parts))
        return lines

    def centers(self) -> np.ndarray:
        """(n_states, n_dims) centre of every state's bins, in raw units."""
        grid = np.array(np.unravel_index(np.arange(self.n_states), tuple(self.bins))).T
        mids = [(b[:-1] + b[1:]) / 2 for b in self.boundaries]
        return np.stack([mids[j][grid[:, j]] for j in range(len(self.dims))], axis=1)

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "box", "binning": self.binning, "dims": [d.to_dict() for d in self.dims]}


class DiscreteDiscretizer:
    """A ``Discrete(n)`` observation is its own state index; ``grid`` names cells ``row r, col c``."""

    def __init__(self, n: int, grid: tuple[int, int] | None = None, name: str = "state") -> None:
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecError(f"a Discrete observation needs n >= 1, got {n!r}")
        if grid is not None and grid[0] * grid[1] != n:
            raise SpecError(f"grid {grid} does not hold {n} states")
        self.n_states = int(n)
        self.grid = tuple(grid) if grid is not None else None
        self.name = name

    def encode(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.int64).reshape(-1)
        if x.size and (x.min() < 0 or x.max() >= self.n_states):
            raise SpecError(f"observation out of range 0..{self.n_states - 1}")
        return x

    def decode(self, state: int) -> tuple[int, ...]:
        if not 0 <= int(state) < self.n_states:
            raise SpecError(f"state {state} out of range 0..{self.n_states - 1}")
        if self.grid is not None:
            return (int(state) // self.grid[1], int(state) % self.grid[1])
        return (int(state),)

    def describe_state(self, state: int) -> str:
        if self.grid is not None:
            r, c = self.decode(state)
            return f"row {r}, col {c}"
        return f"{self.name} {int(state)}"

    def describe_dims(self) -> list[str]:
        if self.grid is not None:
            rows, cols = self.grid
            return [f"{self.n_states} cells on a {rows}x{cols} grid; state = row * {cols} + col"]
        return [f"{self.n_states} discrete {self.name}s, numbered 0..{self.n_states - 1}"]

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "discrete", "n": self.n_states, "grid": list(self.grid) if self.grid else None}


@runtime_checkable
class ActionDiscretizer(Protocol):
    """Maps flat action indices to environment actions."""

    n_actions: int

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """(N,) flat indices -> (N, ...) actions the environment accepts."""
        ...

    def describe(self, action: int) -> str:
        ...

    def to_spec(self) -> dict[str, Any]:
        ...


class DiscreteActions:
    """A ``Discrete(n)`` action space, with a name per action."""

    def __init__(self, n: int, names: Sequence[str] | None = None, start: int = 0) -> None:
        if n < 1:
            raise SpecError(f"a Discrete action space needs n >= 1, got {n}")
        if names is not None and len(names) != n:
            raise SpecError(f"{len(names)} action names given for {n} actions")
        self.n_actions = int(n)
        self.names = tuple(names) if names is not None else tuple(f"action {i}" for i in range(n))
        self.start = int(start)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, dtype=np.int64) + self.start

    def describe(self, action: int) -> str:
        return self.names[int(action)]

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "discrete", "n": self.n_actions, "names": list(self.names)}


class BoxActions:
    """A ``Box`` action space cut into ``levels`` evenly spaced values per dimension.

    With 3 levels the values are low, the middle and high (for a [-1, 1] box: -1, 0, +1). The flat action index is
    the row-major index of the level tuple, so index 0 is every dimension at its lowest level.
    """

    def __init__(
        self,
        low: Sequence[float] | np.ndarray,
        high: Sequence[float] | np.ndarray,
        levels: int | Sequence[int] | np.ndarray = 3,
        names: Sequence[str] | None = None,
    ) -> None:
        lo = np.asarray(low, dtype=np.float64).reshape(-1)
        hi = np.asarray(high, dtype=np.float64).reshape(-1)
        if lo.shape != hi.shape or lo.size == 0:
            raise SpecError(f"action bounds must have one shape, got {lo.shape} and {hi.shape}")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            raise SpecError(f"action bounds must be finite with low < high, got {lo.tolist()} .. {hi.tolist()}")
        lv = np.full(lo.size, levels, dtype=np.int64) if np.isscalar(levels) else np.asarray(levels, dtype=np.int64)
        if lv.shape != lo.shape or np.any(lv < 2):
            raise SpecError(f"action levels must be >= 2 per dimension, got {np.asarray(levels).tolist()}")
        if names is not None and len(names) != lo.size:
            raise SpecError(f"{len(names)} action dimension names given for {lo.size} dimensions")
        self.low, self.high, self.levels = lo, hi, lv
        self.names = tuple(names) if names is not None else tuple(f"a{i}" for i in range(lo.size))
        self.n_actions = int(np.prod(lv))
        self.values = [np.linspace(lo[i], hi[i], lv[i]) for i in range(lo.size)]
        grid = np.array(np.unravel_index(np.arange(self.n_actions), tuple(lv))).T
        self._table = np.stack([self.values[i][grid[:, i]] for i in range(lo.size)], axis=1).astype(np.float32)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return self._table[np.asarray(actions, dtype=np.int64)]

    def describe(self, action: int) -> str:
        vals = self._table[int(action)]
        return ", ".join(f"{n}={_fmt(float(v))}" for n, v in zip(self.names, vals, strict=True))

    def to_spec(self) -> dict[str, Any]:
        return {
            "kind": "box",
            "low": self.low.tolist(),
            "high": self.high.tolist(),
            "levels": self.levels.tolist(),
            "names": list(self.names),
        }


class MultiDiscreteActions:
    """A ``MultiDiscrete(nvec)`` action space flattened row-major."""

    def __init__(self, nvec: Sequence[int], names: Sequence[str] | None = None) -> None:
        nv = np.asarray(nvec, dtype=np.int64).reshape(-1)
        if nv.size == 0 or np.any(nv < 1):
            raise SpecError(f"MultiDiscrete nvec must be >= 1, got {nv.tolist()}")
        self.nvec = nv
        self.names = tuple(names) if names is not None else tuple(f"a{i}" for i in range(nv.size))
        self.n_actions = int(np.prod(nv))
        self._table = np.array(np.unravel_index(np.arange(self.n_actions), tuple(nv))).T.astype(np.int64)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return self._table[np.asarray(actions, dtype=np.int64)]

    def describe(self, action: int) -> str:
        return ", ".join(f"{n}={int(v)}" for n, v in zip(self.names, self._table[int(action)], strict=True))

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "multidiscrete", "nvec": self.nvec.tolist(), "names": list(self.names)}


def observation_discretizer_from_spec(spec: dict[str, Any]) -> ObservationDiscretizer:
    """Rebuild an observation discretizer from ``to_spec()`` output."""
    kind = spec.get("kind")
    if kind == "box":
        return BoxDiscretizer([DimSpec.from_dict(d) for d in spec["dims"]], binning=spec.get("binning", "uniform"))
    if kind == "discrete":
        grid = spec.get("grid")
        return DiscreteDiscretizer(int(spec["n"]), tuple(grid) if grid else None)
    raise SpecError(f"unknown observation discretizer kind {kind!r}; accepted: box, discrete")


def action_discretizer_from_spec(spec: dict[str, Any]) -> ActionDiscretizer:
    """Rebuild an action discretizer from ``to_spec()`` output."""
    kind = spec.get("kind")
    if kind == "discrete":
        return DiscreteActions(int(spec["n"]), spec.get("names"))
    if kind == "box":
        return BoxActions(spec["low"], spec["high"], spec["levels"], spec.get("names"))
    if kind == "multidiscrete":
        return MultiDiscreteActions(spec["nvec"], spec.get("names"))
    raise SpecError(f"unknown action discretizer kind {kind!r}; accepted: discrete, box, multidiscrete")
