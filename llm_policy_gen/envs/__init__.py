"""Environment specs (bounds, bins, action names, hints, priors), the registry, and environment construction."""

from .catalog import get_spec, load_spec_file, shipped_env_ids
from .make import make_env
from .spec import EnvSpec, LinearPrior

__all__ = ["EnvSpec", "LinearPrior", "get_spec", "load_spec_file", "shipped_env_ids", "make_env"]
