"""bench/ceiling.py reads a controller through a spec's table: a controller the table can hold keeps its score."""

from __future__ import annotations

import json
import subprocess
import sys

from run_helpers import ROOT


def test_a_controller_the_table_can_hold_keeps_its_score_read_through_the_table() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ceiling.py"), "--tasks", "mountaincarcontinuous",
                          "--episodes", "5", "--fit-episodes", "5", "--json"], capture_output=True, text=True,
                         check=True)
    (row,) = json.loads(out.stdout)
    assert row["env_id"] == "MountainCarContinuous-v0" and row["bins"] == "12x14"
    # force 0.5 * sign(velocity) is one of the table's 5 levels: it climbs the hill raw and read through the bins
    for figure in ("raw", "levelled", "centres", "majority"):
        assert 90 < row[figure] < 100, (figure, row)


def test_a_bad_task_or_bin_count_gets_one_line_and_exit_2() -> None:
    for args in (["--tasks", "nope"], ["--tasks", "mountaincar", "--bins", "3"], ["--bins", "x,y"]):
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "ceiling.py"), *args], capture_output=True,
                             text=True)
        assert out.returncode == 2 and out.stdout == "", args
        assert out.stderr.startswith("ceiling: error: ") and out.stderr.count("\n") == 1, out.stderr
