"""``python -m llm_policy_gen``."""

import sys

from .cli import main

sys.exit(main())
