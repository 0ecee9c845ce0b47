"""``plot`` (curves of runs, a run's table) and ``evaluate --gif``."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.patches import FancyArrow

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.discretize import BoxActions, BoxDiscretizer, DimSpec, DiscreteActions, DiscreteDiscretizer
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.spec import EnvSpec
from llm_policy_gen.plotting.figure import plt
from llm_policy_gen.plotting.table_figure import action_labels, grid_map, plot_policy, policy_figure
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.run import train
from llm_policy_gen.run.files import load_run_policy

PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def close_figures() -> object:
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    logs = tmp_path_factory.mktemp("logs")
    out = {}
    for env, seed in (("CartPole-v1", 0), ("CartPole-v1", 1), ("FrozenLake-v1.deterministic", 0)):
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
    for key in ("CartPole-v1/0", "FrozenLake-v1.deterministic/0"):
        out = tmp_path / f"{key.replace('/', '_')}.png"
        assert main(["plot", str(runs[key]), "--policy", "--out", str(out)]) == 0
        assert is_png(out)
    policy_file = runs["CartPole-v1/0"] / "best_policy.json"
    assert main(["plot", str(policy_file), "--policy", "--out", str(tmp_path / "file.png")]) == 0
    assert main(["plot", str(runs["CartPole-v1/0"]), str(runs["CartPole-v1/1"]), "--policy", "--out",
                 str(tmp_path / "two.png")]) == 2


def test_policy_loader_gives_the_run_spec(runs: dict[str, Path]) -> None:
    run = runs["FrozenLake-v1.deterministic/0"]
    policy, spec = load_run_policy(run)
    assert spec == get_spec("FrozenLake-v1.deterministic") and spec.kwargs["is_slippery"] is False
    # the kept table: the one of the last iteration the keeper accepted (its own policy file)
    summary = json.loads((run / "summary.json").read_text())
    kept = TablePolicy.load(run / "policies" / f"iter_{summary['best_iteration']:04d}.json")
    assert summary["best_iteration"] >= 1 and np.array_equal(policy.table, kept.table)
    assert policy.env_id == "FrozenLake-v1" and policy.env_kwargs == spec.kwargs


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
    assert main(["evaluate", str(runs["FrozenLake-v1.deterministic/0"]), "--episodes", "2", "--gif", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err  # issue 9, item 21
    frames = imageio.imread(out, index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[-1] in (3, 4)
    assert main(["evaluate", str(runs["FrozenLake-v1.deterministic/0"]), "--gif", str(tmp_path / "lake.mp4")]) == 2
    assert "must end with .gif" in capsys.readouterr().err


@pytest.mark.slow
def test_cartpole_gif_is_capped(runs: dict[str, Path], tmp_path: Path) -> None:
    imageio = pytest.importorskip("imageio.v3")
    from llm_policy_gen.plotting.gif import save_gif

    policy, spec = load_run_policy(runs["CartPole-v1/0"])
    assert spec is not None
    out = save_gif(policy, spec, tmp_path / "pole.gif", seed=3, frame_every=1, max_frames=20)
    assert 2 <= imageio.imread(out, index=None).shape[0] <= 21


# ----------------------------------------------------------------------------------------------- issue 9, item 24
def policy_of(env_id: str, table: np.ndarray | None = None) -> tuple[TablePolicy, EnvSpec]:
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    t = spec.default_table() if table is None else table
    return TablePolicy(env_id, obs, acts, np.asarray(t), {}, dict(spec.kwargs)), spec


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_blackjack_policy_uses_the_parts_names_and_one_panel_per_usable_ace(tmp_path: Path) -> None:
    policy, spec = policy_of("Blackjack-v1", np.random.default_rng(0).integers(0, 2, 704))
    policy.save(tmp_path / "bj.json")
    assert main(["plot", str(tmp_path / "bj.json"), "--policy", "--out", str(tmp_path / "bj.png")]) == 0
    width, height = png_size(tmp_path / "bj.png")
    assert height < 1.5 * width  # not a 420 x 8232 strip of 32 panels
    fig = policy_figure(policy, spec)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["player holds a usable ace = 0", "player holds a usable ace = 1"]
    assert panels[0].get_ylabel() == "player's current sum"
    assert panels[0].get_xlabel() == "value of the dealer's one showing card"
    assert [t.get_text() for t in panels[0].get_yticklabels()] == [str(v) for v in range(32)]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == [str(v) for v in range(11)]
    grid = policy.table.reshape(32, 11, 2)
    assert np.array_equal(panels[1].get_images()[0].get_array(), grid[:, :, 1])  # the action over sum x card
    assert "obs[" not in " ".join(t.get_text() for t in fig.legends[0].get_texts())


def test_swimmer_action_names_stay_distinguishable() -> None:
    """Swimmer's generic spec named its two torques "Torque applied on the first rotor" and "... second rotor",
    and every label read "Torque applied on the fir..."."""
    torques = BoxActions([-1.0, -1.0], [1.0, 1.0], 3, ["Torque applied on the first rotor",
                                                       "Torque applied on the second rotor"])
    labels = action_labels(torques)
    assert labels[0] == "0: first rotor=-1, second rotor=-1" and labels[5] == "5: first rotor=0, second rotor=1"
    obs = BoxDiscretizer([DimSpec(f"d{i}", -1.0, 1.0, 3) for i in range(8)])  # too many panels: state x action
    policy = TablePolicy("Swimmer-v5", obs, torques, np.full(obs.n_states, 4))
    ax = policy_figure(policy).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels and len(set(labels)) == 9
    swimmer, _ = policy_of("Swimmer-v5")
    short = action_labels(swimmer.actions)  # short names are kept whole
    assert len(set(short)) == 9 and all(" torque=" in x for x in short)


def test_cartpole_keeps_angle_by_angular_velocity_panels() -> None:
    policy, spec = policy_of("CartPole-v1")
    panels = policy_figure(policy, spec).axes
    assert len(panels) == 9 and panels[-1].get_xlabel() == "pole angular velocity"
    assert panels[0].get_ylabel() == "pole angle" and panels[0].get_title().startswith("cart position [-2.4, -0.8)")
    assert [t.get_text() for t in panels[0].get_xticklabels()][:2] == ["-2.5", "-1.5"]  # bin centres, not values


@pytest.mark.parametrize(("env_id", "cells", "legend"), [
    ("FrozenLake-v1", ["SFFF", "FHFH", "FFFH", "HFFG"], ["start", "goal", "hole"]),
    ("CliffWalking-v1", ["F" * 12, "F" * 12, "F" * 12, "S" + "C" * 10 + "G"], ["start", "goal", "cliff"]),
])
def test_grid_worlds_mark_start_goal_holes_and_cliff(env_id: str, cells: list[str], legend: list[str]) -> None:
    policy, spec = policy_of(env_id)
    assert grid_map(spec, spec.grid) == cells
    fig = policy_figure(policy, spec)
    ax = fig.axes[0]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == legend
    words = [t.get_text() for t in ax.texts]
    assert words.count("start") == 1 and words.count("goal") == 1
    assert words.count("cliff") == sum(row.count("C") for row in cells)
    assert words.count("hole") == sum(row.count("H") for row in cells)
    arrows = [p for p in ax.patches if isinstance(p, FancyArrow)]
    assert len(arrows) == sum(row.count("F") + row.count("S") for row in cells)  # none on holes, cliff or goal


# ----------------------------------------------------------------------------------------------- issue 9, item 16
@pytest.mark.slow
def test_gif_of_a_mujoco_task_without_a_display(tmp_path: Path) -> None:
    """No DISPLAY and no MUJOCO_GL: a headless OpenGL backend is chosen (EGL, else OSMesa) and the GIF is written;
    where neither library exists the command says, in one line, what to install."""
    imageio = pytest.importorskip("imageio.v3")
    policy, _ = policy_of("InvertedPendulum-v5")  # the do-nothing table falls within a few dozen steps
    policy.save(tmp_path / "pend.json")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL",
                                                            "PYOPENGL_PLATFORM")}
    env["LLM_POLICY_GEN_WORKERS"] = "1"
    out = tmp_path / "pend.gif"
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", "evaluate", str(tmp_path / "pend.json"),
                           "--episodes", "1", "--gif", str(out)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT)
    assert "Traceback" not in proc.stderr, proc.stderr
    if ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa"):
        assert proc.returncode == 0, proc.stderr
        assert f"wrote {out}" in proc.stderr
        frames = imageio.imread(out, index=None)
        assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.std() > 0  # drawn, not blank
    else:
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert "apt-get install libegl1" in proc.stderr


def test_gif_without_a_working_headless_backend_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from llm_policy_gen.plotting import gif

    policy, _ = policy_of("InvertedPendulum-v5")
    policy.save(tmp_path / "pend.json")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(gif, "HEADLESS_GL", (("no-such-gl", "libno-such-gl1"),))
    code = main(["evaluate", str(tmp_path / "pend.json"), "--episodes", "1", "--gif", str(tmp_path / "p.gif")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no headless backend works here (tried MUJOCO_GL=no-such-gl)" in err
    assert "apt-get install libno-such-gl1" in err and not (tmp_path / "p.gif").exists()
