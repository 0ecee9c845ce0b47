"""A default run id stays a creatable file name however long the backend's name is.

``replay:PATH`` puts a whole path into the backend's name; the default run id (time, backend, seed) once took all of
it, and a replay of a transcript in a deep folder (pytest-xdist's ``popen-gwN`` temporary folders were enough for a
replay of a replay) was refused with "File name too long".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llm_policy_gen.cli import main

RECORDED = Path(__file__).parent / "data" / "flat_keys_run" / "transcripts.jsonl"


def test_a_replay_of_a_transcript_in_a_deep_folder_gets_a_default_run_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path.joinpath(*["a-folder-with-a-rather-long-name"] * 8)
    deep.mkdir(parents=True)
    shutil.copy(RECORDED, deep / "transcripts.jsonl")
    backend = f"replay:{deep / 'transcripts.jsonl'}"
    assert len(backend) > 255
    logs = tmp_path / "logs"
    code = main(["train", "--env", "FrozenLake-v1", "--backend", backend, "--iterations", "1", "--logs-dir",
                 str(logs), "--heldout-episodes", "5", "--no-plots", "--no-progress", "--quiet"])
    assert code == 0, capsys.readouterr().err
    (run,) = (logs / "FrozenLake-v1").iterdir()
    assert (run / "summary.json").is_file()
    assert run.name.endswith("_s0") and "_replay-" in run.name and len(run.name) <= 120


def test_a_default_run_id_names_a_backends_path_by_its_stem(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 59 item 10: a backend given with a path is named by the path's stem (a run's transcripts by its run's
    folder, a model file without .gguf) in the run directory's default name, not by the whole path."""
    from llm_policy_gen.run.names import short_spec

    assert short_spec("llamacpp:/root/.cache/llm-policy-gen/models/SmolLM2-135M-Instruct.Q4_1.gguf") == \
        "llamacpp:SmolLM2-135M-Instruct.Q4_1"
    assert short_spec("openai:gpt-4o-mini") == "openai:gpt-4o-mini" and short_spec("offline") == "offline"
    run_folder = tmp_path / "deep" / "folders" / "my-recorded-run"
    run_folder.mkdir(parents=True)
    shutil.copy(RECORDED, run_folder / "transcripts.jsonl")
    logs = tmp_path / "logs"
    code = main(["train", "--env", "FrozenLake-v1", "--backend", f"replay:{run_folder / 'transcripts.jsonl'}",
                 "--iterations", "1", "--logs-dir", str(logs), "--heldout-episodes", "5", "--no-plots",
                 "--no-progress", "--quiet"])
    assert code == 0, capsys.readouterr().err
    (run,) = (logs / "FrozenLake-v1").iterdir()
    assert run.name.endswith("_replay-my-recorded-run_s0") and "deep" not in run.name, run.name
