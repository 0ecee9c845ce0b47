"""The console's iteration line (issue 59, item 12): every number carries its label.

Without a terminal each iteration is one plain line; a new user read ``candidates 229.0/500.0/229.0/242.3`` and a
trailing ``35.5 s`` without knowing what they were. Each number now says what it is: the candidates' test means in
candidate order, tokens in and out, the cost and the seconds elapsed.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from llm_policy_gen.loggers.console import Console

ROOT = Path(__file__).resolve().parents[1]


def _line(record: dict[str, object], is_llm: bool = True) -> str:
    screen = io.StringIO()
    console = Console(3, "CartPole-v1 [openai]", stream=screen, is_llm=is_llm)
    console.write(record)
    console.close()
    (line,) = screen.getvalue().splitlines()
    return line


def test_an_llm_iteration_line_names_each_number() -> None:
    line = _line({"iteration": 2, "best_test_mean": 500.0, "best_heldout_mean": 498.79,
                  "candidate_means": [179.0, None, 448.5], "accepted": True, "accepted_total": 1, "llm_calls": 3,
                  "input_tokens": 1830, "output_tokens": 412, "cost_usd_total": 0.0031})
    assert line.startswith("iter 2/3: best test 500.0, held-out 498.8, candidates 1-3 test means "
                           "179.0/invalid/448.5 KEPT; 3 calls, tokens 1830 in + 412 out, cost $0.0031; elapsed "), line
    assert re.search(r"; elapsed \d+\.\d s$", line), line


def test_one_candidate_and_unpriced_calls_are_labelled_too() -> None:
    line = _line({"iteration": 1, "best_test_mean": 20.0, "best_heldout_mean": 21.0, "candidate_means": [35.5],
                  "accepted": True, "accepted_total": 1, "llm_calls": 1, "input_tokens": 900, "output_tokens": 80,
                  "cost_usd_total": 0.0, "cost_complete": False})
    assert ", candidate 1 test mean 35.5 KEPT; 1 call, tokens 900 in + 80 out, cost unpriced; elapsed " in line, line


def test_a_proposer_line_counts_proposals_and_labels_its_seconds() -> None:
    line = _line({"iteration": 3, "best_test_mean": 9.5, "best_heldout_mean": 9.3, "candidate_means": [None, None],
                  "accepted": False, "accepted_total": 0, "llm_calls": 2}, is_llm=False)
    assert ", candidates none of 2 valid (none accepted yet: the best is the initial table); 2 proposals; elapsed " \
        in line, line


def test_the_plain_lines_of_a_run_name_their_numbers(tmp_path: Path) -> None:
    """Through the command line, stderr a pipe (as under nohup): the candidates' means and the seconds, labelled."""
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", "train", "--backend", "offline", "--iterations",
                           "2", "--candidates", "2", "--heldout-episodes", "5", "--logs-dir", str(tmp_path),
                           "--run-id", "r", "--no-plots"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "LLM_POLICY_GEN_NO_DOTENV": "1",
                               "XDG_CACHE_HOME": str(tmp_path / "cache"), "LLM_POLICY_GEN_WORKERS": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("iter ")]
    assert len(lines) == 2, proc.stderr
    for line in lines:
        assert re.search(r", candidates 1-2 test means \d+\.\d/\d+\.\d( KEPT)?; 2 proposals; elapsed \d+\.\d s$",
                         line), line
