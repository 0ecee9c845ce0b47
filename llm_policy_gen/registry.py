"""Registries of plug-ins by name, each entry an ``"module:attribute"`` string loaded on first use.

The habit of gymnasium's ``register(id, entry_point=...)``: answer formats, modes and backends each have one
:class:`Registry`. Adding a plug-in is one file plus one ``register`` line; nothing is imported until a run asks
for it, and a misspelt name gets a one-line :class:`~llm_policy_gen.errors.UserError` with the close matches.

A plug-in declares its own settings: a class attribute ``Options``, a :class:`PluginOptions` model whose fields are
declared with :func:`setting` (default, accepted values, help, flag, whether ``--resume`` may change it). The
``train`` command line shows them in a section under the plug-in's name, a TOML file and ``config.json`` hold them
as flat keys beside the shared settings, and the plug-in reads them typed (``cfg.options_for(RewardOptions)``).
:func:`plugin_sections` gathers the options of every plug-in of the registries it is given (the configuration
names them: :data:`llm_policy_gen.config.PLUGIN_REGISTRIES`, so that this module, on the bottom floor, names no
plug-in package).
"""

from __future__ import annotations

import difflib
import importlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from .errors import UserError

__all__ = ["Entry", "Registry", "setting", "Option", "PluginOptions", "declared_options", "Section",
           "plugin_sections"]

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

    _generation = 0
    """Bumped whenever any registry changes, so that the gathered plug-in options are gathered again."""

    def register(self, name: str, entry_point: str, **info: Any) -> None:
        """Add ``name``; registering a name twice replaces the entry (tests use this to add examples)."""
        if ":" not in entry_point:
            raise ValueError(f"entry point {entry_point!r} must be 'module:attribute'")
        self._entries[name] = Entry(name, entry_point, dict(info))
        self._loaded.pop(name, None)
        Registry._generation += 1

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._loaded.pop(name, None)
        Registry._generation += 1

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

    def options_model(self, name: str) -> type[PluginOptions] | None:
        """The options model ``name`` declares (its class attribute ``Options``), None if it declares none."""
        found = getattr(self.load(name), "Options", None)
        return found if isinstance(found, type) and issubclass(found, PluginOptions) else None


# ---------------------------------------------------------------------------------------------------- options
def setting(default: Any, accepted: str, description: str, *, flag: str | None = "", resume: bool = False,
            operational: bool = False, names: str | None = None, **kw: Any) -> Any:
    """A setting (a field of the shared :class:`~llm_policy_gen.config.TrainConfig` or of a plug-in's
    :class:`PluginOptions`): its default, the words that say which values are accepted, its documentation, and how
    the command line and the run treat it (see :class:`Option`).

    ``flag`` is its ``train`` option when that is not ``--`` + the name with dashes (``--env``, ``--no-cache``), or
    None for a setting given only in a file; ``resume``: ``train --resume`` may change it; ``operational``: it changes
    how a run goes, not what it finds, so it may differ between invocations of one sweep; ``names``: a
    ``"module:attribute"`` naming a :class:`Registry` (or a function returning names) whose names fill ``{names}``
    in ``accepted`` when help and messages are written, so that they list what is registered.
    """
    extra: dict[str, JsonValue] = {"accepted": accepted, "flag": flag, "resume": resume, "operational": operational,
                                   "names": names}
    return Field(default, description=description, json_schema_extra=extra, **kw)


