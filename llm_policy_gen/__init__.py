"""llm-policy-gen: a large language model writes and iteratively rewrites a tabular RL policy.

The data flows discretize -> collect -> prompt -> backend -> validate (schema) -> keep -> log/plot; each stage is one
module of this package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("llm-policy-gen")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
