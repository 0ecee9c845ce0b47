"""Backends from ``name[:model]`` strings: a registry of LLM clients and non-LLM proposers.

A backend is either an **LLM client** (``gemini``, ``openai``, ``anthropic``, ``ollama``, and ``replay:PATH``), which
the engine wraps in a session and an :class:`~llm_policy_gen.proposers.llm.LLMProposer`, or a **proposer** that is not
a language model (``offline``, ``kept-table-q``, ``random``). Each is one registry line with its entry point, loaded
lazily, so a missing SDK matters only when it is used, and a misspelt name gets the close matches. A mode that proposes
nothing (``q-learning``, ``lm-policy``) has no line here: the run builds no backend for it, and ``--backend
q-learning``, the standard Q-learner's old spelling, is read as ``--mode q-learning`` where the configuration is built
(:data:`llm_policy_gen.schema.aliases.MOVED_BACKENDS`).

A provider is one class in one file plus one registry line (entry point and ``kind="client"``): everything else it
needs (key variables, base-URL variable, default model, profile, whether ``train`` may pick it without
``--backend``, how "configured" is decided) are class variables of its :class:`~llm_policy_gen.clients.sdk.SDKClient`
subclass, which the functions below ask (:func:`provider_classes`). The client modules import their SDKs only when a
client is built, so asking the classes costs no SDK import. Other entries (``replay``, the proposers, a plain
factory) carry their facts on the registry line (``default_model``, ``is_llm``, ``description``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import BackendConfigError
from ..registry import PluginOptions, Registry

if TYPE_CHECKING:
    from ..clients.profiles import ClientProfile
    from ..clients.sdk import SDKClient

__all__ = ["BACKENDS", "parse_backend_spec", "is_configured", "default_backend_spec", "list_backends", "is_client",
           "is_llm", "default_model", "provider_class", "provider_classes", "auto_order", "provider_variables",
           "base_url_variable", "all_profiles", "get_profile", "backend_specs",
           "BackendFacts", "facts"]

@dataclass(frozen=True)
class BackendFacts:
    """A backend registry line's keywords, typed (a misspelt keyword is a ``TypeError`` where the line is read)."""

    kind: Literal["client", "proposer"]
    default_model: str | None = None
    """The model of ``--backend NAME`` without ``:MODEL``; None: the provider class says."""
    is_llm: bool | None = None
    """None: the provider class says (a client line that holds it holds its facts itself, as ``replay``)."""
    description: str = ""
    notice: str = ""
    """What a run of this backend says before it starts (``offline``: not an LLM)."""
    spec: str = ""
    """How ``--backend`` names it, where not ``NAME`` or ``NAME[:MODEL]`` (``replay:PATH``)."""
    writes_values: bool = True
    """False for a proposer that cannot write a reward mode's values (a table search)."""


def facts(name: str) -> BackendFacts:
    """The typed facts of backend ``name``'s registry line (an unknown name: the registry's one-line error)."""
    return BackendFacts(**BACKENDS.entry(name).info)


class _Backends(Registry[Any]):
    """The backend registry: a client that declares no options of its own (a factory function) takes every client's
    (:class:`~llm_policy_gen.clients.base.ClientSettings`), as the session it is wrapped in reads them."""

    def options_model(self, name: str) -> type[PluginOptions] | None:
        found = super().options_model(name)
        if found is None and facts(name).kind == "client":
            from ..clients.base import ClientSettings

            return ClientSettings
        return found


#: Every backend: entry point plus ``kind`` ("client" or "proposer"); entries that are not provider
#: classes also say ``default_model``, ``is_llm`` and ``description``.
BACKENDS: Registry[Any] = _Backends("backend", "--backend")
BACKENDS.register("offline", "llm_policy_gen.proposers.offline:OfflineProposer", kind="proposer", default_model="",
                  is_llm=False, description="deterministic non-LLM optimiser; the baseline every LLM must beat",
                  notice="a deterministic optimiser, NOT an LLM (the baseline every LLM must beat)")
BACKENDS.register("replay", "llm_policy_gen.clients.replay:ReplayClient", kind="client", default_model="",
                  is_llm=False, spec="replay:PATH",
                  description="answers each call with the recorded answer of a transcripts.jsonl")
BACKENDS.register("gemini", "llm_policy_gen.clients.gemini:GeminiClient", kind="client")
BACKENDS.register("openai", "llm_policy_gen.clients.openai:OpenAIClient", kind="client")
BACKENDS.register("anthropic", "llm_policy_gen.clients.anthropic:AnthropicClient", kind="client")
BACKENDS.register("ollama", "llm_policy_gen.clients.ollama:OllamaClient", kind="client")
BACKENDS.register("llamacpp", "llm_policy_gen.clients.llamacpp:LlamaCppClient", kind="client",
                  spec="llamacpp:PATH.gguf")
BACKENDS.register("kept-table-q", "llm_policy_gen.proposers.kept_table_q:KeptTableQProposer", kind="proposer",
                  default_model="", is_llm=False, writes_values=False,
                  description="tabular Q-learning over the kept table's episodes (baseline, not an LLM; "
                              "`q-learning` before the standard learner took that name)")
BACKENDS.register("random", "llm_policy_gen.proposers.random:RandomProposer", kind="proposer", default_model="",
                  is_llm=False, description="uniformly random tables (baseline, not an LLM)")