class PluginOptions(BaseModel):
    """The options a plug-in declares: a subclass with one :func:`setting` per field, named on the plug-in's class as
    ``Options``. A field's name is its key in a TOML file and in ``config.json`` (flat, beside the shared settings),
    so it must be unique among every plug-in's options and the shared settings; options several plug-ins share are
    declared once, on a base class they all subclass (the reward and advisor modes' learner settings)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Option:
    """How one setting is given and treated, as its field declares it."""

    name: str
    flag: str | None
    """Its ``train`` option (``--env``, ``--no-cache``, ``--max-episodes``); None: given only in a file."""
    accepted: str
    description: str
    default: Any
    resume: bool
    """``train --resume`` may change it (everything else comes from the run's config.json)."""
    operational: bool
    """It changes how a run goes, not what it finds: it may differ between invocations of one sweep."""
    annotation: Any = None
    """The field's type (how the command line parses the flag's value)."""
    section: str = ""
    """The plug-ins that declare it (``mode reward``, ``backends gemini, openai, ...``); empty for a shared one."""

    def help(self) -> str:
        """The flag's ``--help`` text: the description, what is accepted and the field's own default."""
        if isinstance(self.default, bool):  # a switch: --no-cache turns off what is on by default
            return f"Switch off (on by default): {self.description}" if self.default else \
                f"{self.description} (off by default)"
        if self.default is None and ("None" in self.description or "default" in self.description):
            return f"{self.description} Accepted: {self.accepted}."  # the description says what None does
        if self.default is None or self.default in ([], {}):
            default = "none"
        elif isinstance(self.default, list):
            default = ",".join(str(x) for x in self.default)
        elif isinstance(self.default, dict):
            default = json.dumps(self.default)
        else:
            default = str(self.default)
        return f"{self.description} Accepted: {self.accepted}. Default: {default}."


def declared_options(model: type[BaseModel], names: Sequence[str] | None = None,
                     section: str = "") -> dict[str, Option]:
    """The :class:`Option` of each field of ``model`` (of those in ``names``, if given), read from its declaration."""
    found: dict[str, Option] = {}
    for name, f in model.model_fields.items():
        if names is not None and name not in names:
            continue
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        flag = extra.get("flag", "")  # "": the name with dashes; None: no flag
        flag = "--" + name.replace("_", "-") if flag == "" else flag
        accepted = str(extra.get("accepted", ""))
        if extra.get("names"):
            module, _, attr = str(extra["names"]).partition(":")
            listed = getattr(importlib.import_module(module), attr)
            accepted = accepted.format(names=", ".join(listed.names() if isinstance(listed, Registry) else listed()))
        found[name] = Option(name=name, flag=str(flag) if flag else None, accepted=accepted,
                             description=f.description or "", default=f.get_default(call_default_factory=True),
                             resume=bool(extra.get("resume")), operational=bool(extra.get("operational")),
                             annotation=f.annotation, section=section)
    return found


@dataclass(frozen=True)
class Section:
    """The options one :class:`PluginOptions` class declares itself, and the plug-ins whose ``Options`` hold them."""

    title: str
    """``mode reward``; ``modes reward, advisor`` where several plug-ins share the declaring class."""
    model: type[PluginOptions]
    """The class that declares them (validates them)."""
    plugins: tuple[tuple[str, str], ...]
    """(registry kind, plug-in name) of each plug-in that takes them."""
    options: dict[str, Option]


_gathered: dict[tuple[int, tuple[int, ...]], list[Section]] = {}


def _declarer(model: type[PluginOptions], name: str) -> type[PluginOptions]:
    """The most basic class of ``model``'s that declares the field ``name``."""
    return next(c for c in reversed(model.__mro__)
                if isinstance(c, type) and issubclass(c, PluginOptions) and name in c.model_fields)


def plugin_sections(registries: Sequence[Registry[Any]]) -> list[Section]:
    """The options of every plug-in of ``registries``, one :class:`Section` per declaring class, in the registries'
    order (:func:`llm_policy_gen.config.plugin_sections` gives every registry whose plug-ins declare options). A
    plug-in that cannot be imported is refused loudly (:class:`UserError` naming its module and the error: its
    options silently missing made every check of them wrong); a key declared by two unrelated classes is a
    programming error (``ValueError``)."""
    key = (Registry._generation, tuple(id(r) for r in registries))
    if key in _gathered:
        return _gathered[key]
    users: dict[type[PluginOptions], list[tuple[str, str]]] = {}
    for registry in registries:
        for name in registry:
            try:
                model = registry.options_model(name)
            except (ImportError, AttributeError) as exc:  # its options would vanish from --help and every check
                where = registry.entry(name).entry_point
                raise UserError(f"the {registry.kind} plug-in {name!r} cannot be loaded from {where}: "
                                f"{type(exc).__name__}: {exc}; its options are unknown until it can (reinstall "
                                "llm-policy-gen, or fix or unregister the plug-in)") from None
            for declarer in {_declarer(model, k) for k in model.model_fields} if model else ():
                users.setdefault(declarer, []).append((registry.kind, name))
    sections: list[Section] = []
    owner: dict[str, str] = {}
    for declarer, plugins in users.items():
        kinds = list(dict.fromkeys(k for k, _ in plugins))
        title = "; ".join(f"{kind}{'s' if sum(k == kind for k, _ in plugins) > 1 else ''} "
                          f"{', '.join(n for k, n in plugins if k == kind)}" for kind in kinds)
        own = [k for k in declarer.model_fields if _declarer(declarer, k) is declarer]
        for k in own:
            if k in owner:
                raise ValueError(f"option {k!r} of {title} is declared already by {owner[k]}: a key is unique")
            owner[k] = title
        sections.append(Section(title, declarer, tuple(plugins), declared_options(declarer, own, title)))
    _gathered.clear()
    _gathered[key] = sections
    return sections
