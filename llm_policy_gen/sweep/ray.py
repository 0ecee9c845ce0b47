"""``compare --executor ray``: every run a Ray task, on a local instance or on a cluster with no shared disk.

Where things live:

* **Code.** The job's ``runtime_env`` ships this package and its prompt templates to every node (a ``working_dir``
  staged from the driver's copy), so a node needs Python, Ray and the package's dependencies, not the package, and
  every node runs the driver's code and prompts. The provider variables a run needs (key and base URL, as the
  driver has them) travel in its task's arguments, not through ``runtime_env``, which Ray's dashboard shows; so does
  the price table ``LLM_POLICY_GEN_PRICES`` names.
* **Files.** A task runs in a scratch folder on its node and never touches ``--out``. It is a streaming generator:
  at most every :data:`POLL_S` seconds it yields what changed in its run directory (:mod:`.sync`: the checkpoint
  first, then new lines of the JSONL files, new, rewritten and deleted files) and the driver writes that under
  ``--out`` at once. The driver's copy is at most one poll behind and always resumable: the engine's resume drops
  whatever is newer than the checkpoint and answers the recorded calls of the unfinished iteration from their record.
* **Node failures.** Tasks run with ``max_retries=0``. Ray's own retry would run a generator again from its first
  arguments (the run directory as it was when the task was submitted), and refuses a replay that yields a different
  number of objects. Instead, when the node or worker of a task dies, the driver gives back the call slots and
  budget reservations the attempt held and submits the run again with its run directory as the driver holds it, up
  to :data:`NODE_RETRIES` times; the new attempt, on a live node, resumes from that checkpoint (or starts afresh when
  there is none). A run's result is taken once, from the attempt that finished it.
* **Provider limits and the budget.** One :class:`~llm_policy_gen.sweep.limits.SweepLimits` actor, pinned to the
  driver's node, serves every task.

``sweep.jsonl`` in ``--out`` records each attempt: the node it started on, a lost node, the iteration a new attempt
resumes after, the end.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import UserError, missing_extra
from ..storage.locks import STOP_SIGNALS
from ..storage.runlog import write_bytes_atomic
from .limits import SweepLimits
from .sync import DirSync, apply_changes, pack_dir, resume_point, unpack_dir
from .task import Done, Note, RunTask, TaskResult, failed_result, run_one

__all__ = ["NODE_RETRIES", "POLL_S", "Job", "RayLimits", "run_job", "check_address", "execute_ray"]

NODE_RETRIES = 3
"""Times a run is submitted again after its node or worker died."""
POLL_S = 0.25
"""How often a task looks for changed files to hand back."""


# ---------------------------------------------------------------------------------------------------- the task
class RayLimits:
    """The sweep's :class:`~llm_policy_gen.sweep.limits.Limits` through its Ray actor (pickles into tasks)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @staticmethod
    def _get(ref: Any) -> Any:
        import ray

        return ray.get(ref)

    def try_acquire(self, key: str, holder: str) -> bool:
        return bool(self._get(self.handle.try_acquire.remote(key, holder)))

    def release(self, key: str, holder: str) -> None:
        self._get(self.handle.release.remote(key, holder))

    def start_delay(self, key: str) -> float:
        return float(self._get(self.handle.start_delay.remote(key)))

    def reserve(self, holder: str, estimate: float) -> bool:
        return bool(self._get(self.handle.reserve.remote(holder, estimate)))

    def settle(self, holder: str, estimate: float, actual: float) -> float:
        return float(self._get(self.handle.settle.remote(holder, estimate, actual)))

    def forget(self, holder: str) -> None:
        self._get(self.handle.forget.remote(holder))

    def refund(self, amount: float) -> None:
        self._get(self.handle.refund.remote(amount))

    def report(self) -> dict[str, Any]:
        return dict(self._get(self.handle.report.remote()))


@dataclass
class Job:
    """What one attempt of one run takes to a node."""

    task: RunTask
    holder: str
    """The attempt's name for the sweep's limits (``run_id#attempt``)."""
    limits: RayLimits
    files: dict[str, bytes] = field(default_factory=dict)
    """The run directory as the driver holds it (empty for a new run)."""
    prices: bytes | None = None
    env: dict[str, str | None] = field(default_factory=dict, repr=False)
    """Provider variables as the driver has them (None: unset)."""


