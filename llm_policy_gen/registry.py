"""Registries of plug-ins by name, each entry an ``"module:attribute"`` string loaded on first use.

The habit of gymnasium's ``register(id, entry_point=...)``: answer formats, modes and backends each have one
:class:`Registry`. Adding a plug-in is one file plus one ``register`` line; nothing is imported until a run asks
for it, and a misspelt name gets a one-line :class:`~llm_policy_gen.errors.UserError` with the close matches.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import UserError

__all__ = ["Entry", "Registry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered plug-in."""

    name: str
    entry_point: str
    """``"package.module:attribute"``."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form facts shown in listings (description, default model, ...)."""


class Registry(Generic[T]):
    """Name -> entry point; :meth:`load` imports the attribute the first time it is asked for."""

    def __init__(self, kind: str, option: str) -> None:
        self.kind = kind
        """What the entries are, for messages ("answer format", "mode", ...)."""
        self.option = option
        """The command-line option that names one (for messages)."""
        self._entries: dict[str, Entry] = {}
        self._loaded: dict[str, T] = {}

    def register(self, name: str, entry_point: str, **info: Any) -> None:
        """Add ``name``; registering a name twice replaces the entry (tests use this to add examples)."""
        if ":" not in entry_point:
            raise ValueError(f"entry point {entry_point!r} must be 'module:attribute'")
        self._entries[name] = Entry(name, entry_point, dict(info))
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        """The entry of ``name``; an unknown name is a :class:`UserError` suggesting close matches."""
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str, accepted: Sequence[str] | None = None, where: str | None = None) -> UserError:
        """The one-line error for ``name``; ``accepted`` narrows the names offered (default: every entry); ``where``
        says where the name was given when it was not the command-line option (a config file's key)."""
        names = list(self.names() if accepted is None else accepted)
        close = difflib.get_close_matches(str(name), names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return UserError(f"unknown {self.kind} {name!r} {where or 'for ' + self.option}{hint} "
                         f"(accepted: {', '.join(names)})")

    def load(self, name: str) -> T:
        """The registered attribute (a class or factory), imported on first use."""
        if name not in self._loaded:
            module, _, attr = self.entry(name).entry_point.partition(":")
            self._loaded[name] = getattr(importlib.import_module(module), attr)
        return self._loaded[name]
