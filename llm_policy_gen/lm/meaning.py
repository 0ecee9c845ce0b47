"""What a state means in the task's words: the lm-policy mode's meaning text (``--lm-state-text meaning``).

A language model can only add what its text says. The plain text (:mod:`.state_text`) names each dimension's bin
range, or a grid cell's row and column; the meaning text says what those mean, from the spec's ``[meaning]`` table
(data, written once per task in its spec file, not code per task):

* ``map`` -- a grid world's rows, one character a cell (``"SFFF"``); rows written with a separator between cells
  (``"R: | : :G"``, gymnasium's Taxi map) have a wall between two cells where the separator is ``|``;
  ``cells`` names each character (``H = "a hole"``), ``outside`` what lies past the map's edge, ``wall`` a wall,
  ``target`` the character of the cell to reach (how far it is, is said), ``directions`` the words of the four
  moves, in the order they are said (``{left = "left", down = "down", ...}``, ``{down = "south", ...}``);
* ``factors`` -- a discrete state's coordinates, row-major as the environment encodes them, each ``{name, size}``
  with an optional ``text`` (``"The passenger is {}."``) and ``values`` (one phrase per value); ``position`` names
  the two factors that give the grid cell (default: the spec's grid, the state being the cell);
* ``dims`` -- per Box dimension name: ``below`` and ``above`` (the side of ``centre``, default 0, the bin is on),
  ``near`` (a bin that holds the centre) and ``degrees`` (how far from the centre, nearest first; the bin's midpoint
  picks one, by its share of the way to the bound on its side).

A grid state reads "You are at row 1, col 2, on frozen ice. Left: a hole. Down: frozen ice. ... The goal is 2 rows
down and 1 column right."; a CartPole state "The pole leans right, slightly (pole angle in [0, 0.0698) rad). ...".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..discretize import BoxDiscretizer, ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..errors import SpecError
from .coordinates import state_coordinates

__all__ = ["DimMeaning", "GridMeaning", "meaning_description", "check_meaning"]

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
"""A direction's step on the grid (row, column)."""
DEFAULT_DEGREES = ("slightly", "clearly", "far")


@dataclass(frozen=True)
class DimMeaning:
    """What a Box dimension's bins mean: the side of ``centre`` and how far."""

    below: str
    above: str
    near: str = ""
    centre: float = 0.0
    degrees: tuple[str, ...] = DEFAULT_DEGREES

    def say(self, lo: float, hi: float, low: float, high: float) -> str:
        """The phrase of the bin [lo, hi) of a dimension bounded by [low, high]."""
        if lo < self.centre < hi and self.near:
            return self.near
        mid = (lo + hi) / 2
        below = mid < self.centre
        extent = (self.centre - low) if below else (high - self.centre)
        share = abs(mid - self.centre) / extent if extent > 0 else 1.0
        degree = self.degrees[min(int(share * len(self.degrees)), len(self.degrees) - 1)]
        return f"{self.below if below else self.above}, {degree}"


@dataclass(frozen=True)
class GridMeaning:
    """A grid world's map: each cell's character, the walls between cells and the words for them."""

    cells: tuple[str, ...]
    """One string per row, one character per cell."""
    walls: frozenset[tuple[tuple[int, int], tuple[int, int]]]
    """(cell, cell to its right or below) pairs with a wall between them."""
    names: Mapping[str, str]
    directions: tuple[tuple[str, str], ...]
    """(move, its word) in the order they are said."""
    outside: str
    wall: str
    target: str

    def around(self, r: int, c: int) -> str:
        """Where the cell (r, c) is, what it is and what lies a move away in each direction."""
        parts = [f"You are at row {r}, col {c}, on {self.names[self.cells[r][c]]}."]
        for move, word in self.directions:
            dr, dc = MOVES[move]
            nr, nc = r + dr, c + dc
            if not (0 <= nr < len(self.cells) and 0 <= nc < len(self.cells[0])):
                what = self.outside
            elif (min((r, c), (nr, nc)), max((r, c), (nr, nc))) in self.walls:
                what = self.wall
            else:
                what = self.names[self.cells[nr][nc]]
            parts.append(f"{word.capitalize()}: {what}.")
        if self.target:
            parts.append(self._towards(r, c))
        return " ".join(parts)

    def _towards(self, r: int, c: int) -> str:
        words = dict(self.directions)
        tr, tc = next((i, row.index(self.target)) for i, row in enumerate(self.cells) if self.target in row)
        name = self.names[self.target]
        if (tr, tc) == (r, c):
            return f"You are on {name}."
        steps = [(abs(tr - r), "row", words["down" if tr > r else "up"]),
                 (abs(tc - c), "column", words["right" if tc > c else "left"])]
        said = " and ".join(f"{n} {unit}{'s' if n > 1 else ''} {word}" for n, unit, word in steps if n)
        return f"{name[0].upper()}{name[1:]} is {said}."


