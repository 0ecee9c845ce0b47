"""Each table state's coordinates: the bin index per observation dimension, what the structured controls encode.

The lm-policy mode enumerates the discretized states 0..n_states-1 (:func:`.state_text.state_texts` writes one text
per state); a state's coordinates are the same enumeration read per dimension:

* a Box observation (:class:`~llm_policy_gen.discretize.BoxDiscretizer`): the bin of each dimension the table uses,
  the row-major decomposition of the state index (CartPole-v1's state 323 is bins (2, 2, 5, 5) of (3, 3, 6, 6));
* a discrete observation whose spec names its coordinates (``[meaning] factors``, :mod:`.meaning`: Taxi-v4's taxi
  row, taxi column, passenger and destination, which gymnasium encodes row-major): those;
* a grid world (``grid = [rows, cols]``: FrozenLake's cell): its row and column;
* any other discrete observation: the state index itself, one coordinate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..discretize import BoxDiscretizer, ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..errors import SpecError

__all__ = ["StateCoordinates", "state_coordinates"]


@dataclass(frozen=True)
class StateCoordinates:
    """Every state's coordinates: ``bins[s, j]`` is state ``s``'s index along coordinate ``j`` (0..sizes[j]-1)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    bins: np.ndarray
    """(n_states, len(sizes)) int64."""

    @property
    def n_states(self) -> int:
        return int(self.bins.shape[0])

    def describe(self) -> dict[str, list[str] | list[int]]:
        """What ``config.json`` records: the coordinates' names and sizes."""
        return {"names": list(self.names), "sizes": list(self.sizes)}


def _factor_sizes(spec: EnvSpec) -> list[tuple[str, int]]:
    """The ``[meaning] factors`` a spec names, as (name, size) (none: an empty list)."""
    factors = spec.meaning.get("factors", [])
    if not isinstance(factors, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                                and isinstance(f.get("size"), int) and f["size"] >= 1
                                                for f in factors):
        raise SpecError(f"{spec.name}: [meaning] factors must be a list of {{name, size}} tables (size >= 1), got "
                        f"{factors!r}")
    return [(str(f["name"]), int(f["size"])) for f in factors]


def state_coordinates(spec: EnvSpec, observation: ObservationDiscretizer) -> StateCoordinates:
    """The coordinates of each of ``observation``'s states, in state order (see the module doc)."""
    n = observation.n_states
    if isinstance(observation, BoxDiscretizer):
        names = tuple(d.name for d in observation.dims)
        sizes = tuple(int(b) for b in observation.bins)
    elif factors := _factor_sizes(spec):
        names, sizes = tuple(f[0] for f in factors), tuple(f[1] for f in factors)
        if int(np.prod(sizes)) != n:
            raise SpecError(f"{spec.name}: [meaning] factors of sizes {list(sizes)} hold {int(np.prod(sizes))} "
                            f"states, the table has {n}")
    elif spec.grid is not None and spec.grid[0] * spec.grid[1] == n:
        names, sizes = ("row", "column"), (int(spec.grid[0]), int(spec.grid[1]))
    else:
        names, sizes = ("state",), (n,)
    bins = np.stack(np.unravel_index(np.arange(n), sizes), axis=1).astype(np.int64)
    return StateCoordinates(names, sizes, bins)
