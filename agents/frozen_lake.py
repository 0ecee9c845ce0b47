"""Train a table policy for the seed project's FrozenLake, the 4x4 lake without slip (FrozenLake-v1.deterministic):
`python agents/frozen_lake.py [train options]`.

Example: `python agents/frozen_lake.py --backend gemini --iterations 20`; `--env FrozenLake-v1` trains on gymnasium's
slippery lake instead.

A thin script over the library: every option of `llm-policy-gen train` works here.
"""

import sys

from llm_policy_gen.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--env", "FrozenLake-v1.deterministic", *sys.argv[1:]]))
