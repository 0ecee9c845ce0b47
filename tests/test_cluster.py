"""``compare --executor ray`` on a simulated cluster with no shared disk between driver and tasks.

The cluster is Ray's own ``ray.cluster_utils.Cluster``: a head and two worker nodes in this machine, all on
127.0.0.1, with Ray's files in a private temporary folder (``RAY_TMPDIR``), so that no other Ray user on the machine
connects to it. The tests run a sweep on it and remove a node while runs are in flight, and check the provider limit
across tasks against a loopback OpenAI server. The first tests need no Ray: they check how a task's files reach the
driver.
"""

from __future__ import annotations

import csv
import importlib.util
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.tables import FillThenGo

from llm_policy_gen.cli import main
from llm_policy_gen.commands.compare import CompareConfig, run_compare
from llm_policy_gen.storage.locks import stops_as_interrupts
from llm_policy_gen.storage.runlog import append_jsonl, read_jsonl, rewrite_jsonl, write_json_atomic
from llm_policy_gen.sweep.ray import _connect
from llm_policy_gen.sweep.results import TIME_COLUMNS, read_results
from llm_policy_gen.sweep.sync import DirSync, apply_changes, pack_dir, unpack_dir

# pytest-xdist (`make test` runs `-n auto --dist loadgroup`): the tests that start Ray run on one worker, one local
# cluster at a time (test_compare's Ray sweep is in the same group).
pytestmark = pytest.mark.xdist_group("ray")

fake_openai = openai_server.fake_openai
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="ray is not installed (pip install 'llm-policy-gen[ray]')")
SMALL = {"heldout_episodes": 10, "train_episodes": 2}


