"""Per-provider quirks as data: the accepted temperature range, the name of the output-token cap, and the
structured-output modes a provider offers (strongest first, a subset of :data:`~.base.STRUCTURED_MODES`).

Each provider's client class holds its own profile (``default_profile``; every one, by name:
:func:`llm_policy_gen.backends.all_profiles`); the client takes it at construction and
checks the sampling settings against it, so that a temperature the provider would refuse with a 400 is a one-line
:class:`~llm_policy_gen.errors.BackendConfigError` before any call is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import BackendConfigError
from .base import STRUCTURED_MODES, Sampling

__all__ = ["ClientProfile"]


@dataclass(frozen=True)
class ClientProfile:
    """What one provider accepts."""

    name: str
    """Profile name (a provider, or ``openai-compatible`` for vLLM, llama.cpp, LM Studio behind ``--base-url``)."""
    label: str
    """How error messages name the provider ("the body was not OpenAI's JSON")."""
    temperature_range: tuple[float, float]
    """Lowest and highest temperature the provider accepts, both included."""
    token_parameter: str
    """Name of the output-token cap on the wire."""
    structured_modes: tuple[str, ...] = STRUCTURED_MODES
    """The structured-output modes the provider offers, strongest first."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.structured_modes if m not in STRUCTURED_MODES]
        if unknown or not self.structured_modes:
            raise ValueError(f"profile {self.name}: modes {self.structured_modes!r} not in {STRUCTURED_MODES}")

    def check_sampling(self, sampling: Sampling) -> None:
        """Raise :class:`BackendConfigError` (one line: the value and the range) for a temperature out of range."""
        t = sampling.temperature
        if t is None:
            return
        low, high = self.temperature_range
        if not (isinstance(t, (int, float)) and math.isfinite(t) and low <= t <= high):
            raise BackendConfigError(
                f"temperature {t!r} is outside the range {self.name} accepts: {low:g} to {high:g}"
            )
