"""Torch state as arrays: a learner's parameters, its optimiser and the random streams, saved without pickle.

The run's checkpoint (:mod:`llm_policy_gen.run.checkpoint`) holds numpy arrays, numbers, strings, lists and dicts, and
loads them without running code; SB3's own ``save`` writes cloudpickled objects, which the run directory's threat
model forbids. These functions turn what decides a torch learner's next update into that form and back, exactly
(float32 tensors become float32 arrays, floats are written with ``repr``):

* :func:`module_state` -- a module's trainable parameters and its buffers, by name, less the frozen ones it names
  (the features table is rebuilt from the model at every start, a frozen backbone is the model's file);
* :func:`optimizer_state` -- an optimiser's moments per parameter (in the optimiser's order) and its groups'
  hyperparameters;
* :func:`rng_state` -- the process's random streams the learner draws from: Python's ``random``, numpy's global
  generator, torch's CPU generator (and CUDA's, once initialised).

Every ``load_*`` refuses a state that does not fit (another name, shape or count) with ``ValueError``.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

import numpy as np

__all__ = ["module_state", "load_module_state", "optimizer_state", "load_optimizer_state", "rng_state",
           "load_rng_state"]


def _array(t: Any) -> np.ndarray:
    return np.array(t.detach().cpu().numpy(), copy=True)


def module_state(module: Any, frozen: Collection[str] = ()) -> dict[str, np.ndarray]:
    """``module``'s parameters that require a gradient and its buffers, by name, less the names in ``frozen``."""
    out = {n: _array(p) for n, p in module.named_parameters() if p.requires_grad and n not in frozen}
    out.update({n: _array(b) for n, b in module.named_buffers() if n not in frozen})
    return out


def load_module_state(module: Any, state: dict[str, Any]) -> None:
    """Copy ``state``'s arrays into ``module``'s tensors of the same names, in place (an optimiser holding them
    keeps working); another set of names or a shape that differs raises ``ValueError``."""
    import torch

    own = dict(module.named_parameters())
    own.update(dict(module.named_buffers()))
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    differ = sorted((set(state) - set(own)) | (trainable - set(state)))
    if differ:
        raise ValueError(f"the learner's tensors differ from the saved ones ({', '.join(differ[:3])})")
    with torch.no_grad():
        for name, value in state.items():
            target = own[name]
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(target.shape):
                raise ValueError(f"tensor {name} has shape {tuple(target.shape)}, the saved one {arr.shape}")
            target.copy_(torch.from_numpy(np.array(arr, copy=True)).to(target.dtype))


def _plain(x: Any) -> Any:
    """Optimiser hyperparameters as JSON values (tuples to lists)."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def optimizer_state(optimizer: Any) -> dict[str, Any]:
    """``optimizer.state_dict()`` as arrays: ``state`` a list of each parameter's tensors (parameters without
    state yet: an empty dict), ``groups`` the parameter groups' hyperparameters."""
    sd = optimizer.state_dict()
    ids = [i for g in sd["param_groups"] for i in g["params"]]
    state = [{k: (_array(v) if hasattr(v, "detach") else v) for k, v in sd["state"].get(i, {}).items()} for i in ids]
    groups = [{k: _plain(v) for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    return {"state": state, "groups": groups}


def load_optimizer_state(optimizer: Any, saved: dict[str, Any]) -> None:
    """Back to ``saved`` (from :func:`optimizer_state`); another number of groups or parameters raises
    ``ValueError``."""
    import torch

    sd = optimizer.state_dict()
    ids = [i for g in sd["param_groups"] for i in g["params"]]
    if len(saved["groups"]) != len(sd["param_groups"]) or len(saved["state"]) != len(ids):
        raise ValueError(f"the optimiser has {len(sd['param_groups'])} groups and {len(ids)} parameters, the saved "
                         f"one {len(saved['groups'])} and {len(saved['state'])}")
    groups = []
    for g, s in zip(sd["param_groups"], saved["groups"], strict=True):
        groups.append({**{k: (tuple(v) if isinstance(g.get(k), tuple) else v) for k, v in s.items()},
                       "params": g["params"]})
    state = {i: {k: (torch.from_numpy(np.array(v, copy=True)) if isinstance(v, np.ndarray) else v)
                 for k, v in per.items()} for i, per in zip(ids, saved["state"], strict=True) if per}
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def rng_state() -> dict[str, Any]:
    """The random streams of this process that a learner draws from (see the module doc)."""
    import torch

    version, keys, gauss = random.getstate()
    _, mt, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]  # the legacy tuple form
    out: dict[str, Any] = {
        "python": {"version": int(version), "keys": np.asarray(keys, dtype=np.int64), "gauss": gauss},
        "numpy": {"keys": np.asarray(mt, dtype=np.uint32), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached": float(cached)},
        "torch": _array(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = [_array(s) for s in torch.cuda.get_rng_state_all()]
    return out


def load_rng_state(state: dict[str, Any]) -> None:
    """Back to ``state`` (from :func:`rng_state`)."""
    import torch

    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in np.asarray(py["keys"])), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(("MT19937", np.asarray(npy["keys"], dtype=np.uint32), int(npy["pos"]), int(npy["has_gauss"]),
                         float(npy["cached"])))
    torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], dtype=np.uint8).copy()))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.from_numpy(np.asarray(s, dtype=np.uint8).copy()) for s in state["cuda"]])
