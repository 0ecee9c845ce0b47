"""``plot`` (curves of runs, a run's table) and ``evaluate --gif``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.discretize import BoxDiscretizer, DimSpec, DiscreteActions, DiscreteDiscretizer
from llm_policy_gen.engine import train
from llm_policy_gen.figures import load_run_policy, plot_policy
from llm_policy_gen.policy import TablePolicy

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    logs = tmp_path_factory.mktemp("logs")
    out = {}
    for env, seed in (("CartPole-v1", 0), ("CartPole-v1", 1), ("FrozenLake-v1", 0)):
        cfg = TrainConfig(env_id=env, backend="offline", iterations=3, seed=seed, logs_dir=str(logs),
                          progress=False, plots=False, heldout_episodes=5)
        out[f"{env}/{seed}"] = train(cfg, log=lambda _m: None).run_dir
    return out


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG


def test_curves_of_several_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    a, b = runs["CartPole-v1/0"], runs["CartPole-v1/1"]
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "cmp.png")]) == 0
    assert is_png(tmp_path / "cmp.png")
    assert main(["plot", str(a), "--kind", "both", "--window", "2", "--out", str(tmp_path / "one.png")]) == 0
    assert is_png(tmp_path / "one-training.png") and is_png(tmp_path / "one-testing.png")
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "x.txt"], "bad --out 'x.txt'"),
    (["--window", "0", "--out", "x.png"], "bad --window 0"),
])
def test_bad_plot_options_exit_2(runs: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str],
                                 message: str) -> None:
    assert main(["plot", str(runs["CartPole-v1/0"]), *args]) == 2
    assert message in capsys.readouterr().err


def test_not_a_run_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path / "nope"), "--out", str(tmp_path / "a.png")]) == 2
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "a.png")]) == 2  # a folder without events
    assert main(["plot", str(tmp_path), "--policy", "--out", str(tmp_path / "a.png")]) == 2
    assert "no best_policy.json" in capsys.readouterr().err


def test_policy_of_cartpole_and_frozenlake(runs: dict[str, Path], tmp_path: Path) -> None:
    for key in ("CartPole-v1/0", "FrozenLake-v1/0"):
        out = tmp_path / f"{key.replace('/', '_')}.png"
        assert main(["plot", str(runs[key]), "--policy", "--out", str(out)]) == 0
        assert is_png(out)
    policy_file = runs["CartPole-v1/0"] / "best_policy.json"
    assert main(["plot", str(policy_file), "--policy", "--out", str(tmp_path / "file.png")]) == 0
    assert main(["plot", str(runs["CartPole-v1/0"]), str(runs["CartPole-v1/1"]), "--policy", "--out",
                 str(tmp_path / "two.png")]) == 2


def test_policy_loader_gives_the_run_spec(runs: dict[str, Path]) -> None:
    policy, spec = load_run_policy(runs["FrozenLake-v1/0"])
    assert policy.n_states == 16 and spec is not None and spec.kwargs["is_slippery"] is False


@pytest.mark.parametrize("kind", ["discrete", "one_dim", "many_panels", "many_actions"])
def test_generic_layouts(tmp_path: Path, kind: str) -> None:
    if kind == "discrete":
        obs: object = DiscreteDiscretizer(10)
        acts = DiscreteActions(3)
    elif kind == "one_dim":
        obs, acts = BoxDiscretizer([DimSpec("x", -1.0, 1.0, 7)]), DiscreteActions(2)
    elif kind == "many_panels":  # 10 x 10 leading panels: too many, drawn as a state x action image
        obs = BoxDiscretizer([DimSpec(f"d{i}", -1.0, 1.0, 10) for i in range(4)])
        acts = DiscreteActions(3)
    else:
        obs = BoxDiscretizer([DimSpec("a", -1.0, 1.0, 4), DimSpec("b", -1.0, 1.0, 3), DimSpec("c", 0.0, 1.0, 2)])
        acts = DiscreteActions(27)
    n = obs.n_states  # type: ignore[attr-defined]
    table = np.random.default_rng(0).integers(0, acts.n_actions, n)
    policy = TablePolicy("Test-v0", obs, acts, table)  # type: ignore[arg-type]
    assert is_png(plot_policy(policy, tmp_path / "p.png"))


def test_evaluate_gif(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    imageio = pytest.importorskip("imageio.v3")
    out = tmp_path / "lake.gif"
    assert main(["evaluate", str(runs["FrozenLake-v1/0"]), "--episodes", "2", "--gif", str(out)]) == 0
    frames = imageio.imread(out, index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[-1] in (3, 4)
    assert main(["evaluate", str(runs["FrozenLake-v1/0"]), "--gif", str(tmp_path / "lake.mp4")]) == 2
    assert "must end with .gif" in capsys.readouterr().err


@pytest.mark.slow
def test_cartpole_gif_is_capped(runs: dict[str, Path], tmp_path: Path) -> None:
    imageio = pytest.importorskip("imageio.v3")
    from llm_policy_gen.gif import save_gif

    policy, spec = load_run_policy(runs["CartPole-v1/0"])
    assert spec is not None
    out = save_gif(policy, spec, tmp_path / "pole.gif", seed=3, frame_every=1, max_frames=20)
    assert 2 <= imageio.imread(out, index=None).shape[0] <= 21
