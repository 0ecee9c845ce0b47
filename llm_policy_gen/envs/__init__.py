"""Environment specs (bounds, bins, action names, hints, priors), the registry, and environment construction."""

from .make import make_env
from .registry import get_spec, load_spec_file, shipped_env_ids
from .spec import EnvSpec, LinearPrior

__all__ = ["EnvSpec", "LinearPrior", "get_spec", "load_spec_file", "shipped_env_ids", "make_env"]
