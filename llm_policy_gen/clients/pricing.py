"""Token prices per model, from one editable TOML file (``llm_policy_gen/data/prices.toml`` by default)."""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import UserError
from ..storage.config_files import read_toml

__all__ = ["DEFAULT_PRICES", "load_prices", "price_of", "cost_usd"]

DEFAULT_PRICES = Path(str(resources.files("llm_policy_gen") / "data" / "prices.toml"))
MAX_PRICE = 1e6
"""The highest price accepted, in USD per million tokens: with token counts capped too (``usage.MAX_TOKENS``), a
call's cost is always a finite number."""


def load_prices(path: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """``{provider: {model: {"input", "output", "cache_read", "cache_write"}}}`` in USD per million tokens.

    ``cache_read`` (prompt tokens read from the provider's prompt cache) and ``cache_write`` (tokens written to it,
    which Anthropic bills apart) default to the input price where a model does not list them.

    ``path``, else ``LLM_POLICY_GEN_PRICES``, else the shipped table. The variable is read on every call and a file
    is re-read when it changes, so a price table set or edited during a process is the one used.
    """
    p = Path(path or os.environ.get("LLM_POLICY_GEN_PRICES") or DEFAULT_PRICES)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        raise UserError(f"cannot read price file {p}: {exc.strerror}") from None
    return _read_prices(str(p), mtime)


@lru_cache(maxsize=8)
def _read_prices(path: str, mtime_ns: int) -> dict[str, dict[str, dict[str, float]]]:
    """The parsed price file (cached per path and modification time)."""
    p = Path(path)
    data = read_toml(p, "price file")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for provider, models in data.items():
        if not isinstance(models, dict):
            raise UserError(f"price file {p}: [{provider}] must be a table of models")
        for model, price in models.items():
            try:
                entry = {"input": float(price["input"]), "output": float(price["output"])}
                entry["cache_read"] = float(price.get("cache_read", entry["input"]))
                entry["cache_write"] = float(price.get("cache_write", entry["input"]))
            except (KeyError, TypeError, ValueError, AttributeError):
                raise UserError(f"price file {p}: {provider}.{model} needs numeric input and output") from None
            bad = next((k for k, v in entry.items() if not 0 <= v <= MAX_PRICE), None)  # nan fails both
            if bad is not None:  # a negative price would let --budget-usd never stop; inf or nan would break it
                raise UserError(f"price file {p}: bad {provider}.{model} {bad} = {entry[bad]:g}: accepted a number "
                                f"in 0..{MAX_PRICE:g} (USD per million tokens)")
            out.setdefault(provider, {})[model] = entry
    return out


def price_of(provider: str, model: str, path: str | None = None) -> dict[str, float] | None:
    """The price entry for a model (exact name, then the longest listed prefix, then ``*``), or None."""
    models = load_prices(path).get(provider, {})
    if model in models:
        return models[model]
    prefixes = [m for m in models if m != "*" and model.startswith(m)]
    if prefixes:
        return models[max(prefixes, key=len)]
    return models.get("*")


def cost_usd(
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    path: str | None = None,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """Cost of one call in USD, or None when the model has no price.

    ``input_tokens`` counts every prompt token; the ``cached_input_tokens`` and ``cache_write_tokens`` among them are
    priced at the model's ``cache_read`` and ``cache_write`` prices.
    """
    price = price_of(provider, model, path)
    if price is None:
        return None
    plain = max(0, input_tokens - cached_input_tokens - cache_write_tokens)
    return (plain * price["input"] + cached_input_tokens * price["cache_read"]
            + cache_write_tokens * price["cache_write"] + output_tokens * price["output"]) / 1_000_000
