"""Train a table policy for FrozenLake-v1: `python agents/frozen_lake.py [train options]`.

Example: `python agents/frozen_lake.py --backend gemini --iterations 20`.

A thin script over the library: every option of `llm-policy-gen train` works here.
"""

import sys

from llm_policy_gen.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--env", "FrozenLake-v1", *sys.argv[1:]]))
