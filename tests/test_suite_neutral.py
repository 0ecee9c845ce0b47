"""The priors apart (issue 32 item 4): ``train --prior neutral`` starts the search from no prior rule (every state at
the spec's default action; the goal suite's ``offline-neutral`` is ``offline[prior=neutral]``), ``--prior start``
starts the kept table at the prior rule's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_policy_gen.cli import main


def _recorded(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def test_train_prior_neutral_drops_the_prior_rule_and_records_it(tmp_path: Path) -> None:
    runs = {}
    for prior in ("spec", "neutral"):
        assert main(["train", "--env", "CartPole-v1", "--backend", "offline", "--prior", prior, "--max-episodes", "6",
                     "--heldout-episodes", "3", "--logs-dir", str(tmp_path), "--run-id", prior, "--no-plots",
                     "--no-progress", "--quiet"]) == 0
        runs[prior] = _recorded(tmp_path / "CartPole-v1" / prior)
    assert runs["spec"]["config"]["prior"] == "spec" and runs["spec"]["env_spec"]["prior"] is not None
    assert runs["neutral"]["config"]["prior"] == "neutral" and runs["neutral"]["env_spec"]["prior"] is None
    # the first candidate of the spec's run is its prior rule; the neutral run has no rule to start from
    first = [json.loads((tmp_path / "CartPole-v1" / p / "transcripts.jsonl").read_text().splitlines()[0])
             for p in ("spec", "neutral")]
    assert "prior rule" in json.dumps(first[0]) and "prior rule" not in json.dumps(first[1])


def test_train_prior_start_starts_the_kept_table_at_the_prior_rule(tmp_path: Path) -> None:
    """``--prior start``: the table the first adoption replaced is the prior rule's table, measured on the run's
    held-out seeds; with ``--prior spec`` it is the default action everywhere."""
    from llm_policy_gen.collect import Collector
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.sweep.random_baseline import heldout_seeds

    spec = get_spec("CartPole-v1")
    prior_table = spec.prior_table()
    assert prior_table is not None
    with Collector(spec, workers=1) as c:
        expect = {"start": c.evaluate(prior_table, heldout_seeds(0, 3)).returns,
                  "spec": c.evaluate(spec.default_table(), heldout_seeds(0, 3)).returns}
    assert list(expect["start"]) != list(expect["spec"])
    for prior in ("spec", "start"):
        assert main(["train", "--env", "CartPole-v1", "--backend", "offline", "--prior", prior, "--max-episodes", "6",
                     "--heldout-episodes", "3", "--logs-dir", str(tmp_path), "--run-id", prior, "--no-plots",
                     "--no-progress", "--quiet"]) == 0
        run = tmp_path / "CartPole-v1" / prior
        first = json.loads((run / "events.jsonl").read_text().splitlines()[0])
        assert first["accepted"] and first["heldout_returns_before"] == [float(x) for x in expect[prior]]
        assert _recorded(run)["config"]["prior"] == prior and _recorded(run)["env_spec"]["prior"] is not None


def test_a_bad_prior_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--env", "CartPole-v1", "--prior", "none", "--logs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prior" in err and "'spec', 'neutral', 'start'" in err
    assert not any(tmp_path.iterdir())
