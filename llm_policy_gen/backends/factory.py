"""The one backend factory: ``--backend`` to a proposer, and for LLM clients the session the calls go through.

:func:`make_backend` is all a run (and ``compare``'s checks) asks: a non-LLM proposer is built from its registry line;
an LLM client (or ``replay:PATH``) gets the run's client options, its prompt cap in tokens where it knows its
tokenizer, the answer cache, the call limiter and the budget, wrapped in an
:class:`~llm_policy_gen.clients.session.LLMSession` and an :class:`~llm_policy_gen.proposers.llm.LLMProposer`. Before
the first call the endpoint is said: where the calls go, and where the base URL and the key came from.

``--rules-refine N`` wraps the LLM proposer in a :class:`~llm_policy_gen.proposers.refine.RefiningProposer` (rules
answers from an LLM client or ``replay:`` only; :func:`~llm_policy_gen.run.prepare.prepare` refuses any other
combination).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clients.base import ClientOptions, ClientSettings, CountsTokens, LLMClient, Message, RendersChat, is_free
from ..clients.cache import ResponseCache
from ..clients.keys import endpoint_notice, remember_url
from ..clients.pricing import DEFAULT_PRICES, price_of
from ..clients.replay import SOURCE_FIELDS
from ..clients.sdk import SDKClient
from ..clients.session import LLMSession
from ..clients.transcript import RecordedCalls, Transcript
from ..clients.usage import Budget, CallLimiter, LocalLimiter
from ..config import TrainConfig
from ..errors import UserError
from ..formats.base import RefineOptions
from ..prompting.builder import PromptBuilder, default_token_cap
from ..proposers.base import Proposer
from ..proposers.llm import LLMProposer
from ..proposers.refine import RefiningProposer
from . import BACKENDS, base_url_variable, is_client, is_llm, parse_backend_spec

__all__ = ["Backend", "make_backend", "client_settings", "client_options", "default_cache_dir", "check_context"]


@dataclass
class Backend:
    """What ``--backend`` became: the proposer every mode asks, the session of an LLM client (None otherwise), and
    the endpoint notice of a client that calls a server (None otherwise)."""

    name: str
    model: str
    proposer: Proposer
    session: LLMSession | None
    endpoint: str | None

    @property
    def client(self) -> LLMClient | None:
        return self.session.client if self.session is not None else None

    @property
    def is_llm(self) -> bool:
        """Whether the backend is a language model (its calls have a price), by its registry line."""
        return is_llm(self.name)

    def describe(self) -> dict[str, Any]:
        return self.session.client.describe() if self.session is not None else self.proposer.describe()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/llm-policy-gen/responses`` (``~/.cache`` without the variable)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "responses"


def client_settings(cfg: TrainConfig, name: str | None = None) -> ClientSettings:
    """The options of the client backend ``name`` (default: the run's), as its class declares them."""
    name = name or parse_backend_spec(cfg.backend or "offline")[0]
    model = BACKENDS.options_model(name) if is_client(name) else None
    return cfg.options_for(model if model is not None and issubclass(model, ClientSettings) else ClientSettings)


def client_options(cfg: TrainConfig, name: str | None = None) -> ClientOptions:
    settings = client_settings(cfg, name)
    remember_url(settings.base_url)  # its password is redacted from everything this process writes
    return settings.client_options()  # a timeout_s of None: by the server's kind


def make_backend(cfg: TrainConfig, needs_session: bool, mode_name: str, transcript: Transcript,
                 builder: PromptBuilder, log: Callable[[str], None], *, recorded: RecordedCalls | None = None,
                 limiter: CallLimiter | None = None, budget: Budget | None = None, chat: bool = True,
                 first: Callable[[], list[Message] | None] = lambda: None) -> Backend:
    """The run's backend (see the module doc); ``needs_session``: the mode asks the model directly, which a
    proposer that writes whole tables cannot serve; ``chat``: the mode sends chat messages, so a model that cannot
    take them (a base model without a chat template) is refused here, before the run starts; ``first``: the mode's
    first messages, with which a model's context is checked (:func:`check_context`)."""
    name, model = parse_backend_spec(cfg.backend or "offline")
    factory = BACKENDS.load(name)
    if not is_client(name):
        if needs_session:
            raise UserError(f"--mode {mode_name} needs a backend that answers free text (an LLM or "
                            f"replay:PATH), not {name!r}, which writes whole tables; use --mode table with it")
        return Backend(name, model, factory(seed=cfg.seed, transcript=transcript), None, None)
    settings = client_settings(cfg, name)
    options = dataclasses.replace(client_options(cfg, name), progress=log)  # a model's load is said, not silent
    client: LLMClient
    if name == "replay":
        client = factory(model)
        _check_replay_source(client, transcript)
    else:
        client = factory(model, options)
    if chat and isinstance(client, RendersChat):
        client.check_chat()
    _check_budget_is_priced(settings, client.provider, client.model, client.is_llm and not is_free(client))
    _fit_prompts_and_samples(cfg, settings, client, builder, log)
    check_context(cfg, client, builder, first, options)
    described = client.describe()
    endpoint = None
    if "base_url" in described:  # a client that calls a server: say where, and where URL and key came from
        endpoint = endpoint_notice(f"{client.provider}:{client.model}", str(described["base_url"] or ""),
                                   bool(settings.base_url), base_url_variable(name),
                                   str(described.get("key_source") or ""))
        log(endpoint)
    cache = None
    if settings.cache and client.is_llm:
        folder = Path(settings.cache_dir) if settings.cache_dir else default_cache_dir()
        base_url = str(described.get("base_url", "") or "")
        identity = client.cache_identity if isinstance(client, SDKClient) else client.model
        cache = ResponseCache(folder, client.provider, identity, base_url, options.sampling)
    session = LLMSession(
        client, transcript, repair_attempts=settings.repair_attempts, budget=budget or Budget(settings.budget_usd),
        prices_file=settings.prices_file, cache=cache, recorded=recorded,
        limiter=limiter or LocalLimiter(settings.max_concurrent_calls), max_concurrent=settings.max_concurrent_calls,
        log=log, seed=cfg.seed, max_answer_chars=settings.max_answer_chars,
    )
    proposer: Proposer = LLMProposer(session, builder)
    refine = cfg.options_for(RefineOptions).rules_refine
    if refine:
        proposer = RefiningProposer(proposer, refine, cfg.seed, transcript)
    return Backend(name, model, proposer, session, endpoint)


def check_context(cfg: TrainConfig, client: LLMClient | None, builder: PromptBuilder,
                  first: Callable[[], list[Message] | None], options: ClientOptions | None = None) -> None:
    """Refuse (one line, before the run starts) a model context that cannot hold the first prompt's fixed part
    (``first()``: the mode's first messages with nothing learned, rendered by the model's chat template and counted
    by its tokenizer) and as many tokens again for the answer (at most ``--max-output-tokens``: the share of the
    context the default prompt cap leaves the answer). No ``--max-prompt-tokens`` can cut that part, so the message
    names the smallest ``--llamacpp-n-ctx`` that fits: where the prompt cap follows the context (no
    ``--max-prompt-tokens``), the prompt is measured again at the cap of the context it names (the table's share of
    the prompt grows with the cap), until that context holds it."""
    if not isinstance(client, RendersChat) or not client.context_tokens:
        return
    messages = first()
    if messages is None:
        return
    options = options or client_options(cfg)
    max_output = options.sampling.max_output_tokens

    def needed(fixed: int) -> int:
        return fixed + min(max_output, fixed)

    fixed = client.chat_tokens(messages)
    need = needed(fixed)
    context = int(client.context_tokens)
    if need <= context:
        return
    if cfg.max_prompt_tokens is None:
        limit = builder.limit
        try:
            for _ in range(8):
                builder.limit = default_token_cap(cfg.max_prompt_chars, need, max_output)
                again = client.chat_tokens(first() or messages)
                if needed(again) <= need:
                    break
                fixed, need = again, needed(again)
        finally:
            builder.limit = limit
    given = f"--llamacpp-n-ctx {options.n_ctx}" if options.n_ctx else f"the model's context of {context} tokens"
    raise UserError(f"{given} is too small: the prompt's fixed part (task, table and answer format, which no "
                    f"--max-prompt-tokens can cut) is {fixed} tokens of {client.model} and the answer needs "
                    f"{need - fixed} more; give --llamacpp-n-ctx {need} or more")


def _check_budget_is_priced(cfg: ClientSettings, provider: str, model: str, is_llm: bool) -> None:
    """``--budget-usd`` needs the model's price: without one every call costs "unknown" and the budget cannot hold."""
    if cfg.budget_usd is None or not is_llm:
        return
    if price_of(provider, model, cfg.prices_file) is None:
        table = cfg.prices_file or os.environ.get("LLM_POLICY_GEN_PRICES") or str(DEFAULT_PRICES)
        raise UserError(
            f"--budget-usd needs a price for {provider}:{model} and the price table {table} has none; "
            f"add [{provider}] \"{model}\" = {{ input = USD_PER_MTOK, output = USD_PER_MTOK }} there "
            "or pass --prices FILE"
        )


def _fit_prompts_and_samples(cfg: TrainConfig, settings: ClientSettings, client: LLMClient, builder: PromptBuilder,
                             log: Callable[[str], None]) -> None:
    """Prompts in tokens where the client knows its tokenizer (``--max-prompt-tokens``), and a note where K
    candidates are likely to be identical samples."""
    if isinstance(client, CountsTokens):
        cap = cfg.max_prompt_tokens or default_token_cap(cfg.max_prompt_chars, client.context_tokens,
                                                         settings.max_output_tokens)
        builder.measure_in_tokens(cap, client.count_tokens)
    elif cfg.max_prompt_tokens is not None and client.is_llm:
        log(f"note: --max-prompt-tokens has no effect on {client.provider} (its tokenizer is not known "
            f"here); prompts are capped at --max-prompt-chars {cfg.max_prompt_chars}")
    if settings.temperature == 0 and cfg.candidates > 1 and client.is_llm:
        seeds = isinstance(client, SDKClient) and client.takes_seed
        why = ("each call carries its own seed, but at temperature 0 most models decode greedily" if seeds
               else f"{client.provider} takes no seed")
        log(f"warning: --temperature 0 with --candidates {cfg.candidates}: the candidates are likely "
            f"identical samples of one prompt ({why}); give a --temperature above 0 for distinct ones")


def _check_replay_source(client: Any, transcript: Transcript) -> None:
    """Refuse a transcript made for another environment, table size, mode or answer format."""
    mine = dict(transcript.common)
    for f in SOURCE_FIELDS:
        theirs = client.source.get(f)
        if theirs is not None and mine.get(f) not in (None, "") and theirs != mine.get(f):
            raise UserError(f"replay file {client.path} was recorded with {f} {theirs!r}, this run has "
                            f"{mine.get(f)!r}; replay it with the recorded run's settings")