def numbers(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


# ---------------------------------------------------------------------------------------------------- files
def test_a_task_hands_back_changes_that_rebuild_its_directory(tmp_path: Path) -> None:
    task, driver = tmp_path / "task", tmp_path / "driver"
    sync = DirSync(task)
    write_json_atomic(task / "config.json", {"seed": 0})
    append_jsonl(task / "events.jsonl", {"iteration": 1})
    (task / "policies").mkdir()
    (task / "policies" / "iter_0001.json").write_text("{}")
    (task / ".checkpoint.npz.123.tmp").write_bytes(b"half")  # an atomic write in progress is not handed over
    first = sync.changes()
    assert [c[0] for c in first] == ["write", "write", "write"]
    apply_changes(driver, first)

    (task / "checkpoint.npz").write_bytes(b"state 1")
    append_jsonl(task / "events.jsonl", {"iteration": 2})
    (task / "policies" / "iter_0001.json").unlink()
    second = sync.changes()
    assert second[0][:2] == ("write", "checkpoint.npz")  # the checkpoint first
    kinds = {c[1]: c[0] for c in second}
    assert kinds == {"checkpoint.npz": "write", "events.jsonl": "append", "policies/iter_0001.json": "delete"}
    appended = next(c for c in second if c[0] == "append")
    assert appended[2] == len(b'{"iteration":1}\n') and appended[3] == b'{"iteration":2}\n'
    apply_changes(driver, second)
    assert sync.changes() == []
    assert pack_dir(driver) == pack_dir(task)
    assert [e["iteration"] for e in read_jsonl(driver / "events.jsonl")] == [1, 2]

    # A JSONL file rewritten in a new file (a resume drops lines, then the run adds more) travels whole.
    rewrite_jsonl(task / "events.jsonl", [{"iteration": 1}, {"iteration": 2, "again": True}, {"iteration": 3}])
    write_json_atomic(task / "summary.json", {"ok": True})
    third = sync.changes()
    assert {c[1]: c[0] for c in third} == {"events.jsonl": "write", "summary.json": "write"}
    apply_changes(driver, third)
    assert pack_dir(driver) == pack_dir(task)


def test_changes_outside_the_run_directory_are_refused(tmp_path: Path) -> None:
    for rel in ("../escape.json", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="outside the run directory"):
            apply_changes(tmp_path, [("write", rel, 0, b"x")])
    with pytest.raises(RuntimeError, match="appended at byte 10"):
        apply_changes(tmp_path, [("append", "events.jsonl", 10, b"x")])
    unpack_dir(tmp_path / "run", {"config.json": b"{}", "policies/iter_0001.json": b"{}"})
    assert sorted(pack_dir(tmp_path / "run")) == ["config.json", "policies/iter_0001.json"]


def test_starting_ray_keeps_the_stop_handlers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local Ray node installs its own SIGTERM handler in the driver and leaves it there; the sweep puts its own
    (a stop handled as Ctrl-C) back at once, so a SIGTERM still ends the sweep with its files written."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    class LocalRay:  # ray.init's effect on the driver's signal handlers, without starting a node
        initialized = False

        def is_initialized(self) -> bool:
            return self.initialized

        def init(self, **kwargs: Any) -> None:
            signal.signal(signal.SIGTERM, lambda *_: None)
            self.initialized = True

    ray = LocalRay()
    with stops_as_interrupts():
        ours = signal.getsignal(signal.SIGTERM)
        assert _connect(ray, 1, tmp_path / "stage") is True and ray.initialized
        assert signal.getsignal(signal.SIGTERM) is ours


# ---------------------------------------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and two worker nodes of one CPU each, on 127.0.0.1.

    Ray's switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps the nodes and the driver on the loopback interface
    (else Ray binds to, and translates 127.0.0.1 into, the machine's routable address). It is set for this fixture
    only: in the environment the node processes inherit, and on Ray's constant, which this process read when it first
    imported ray (perhaps in another test).
    """
    pytest.importorskip("ray")
    folder = tempfile.mkdtemp(prefix="lpg-ray-", dir="/tmp")  # short: Ray's socket paths live below it
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        mp.setenv("RAY_TMPDIR", folder)
        # the head node, started in this process, installs Ray's SIGTERM handler here and leaves it after its
        # shutdown: put this process's own back, or a later test's SIGTERM would end the whole test session
        before = signal.getsignal(signal.SIGTERM)
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                          "include_dashboard": False})
        try:
            for _ in range(2):
                c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
            c.wait_for_nodes()
            yield c
        finally:
            c.shutdown()
            signal.signal(signal.SIGTERM, before)
            shutil.rmtree(folder, ignore_errors=True)


class NodeKiller(threading.Thread):
    """Removes the worker node of the first run seen in flight with ``after`` iterations already at the driver."""

    def __init__(self, cluster: Any, out: Path, after: int = 2, timeout: float = 180.0) -> None:
        super().__init__(daemon=True)
        self.cluster, self.out, self.after, self.timeout = cluster, out, after, timeout
        self.removed: dict[str, Any] | None = None

    def run(self) -> None:
        nodes = {n.node_id: n for n in self.cluster.worker_nodes}
        deadline = time.monotonic() + self.timeout
        while self.removed is None and time.monotonic() < deadline:
            time.sleep(0.05)
            log = self.out / "sweep.jsonl"
            events = read_jsonl(log) if log.is_file() else []
            done = {e["run"] for e in events if e["event"] == "done"}
            for e in events:
                if e["event"] != "started" or e["run"] in done or e["node"] not in nodes:
                    continue
                run = self.out / "runs" / "CartPole-v1" / e["run"]
                iterations = len(read_jsonl(run / "events.jsonl")) if (run / "events.jsonl").is_file() else 0
                if iterations >= self.after:
                    self.cluster.remove_node(nodes[e["node"]])
                    self.removed = {"run": e["run"], "node": e["node"], "iterations": iterations}
                    break


@pytest.mark.slow
@needs_ray
def test_the_provider_limit_holds_across_tasks_on_the_cluster(cluster: Any, fake_openai: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    gate = FillThenGo(3)  # held until 3 calls are in flight at once: no timing window
    fake_openai.responder = gate
    out = tmp_path / "cmp"
    rows = run_compare(CompareConfig(
        "CartPole-v1", ["openai:gpt-4.1-mini"], [0, 1, 2, 3], out,
        {**SMALL, "iterations": 1, "candidates": 4, "cache": False, "confirm_episodes": 0,
         "local_concurrency": 2},  # a loopback server is local: 2 calls of a run at once, 4 of two runs
        executor="ray", progress=False, max_concurrent_calls=3))
    assert [r.status for r in rows] == ["ok"] * 4
    assert len(fake_openai.bodies) == 16 and gate.total == 16 and gate.peak == 3
    key = openai_server.FAKE_KEY.encode()
    assert [p for p in out.rglob("*") if p.is_file() and key in p.read_bytes()] == []


@pytest.mark.slow
@needs_ray
def test_a_sweep_survives_losing_a_node_and_equals_the_local_one(cluster: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    config = tmp_path / "small.toml"
    config.write_text("heldout-episodes = 10\ntrain-episodes = 2\n")

    def compare(out: Path, *extra: str) -> int:
        return main(["compare", "--env", "CartPole-v1", "--backends", "offline,random,q-learning", "--seeds", "0-1",
                     "--iterations", "12", "--config", str(config), "--out", str(out), "--no-progress", *extra])

    out = tmp_path / "ray"
    killer = NodeKiller(cluster, out)
    killer.start()
    t0 = time.perf_counter()
    assert compare(out, "--executor", "ray") == 0, capsys.readouterr().err
    ray_s = time.perf_counter() - t0
    killer.join(timeout=5)
    assert killer.removed is not None, "no run was seen in flight on a worker node"
    assert [r.status for r in read_results(out / "results.csv")] == ["ok"] * 6

    events = read_jsonl(out / "sweep.jsonl")
    lost = [e for e in events if e["event"] == "lost"]
    assert killer.removed["run"] in {e["run"] for e in lost}
    for e in lost:  # each lost run started again, elsewhere, from the checkpoint the driver held
        again = [s for s in events if s["event"] == "started" and s["run"] == e["run"]
                 and s["attempt"] == e["attempt"] + 1]
        assert again and again[0]["node"] != killer.removed["node"]
    assert max(e["resume_after_iteration"] for e in lost) >= 1
    assert sum(e["event"] == "done" for e in events) == 6  # one result per run, none counted twice

    t0 = time.perf_counter()
    assert compare(tmp_path / "local") == 0
    local_s = time.perf_counter() - t0
    assert numbers(out / "results.csv") == numbers(tmp_path / "local" / "results.csv")
    print(f"ray sweep with a node lost after {killer.removed['iterations']} iterations of {killer.removed['run']}: "
          f"{ray_s:.1f} s; local sweep: {local_s:.1f} s")
