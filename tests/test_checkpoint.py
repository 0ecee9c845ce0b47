"""Checkpoints: nested state with numpy arrays, exact floats, NaN, big ints and None survive a save and a load."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_policy_gen.config import TrainConfig
from llm_policy_gen.errors import UserError
from llm_policy_gen.run import train
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint


def state() -> dict[str, Any]:
    rng = np.random.default_rng(12345)
    rng.random(7)  # a state that is not the initial one
    return {
        "iteration": 3,
        "none": None,
        "flag": True,
        "text": "naïve — ünïcode",
        "floats": [0.1 + 0.2, 1e-310, -0.0, float("inf"), -float("inf"), 1 / 3],
        "nan": float("nan"),
        "big": 2**100 + 1,
        "rng": rng.bit_generator.state,
        "numpy_scalars": {"i": np.int64(-5), "f": np.float32(0.1), "b": np.bool_(True)},
        "arrays": {
            "i8": np.array([-128, 0, 127], dtype=np.int8),
            "u64": np.array([0, 2**64 - 1], dtype=np.uint64),
            "f32": np.array([np.nan, 1.5, -np.inf], dtype=np.float32),
            "f64": rng.normal(size=(3, 4)),
            "bool": np.array([True, False]),
            "empty": np.zeros((0, 2), dtype=np.int64),
            "text": np.array(["a", "bc"]),
        },
        "nested": [{"a": [np.arange(3), None, {"deep": np.eye(2)}]}, (1, 2)],
    }


def same(a: Any, b: Any) -> bool:
    """Exact equality, NaN equal to NaN, dtypes and shapes included; tuples come back as lists."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.generic):
        return same(a.item(), b)
    if isinstance(a, float):
        return isinstance(b, float) and (math.isnan(a) and math.isnan(b) or (a == b and math.copysign(1, a)
                                                                              == math.copysign(1, b)))
    return type(a) is type(b) and a == b


def test_round_trip_is_exact(tmp_path: Path) -> None:
    s = state()
    save_checkpoint(tmp_path / "checkpoint.npz", s)
    back = load_checkpoint(tmp_path / "checkpoint.npz")
    assert same(s, back)
    assert back["big"] == 2**100 + 1 and back["numpy_scalars"]["f"] == float(np.float32(0.1))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]  # no temporary file left


def test_a_restored_generator_draws_the_same_numbers(tmp_path: Path) -> None:
    rng = np.random.default_rng([3, 7])
    rng.integers(0, 10, 5)
    save_checkpoint(tmp_path / "c.npz", {"rng": rng.bit_generator.state})
    other = np.random.default_rng(0)
    other.bit_generator.state = load_checkpoint(tmp_path / "c.npz")["rng"]
    assert np.array_equal(other.random(10), rng.random(10))


def test_saving_again_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    save_checkpoint(path, {"iteration": 1, "a": np.arange(5)})
    save_checkpoint(path, {"iteration": 2})
    assert load_checkpoint(path) == {"iteration": 2}


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.0])
def test_a_truncated_file_is_a_user_error(tmp_path: Path, cut: float) -> None:
    path = tmp_path / "c.npz"
    save_checkpoint(path, state())
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(UserError, match="cannot read checkpoint"):
        load_checkpoint(path)


def test_a_missing_or_foreign_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "none.npz")
    np.savez(tmp_path / "other.npz", x=np.arange(3))  # an archive without a state
    with pytest.raises(UserError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "other.npz")


def test_an_object_array_is_refused_when_saved_not_when_loaded(tmp_path: Path) -> None:
    with pytest.raises((UserError, ValueError, TypeError)):
        save_checkpoint(tmp_path / "c.npz", {"ragged": np.array([[1], [1, 2]], dtype=object)})


def test_a_runs_checkpoint_holds_its_state(tmp_path: Path) -> None:
    cfg = TrainConfig(env_id="FrozenLake-v1", backend="random", iterations=2, logs_dir=str(tmp_path), plots=False,
                      progress=False, heldout_episodes=3, candidates=2)
    res = train(cfg, log=lambda _m: None)
    s = load_checkpoint(res.run_dir / "checkpoint.npz")
    assert s["iteration"] == 2 and s["episodes_total"] == res.summary["episodes_total"]
    assert s["keeper"]["best_table"].dtype == np.int64 and s["keeper"]["best_table"].shape == (16,)
    assert s["memory"]["added"] == res.summary["episodes_total"]
    assert set(s["rng"]) >= {"bit_generator", "state"}
