"""Train a table policy for Hopper-v5: `python agents/hopper.py [train options]`, e.g. --backend gemini.

A thin script over the library: every option of `llm-policy-gen train` works here.
"""

import sys

from llm_policy_gen.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--env", "Hopper-v5", *sys.argv[1:]]))