def _set_environment(values: Mapping[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def _environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """``values`` in this process's environment (None: unset) for the duration, then the old values again."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(old)


def run_job(job: Job) -> Iterator[dict[str, Any]]:
    """The Ray task (a generator): run or resume one run in a scratch folder, yielding what changed on disk, then
    ``{"kind": "done", "result": ...}``."""
    import ray

    scratch = Path(tempfile.mkdtemp(prefix="llm-policy-gen-run-"))
    try:
        env = dict(job.env)
        if job.prices is not None:
            write_bytes_atomic(scratch / "prices.toml", job.prices)
            env["LLM_POLICY_GEN_PRICES"] = str(scratch / "prices.toml")
        task = replace(job.task, out=str(scratch))
        if job.files:
            unpack_dir(task.run_dir, job.files)
        sync = DirSync(task.run_dir)
        sync.mark()
        import llm_policy_gen

        yield {"kind": "started", "node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
               "pid": os.getpid(), "package": str(Path(llm_policy_gen.__file__).parent)}
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = run_one(task, job.limits, job.holder)
            except BaseException as exc:  # run_one keeps failures in its row; this is a last resort
                box["error"] = f"{type(exc).__name__}: {exc}"

        with _environment(env):
            thread = threading.Thread(target=work, name="llm-policy-gen-run", daemon=True)
            thread.start()
            while thread.is_alive():
                thread.join(POLL_S)
                changes = sync.changes()
                if changes:
                    yield {"kind": "files", "changes": changes}
        changes = sync.changes()
        if changes:
            yield {"kind": "files", "changes": changes}
        result: TaskResult = box.get("result") or failed_result(task, box.get("error", "no result"))
        yield {"kind": "done", "result": result}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- the driver
def _on_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _import_ray() -> Any:
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or _on_loopback(address):
        # A local instance, or a cluster on this machine's loopback interface, stays there: Ray would otherwise
        # bind, and translate 127.0.0.1 into, the machine's routable address (found by "connecting" to a public
        # one). The switch is read when ray is first imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise missing_extra("--executor ray needs ray", "ray") from None
    return ray


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a ``RAY_ADDRESS`` where nothing accepts a connection (``ray.init`` would wait there for minutes,
    repeating a warning); ``auto`` and ``local`` are Ray's own words and are left to it."""
    if address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    hostport = address.removeprefix("ray://").split("/", 1)[0]
    host, sep, port_text = hostport.rpartition(":")
    if not sep:
        host, port_text = hostport, "10001" if client else "6379"
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(f"RAY_ADDRESS {address!r}: the port {port_text!r} is not a number") from None
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise UserError(f"RAY_ADDRESS {address!r}: nothing answers at {host}:{port} ({exc.strerror or exc}); start "
                        "the cluster there (ray start --head) or unset RAY_ADDRESS for a local instance") from None


def _connect(ray: Any, workers: int | None, stage: Path) -> bool:
    """Join ``RAY_ADDRESS``, else start a local instance, with the package staged in ``stage`` as the job's
    ``working_dir``; True when this call connected (and must disconnect). A caller that initialised Ray itself
    brings its own runtime_env."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        check_address(address)
    kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False,
                              "runtime_env": {"working_dir": str(stage_package(stage))}}
    if address is None:
        # "local": a new instance even when /tmp/ray/ray_current_cluster names another one.
        kwargs.update(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                      _node_ip_address="127.0.0.1")
    with _stops_kept():
        ray.init(address=address or "local", **kwargs)
    return True


@contextmanager
def _stops_kept() -> Iterator[None]:
    """Keep this process's SIGTERM and SIGHUP handlers across ``ray.init``: a local Ray node installs its own SIGTERM
    handler in the driver (it kills the node's processes and exits) and leaves it there after ``ray.shutdown``, so
    a SIGTERM would end the sweep without its closing files, and every later run of this process too. Ours (a stop
    handled as Ctrl-C) is put back at once; Ray's own exit hook still ends the node's processes."""
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if main else {}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


def stage_package(folder: Path) -> Path:
    """``folder`` with a copy of this package (its prompt templates are package data inside it): the job's
    ``working_dir``. Ray uploads local folders only for
    ``ray.init``; a ``working_dir`` also keeps Ray from putting the driver's current folder, and whatever copy of the
    package it holds, first on the workers' path."""
    import llm_policy_gen

    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    shutil.copytree(Path(llm_policy_gen.__file__).resolve().parent, folder / "llm_policy_gen", ignore=skip)
    return folder


def _provider_env(task: RunTask) -> dict[str, str | None]:
    """The run's provider variables as the driver has them; the prompts are the shipped ones."""
    from ..backends import parse_backend_spec, provider_variables

    names = provider_variables(parse_backend_spec(task.backend_spec)[0]) if task.backend_spec else ()
    return {"LLM_POLICY_GEN_PROMPTS": None, **{n: os.environ.get(n) for n in names}}


def _price_file() -> bytes | None:
    path = os.environ.get("LLM_POLICY_GEN_PRICES")
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read price file {path} (LLM_POLICY_GEN_PRICES): {exc.strerror}") from None


@dataclass
class _Attempt:
    task: RunTask
    number: int
    holder: str
    done: bool = False


def execute_ray(tasks: Sequence[RunTask], workers: int | None, on_done: Done, limits: Mapping[str, Any],
                note: Note) -> dict[str, Any]:
    """Run ``tasks`` as Ray tasks (see the module docstring); returns the limits' report."""
    ray = _import_ray()
    from ray.exceptions import RayError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    prices = _price_file()
    stage = Path(tempfile.mkdtemp(prefix="llm-policy-gen-ship-"))
    attempts: dict[Any, _Attempt] = {}
    started = False
    try:
        started = _connect(ray, workers, stage)
        actor = ray.remote(SweepLimits).options(
            num_cpus=0, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
        ).remote(**limits)
        shared = RayLimits(actor)
        remote = ray.remote(run_job).options(num_cpus=1, max_retries=0)

        def submit(task: RunTask, number: int) -> None:
            holder = f"{task.run_id}#{number}"
            files = pack_dir(task.run_dir) if task.run_dir.is_dir() else {}
            job = Job(task, holder, shared, files, prices, _provider_env(task))
            attempts[remote.remote(job)] = _Attempt(task, number, holder)

        def lost(att: _Attempt, exc: BaseException) -> None:
            shared.forget(att.holder)
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            if isinstance(exc, RayTaskError) or att.number > NODE_RETRIES:
                note({"event": "failed", "run": att.task.run_id, "attempt": att.number, "error": why})
                on_done(att.task, failed_result(att.task, f"attempt {att.number} lost: {why}"))
                return
            after, recorded_cost = resume_point(att.task.run_dir)
            shared.refund(recorded_cost)
            note({"event": "lost", "run": att.task.run_id, "attempt": att.number, "error": why,
                  "resume_after_iteration": after})
            submit(att.task, att.number + 1)

        for t in tasks:
            submit(t, 1)
        while attempts:
            ready, _ = ray.wait(list(attempts), num_returns=1, timeout=5.0)
            for gen in ready:
                att = attempts[gen]
                try:
                    msg = ray.get(next(gen))
                except StopIteration:
                    del attempts[gen]
                    if not att.done:
                        lost(att, RuntimeError("the task ended without a result"))
                    continue
                except RayError as exc:  # the node or the worker died, or an object went with it
                    del attempts[gen]
                    if not att.done:
                        lost(att, exc)
                    continue
                if msg["kind"] == "files":
                    apply_changes(att.task.run_dir, msg["changes"])
                elif msg["kind"] == "started":
                    note({"event": "started", "run": att.task.run_id, "attempt": att.number,
                          **{k: msg[k] for k in ("node", "host", "pid", "package")}})
                elif msg["kind"] == "done":
                    att.done = True
                    note({"event": "done", "run": att.task.run_id, "attempt": att.number,
                          "status": msg["result"].row.status})
                    on_done(att.task, msg["result"])
        return shared.report()
    finally:
        for gen in attempts:
            try:
                ray.cancel(gen, force=True)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        if started:
            ray.shutdown()
        shutil.rmtree(stage, ignore_errors=True)
