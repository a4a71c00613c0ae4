"""The Optimizer base: parameter groups, per-parameter state, and saving both.

Each group is a dict holding its "params" and its hyper-parameters (lr, weight_decay, ...),
so one optimizer can treat, say, matrices and biases differently. ``state`` maps each
parameter to what its update rule remembers (momentum buffers, Adam's moments, the step).
Updates change ``param.data`` in place, so every reference to a parameter (a tied weight,
a Module) sees the new values.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from ..tensor import Tensor


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.param_groups = []
        self.state = {}                       # id(param) -> dict of arrays and numbers
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for group in (params if isinstance(params[0], dict) else [{"params": params}]):
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            # As in PyTorch, a leaf that does not require grad is allowed (a frozen layer passed along
            # with model.parameters()): it never gets a gradient, so step() skips it.
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: can only optimise Tensors, got a {type(p).__name__}")
            if p.grad_fn is not None:
                raise ValueError(f"{type(self).__name__}: can only optimise leaf tensors, not results of ops")
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            # PyTorch warns; it would update that parameter twice per step
            raise ValueError(f"{type(self).__name__}: a parameter appears more than once in a group")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError(f"{type(self).__name__}: a parameter appears in more than one group")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0

    def step(self) -> None:
        """Update every parameter that has a gradient, one group at a time: what update_group takes on as a
        whole, then the rest one by one with update()."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.shape != p.shape:
                    raise RuntimeError(f"{type(self).__name__}: gradient shape {p.grad.shape} does not match "
                                       f"parameter shape {p.shape}")
            for p in self.update_group(params, group):
                with devices.use(p.device):      # state and update on the parameter's GPU
                    self.update(p, p.grad.data, self.state.setdefault(id(p), {}), group)

    def update_group(self, params: list, group: dict) -> list:
        """Update some of `params` (the group's parameters that have a gradient) together, and return the ones
        left for update(). The hook of optimizers with multi-tensor kernels (Adam, AdamW: one launch for a whole
        group); the base class leaves them all to update()."""
        return params

    def update(self, param: Tensor, grad, state: dict, group: dict) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ saving and resuming
    def state_dict(self) -> dict:
        """Parameters are referred to by their position across all groups (0, 1, ...), as in PyTorch.
        State arrays come back as CPU Tensors so the dict can be saved with tg.save."""
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in self.state:
                    state[index[id(p)]] = {k: Tensor(v, device="cpu") if not np.isscalar(v) else v
                                           for k, v in self.state[id(p)].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)):
            raise ValueError(f"{type(self).__name__}.load_state_dict: the saved groups "
                             f"{[len(g['params']) for g in groups]} do not match this optimizer's "
                             f"{[len(g['params']) for g in self.param_groups]}")
        params = [p for g in self.param_groups for p in g["params"]]
        for mine, saved in zip(self.param_groups, groups):
            for key, value in saved.items():
                if key != "params":
                    mine[key] = tuple(value) if isinstance(mine.get(key), tuple) else value
        self.state = {}
        for key, entries in state_dict["state"].items():     # keys may be "0" after a JSON round trip
            p = params[int(key)]
            self.state[id(p)] = {k: devices.move(v.data if isinstance(v, Tensor) else np.asarray(v), p.device)
                                 if not np.isscalar(v) else v for k, v in entries.items()}