def _words(d: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
    value = d.get(key, default)
    if not isinstance(value, str):
        raise SpecError(f"{where}: {key} must be text, got {value!r}")
    return value


def _grid(spec: EnvSpec, m: Mapping[str, Any], rows: int, cols: int) -> GridMeaning:
    where = f"{spec.name}: [meaning]"
    drawn = m.get("map")
    if not isinstance(drawn, list) or len(drawn) != rows or not all(isinstance(x, str) for x in drawn):
        raise SpecError(f"{where} map must be {rows} rows of text, got {drawn!r}")
    spaced = all(len(x) == 2 * cols - 1 for x in drawn)
    if not spaced and not all(len(x) == cols for x in drawn):
        raise SpecError(f"{where} map rows must be {cols} cells (or {2 * cols - 1} with separators), got {drawn!r}")
    cells = tuple(x[::2] if spaced else x for x in drawn)
    walls = frozenset(((r, c), (r, c + 1)) for r, x in enumerate(drawn) for c in range(cols - 1)
                      if spaced and x[2 * c + 1] == "|")
    names = m.get("cells", {})
    missing = sorted({ch for x in cells for ch in x} - set(names if isinstance(names, dict) else ()))
    if not isinstance(names, dict) or missing:
        raise SpecError(f"{where} cells must name every map character; {missing or names!r} not named")
    directions = m.get("directions", {k: k for k in MOVES})
    if not isinstance(directions, dict) or not directions or set(directions) - set(MOVES):
        raise SpecError(f"{where} directions must map some of {', '.join(MOVES)} to words, got {directions!r}")
    target = _words(m, "target", where)
    if target and (target not in names or not any(target in x for x in cells)):
        raise SpecError(f"{where} target {target!r} is not a character of the map")
    return GridMeaning(cells, walls, {str(k): str(v) for k, v in names.items()},
                       tuple((str(k), str(v)) for k, v in directions.items()), _words(m, "outside", where, "the edge"),
                       _words(m, "wall", where, "a wall"), target)


def _dims(spec: EnvSpec, m: Mapping[str, Any]) -> dict[str, DimMeaning]:
    table = m.get("dims", {})
    where = f"{spec.name}: [meaning] dims"
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table by dimension name")
    out = {}
    for name, d in table.items():
        if not isinstance(d, dict) or not isinstance(d.get("below"), str) or not isinstance(d.get("above"), str):
            raise SpecError(f"{where}: {name!r} needs below and above phrases")
        degrees = d.get("degrees", list(DEFAULT_DEGREES))
        if not isinstance(degrees, list) or not degrees or not all(isinstance(x, str) for x in degrees):
            raise SpecError(f"{where}: {name!r} degrees must be a list of words")
        out[str(name)] = DimMeaning(d["below"], d["above"], _words(d, "near", where), float(d.get("centre", 0.0)),
                                    tuple(degrees))
    return out


def check_meaning(spec: EnvSpec, observation: ObservationDiscretizer) -> None:
    """Refuse (a :class:`~llm_policy_gen.errors.SpecError`, one line) a spec whose ``[meaning]`` table is missing or
    does not describe every state of ``observation``."""
    if not spec.meaning:
        raise SpecError(f"--lm-state-text meaning needs a [meaning] table in the spec of {spec.name}, which has "
                        "none; give --lm-state-text plain, or write one (docs/lm-policy.md, \"The state text\")")
    for s in range(observation.n_states):
        meaning_description(spec, observation, s)


def meaning_description(spec: EnvSpec, observation: ObservationDiscretizer, state: int) -> str:
    """Discretized state ``state`` in the task's words (see the module doc); a spec without ``[meaning]``, or with
    data that does not fit its table, raises :class:`~llm_policy_gen.errors.SpecError`."""
    m = spec.meaning
    if not m:
        raise SpecError(f"{spec.name} has no [meaning] table in its spec: the meaning text needs one")
    if isinstance(observation, BoxDiscretizer):
        dims = _dims(spec, m)
        parts = []
        for j, b in enumerate(observation.decode(state)):
            d, plain = observation.dims[j], observation.describe_bin(j, b)
            if d.name in dims:
                lo, hi = observation.bin_range(j, b)
                said = dims[d.name].say(lo, hi, d.low, d.high)
                parts.append(f"{said[0].upper()}{said[1:]} ({plain}).")
            else:
                parts.append(f"{plain[0].upper()}{plain[1:]}.")
        return " ".join(parts)
    coords = state_coordinates(spec, observation)
    at = dict(zip(coords.names, (int(x) for x in coords.bins[int(state)]), strict=True))
    parts = []
    position = m.get("position")
    if position is not None and not (isinstance(position, list) and len(position) == 2 and set(position) <= set(at)):
        raise SpecError(f"{spec.name}: [meaning] position must name two of the factors {list(coords.names)}")
    rows, cols = ((coords.sizes[coords.names.index(position[0])], coords.sizes[coords.names.index(position[1])])
                  if position else spec.grid or (0, 0))
    if "map" in m:
        r, c = (at[position[0]], at[position[1]]) if position else divmod(int(state), cols)
        parts.append(_grid(spec, m, rows, cols).around(r, c))
    for f in m.get("factors", []):
        values, text = f.get("values", []), f.get("text", "")
        if text and f["name"] not in (position or ()):
            value = values[at[f["name"]]] if len(values) == f["size"] else str(at[f["name"]])
            parts.append(text.replace("{}", value))
    if not parts:
        raise SpecError(f"{spec.name}: [meaning] says nothing of a discrete state (give map or factors with text)")
    return " ".join(parts)
