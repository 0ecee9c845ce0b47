"""``llm-policy-gen bench SUITE --publish-from OUT`` (issue 61): a finished bench folder's records of the selection
go into the suite's committed store with their random-policy references, once; nothing runs; a refusal writes
nothing. The suite is a TOML file, so its committed store is ``tiny/records.jsonl`` beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bench_command import bench, snapshot, write_suite

from llm_policy_gen.cli import main
from llm_policy_gen.suites.store import read_records


@pytest.fixture
def measured(tmp_path: Path) -> tuple[Path, Path]:
    """A suite file and a bench folder with offline's records on both tasks, seeds 0 and 1."""
    suite, out = write_suite(tmp_path), tmp_path / "out"
    assert bench(suite, out, "--methods", "offline") == 0
    return suite, out


def test_publish_from_appends_the_selection_once_with_its_references(measured: tuple[Path, Path],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    suite, out = measured
    store = suite.parent / "tiny"
    before = snapshot(out)
    capsys.readouterr()
    assert main(["bench", str(suite), "--publish-from", str(out), "--tasks", "cliff", "--seeds", "1"]) == 0
    assert "published 1 record from" in capsys.readouterr().out
    published = read_records(store)
    assert [(r.task, r.method, r.seed) for r in published] == [("cliff", "offline", 1)]
    assert published[0] == next(r for r in read_records(out) if (r.task, r.seed) == ("cliff", 1))
    refs = json.loads((store / "references.json").read_text(encoding="utf-8"))
    assert list(refs["random_policy"]) == ["cliff"] and list(refs["random_policy"]["cliff"]["by_seed"]) == ["1"]
    # the rest of the folder, then nothing new; the bench folder itself is never changed and nothing ran
    assert main(["bench", str(suite), "--publish-from", str(out)]) == 0
    assert "published 3 records" in capsys.readouterr().out and len(read_records(store)) == 4
    assert main(["bench", str(suite), "--publish-from", str(out)]) == 0
    assert "published 0 records" in capsys.readouterr().out
    assert len(read_records(store)) == 4 and snapshot(out) == before


@pytest.mark.parametrize(("extra", "says"), [
    (["--publish-from", "NOWHERE"], "bad --publish-from"),
    (["--publish-from", "OUT", "--list"], "it runs nothing; drop --publish, --list and --out"),
    (["--publish-from", "OUT", "--publish"], "it runs nothing"),
])
def test_a_refused_publish_exits_2_in_one_line_and_writes_nothing(measured: tuple[Path, Path], extra: list[str],
                                                                  says: str, capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    suite, out = measured
    before = snapshot(suite.parent)
    capsys.readouterr()
    argv = [str(suite.parent / "nowhere") if a == "NOWHERE" else str(out) if a == "OUT" else a for a in extra]
    assert main(["bench", str(suite), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert snapshot(suite.parent) == before