def backend_specs() -> list[str]:
    """How each backend is named in ``--backend``, from its registry line: ``offline`` (a proposer takes no model),
    ``gemini[:MODEL]`` (a client), or the line's own ``spec`` (``replay:PATH``)."""
    return [facts(n).spec or (f"{n}[:MODEL]" if is_client(n) else n) for n in BACKENDS]


def provider_class(name: str) -> type[SDKClient] | None:
    """The provider class registered as ``name`` (imported on first use; no SDK is imported), or None for a backend
    that is not one (``replay``, a proposer, a factory function)."""
    line = facts(name)
    if line.kind != "client" or line.is_llm is not None:  # the line itself holds the facts
        return None
    from ..clients.sdk import SDKClient

    found = BACKENDS.load(name)
    return found if isinstance(found, type) and issubclass(found, SDKClient) else None


def provider_classes() -> dict[str, type[SDKClient]]:
    """Every registered provider class, by backend name."""
    found = {name: provider_class(name) for name in BACKENDS}
    return {name: cls for name, cls in found.items() if cls is not None}


def _fact(name: str, attribute: str, default: Any) -> Any:
    """``attribute`` of backend ``name``: its provider class's, else its registry line's."""
    cls = provider_class(name)
    if cls is not None:
        return getattr(cls, attribute)
    value = getattr(facts(name), attribute)
    return default if value is None else value


def is_llm(name: str) -> bool:
    """True for a backend that is a language model."""
    return bool(_fact(name, "is_llm", False))


def default_model(name: str) -> str:
    """The model of ``--backend NAME`` without ``:MODEL`` (empty for backends that take none or need a file)."""
    return str(_fact(name, "default_model", ""))


def provider_variables(name: str) -> tuple[str, ...]:
    """The environment variables backend ``name`` reads: its key variables, then its base-URL variable."""
    cls = provider_class(name)
    if cls is None:
        return ()
    return (*cls.key_variables, *((cls.base_url_variable,) if cls.base_url_variable else ()))


def base_url_variable(name: str) -> str:
    """The SDK's own base-URL variable of backend ``name`` (empty when it has none)."""
    cls = provider_class(name)
    return (cls.base_url_variable or "") if cls is not None else ""


def auto_order() -> list[str]:
    """The providers ``train`` without ``--backend`` tries, in order (the classes' ``auto_order``)."""
    ranked = [(cls.auto_order, name) for name, cls in provider_classes().items() if cls.auto_order is not None]
    return [name for _, name in sorted(ranked)]


def all_profiles() -> dict[str, ClientProfile]:
    """Every profile of the registered provider classes, by name (``default_profile``, and the others a class may
    choose by base URL)."""
    return {p.name: p for cls in provider_classes().values() for p in cls.profiles()}


def get_profile(name: str) -> ClientProfile:
    """The profile called ``name`` (KeyError names the known ones)."""
    known = all_profiles()
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"no client profile {name!r}; known: {', '.join(known)}") from None


def parse_backend_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4.1"`` -> ``("openai", "gpt-4.1")``; ``"replay:PATH"`` keeps the path as the model part."""
    accepted = f"{', '.join(BACKENDS.names())} (as NAME or NAME:MODEL)"
    if not isinstance(spec, str) or not spec.strip():
        raise BackendConfigError(f"empty backend spec; accepted: {accepted}")
    name, _, model = spec.strip().partition(":")
    name = name.lower()
    if name not in BACKENDS:
        err = BACKENDS.unknown(name)
        raise BackendConfigError(str(err) if name == spec.strip().lower() else f"{err}; the spec was {spec!r}")
    if name == "replay" and not model:
        raise BackendConfigError("replay needs a file: --backend replay:PATH, a run directory or its transcript file")
    if model and not is_client(name):  # a proposer takes no model
        raise BackendConfigError(f"{name} takes no model, got {spec!r}")
    return name, model or default_model(name)


def is_client(name: str) -> bool:
    """True for backends that are LLM clients (and replay), False for the non-LLM proposers."""
    return facts(name).kind == "client"


def is_configured(name: str, check_server: bool = False) -> bool | None:
    """True when ``name`` can be used as it is (a key is set, or it needs none; its extra is installed).

    A provider that needs a server and no key (``ollama``) is asked with ``check_server`` (True or False), otherwise
    None (not checked).
    """
    cls = provider_class(name)
    return cls.configured(check_server) if cls is not None else True


def default_backend_spec() -> tuple[str, str]:
    """The backend ``train`` uses without ``--backend``, and why."""
    order = auto_order()
    classes = provider_classes()
    for name in order:
        if is_configured(name):
            return name, f"{classes[name].key_found_in()} is set"
    wanted = [classes[name].key_name() for name in order]
    listed = ", ".join(wanted[:-1]) + f" or {wanted[-1]}" if len(wanted) > 1 else "".join(wanted)
    return "offline", f"no API key is configured (set {listed})"


def list_backends(check_servers: bool = False) -> list[dict[str, Any]]:
    """Rows for ``llm-policy-gen backends``: name, default model, LLM or not, configured or not (never a key)."""
    rows = []
    for name in BACKENDS:
        cls = provider_class(name)
        base_var = base_url_variable(name)
        rows.append({
            "name": name,
            "default_model": default_model(name),
            "is_llm": is_llm(name),
            "configured": is_configured(name, check_servers),
            "key_variable": cls.key_name() if cls is not None else "",
            "base_url": os.environ.get(base_var, "") if base_var else "",
            "description": _fact(name, "description", ""),
        })
    return rows
