"""Module and Parameter: how layers own their weights, and how a model is saved and restored.

A ``Module`` registers, by plain attribute assignment, each ``Parameter`` and each
sub-``Module`` it is given, in order.  From that registry come ``parameters()``,
``state_dict()`` (name -> tensor, names joined with dots: ``transformer.h.0.attn.c_attn.weight``),
``load_state_dict``, ``train()``/``eval()``, ``to(device)`` and the printed tree.
"""
from __future__ import annotations

import collections

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Tensor


class Parameter(Tensor):
    """A tensor that is a learnable weight of a Module: it requires grad and is registered when assigned."""

    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        source = data if isinstance(data, Tensor) else Tensor(np.zeros(0, np.float32) if data is None else data)
        self.data, self.device, self.grad, self._ctx = source.data, source.device, None, None
        self.requires_grad = False
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of every layer and model; subclasses define ``forward``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        kind = self._parameters if isinstance(value, Parameter) else self._modules if isinstance(value, Module) \
            else None
        if kind is None and name in self._buffers and (value is None or isinstance(value, Tensor)):
            kind = self._buffers          # as in PyTorch, a tensor assigned to a buffer's name updates the buffer
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not kind:
                registry.pop(name, None)
        if kind is None:
            object.__setattr__(self, name, value)
        else:
            kind[name] = value            # replacing keeps the registration order (weight tying relies on it)
            self.__dict__.pop(name, None)

    def __getattr__(self, name):
        # Only called when normal lookup fails: look in the registries.
        for registry in ("_parameters", "_buffers", "_modules"):
            found = self.__dict__.get(registry, {})
            if name in found:
                return found[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                return
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor, persistent: bool = True) -> None:
        """A tensor that is state but not a parameter (saved in state_dict when persistent)."""
        self._buffers[name] = tensor
        non_persistent = self.__dict__.setdefault("_non_persistent", set())
        (non_persistent.discard if persistent else non_persistent.add)(name)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ------------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = "", memo=None):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def _named_tensors(self, registry: str, remove_duplicate: bool):
        seen = set()
        for module_name, module in self.named_modules():
            for name, t in getattr(module, registry).items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{module_name}.{name}" if module_name else name), t

    def named_parameters(self, remove_duplicate: bool = True):
        """(name, parameter) pairs in registration order; a shared parameter appears once."""
        return self._named_tensors("_parameters", remove_duplicate)

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def named_buffers(self):
        return self._named_tensors("_buffers", True)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------ state
    def state_dict(self, *, prefix: str = "") -> "collections.OrderedDict[str, Tensor]":
        """Every parameter and persistent buffer by name, tied ones under each of their names.

        PyTorch's order: a module's own parameters, then its own buffers, then each child's entries.
        """
        state = collections.OrderedDict()
        skip = self.__dict__.get("_non_persistent", set())
        for name, t in list(self._parameters.items()) + list(self._buffers.items()):
            if t is not None and name not in skip:
                state[prefix + name] = t.detach()
        for name, child in self._modules.items():
            state.update(child.state_dict(prefix=f"{prefix}{name}."))
        return state

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values into this module's tensors (in place, so optimizers and ties keep working).

        strict=True: a missing or unexpected key is an error naming it; a wrong shape always is.
        """
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                           f"unexpected keys {unexpected}")
        for name, target in own.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            value_shape = tuple(value.shape)
            if value_shape != target.shape:
                raise ValueError(f"load_state_dict for {type(self).__name__}: '{name}' has shape {value_shape} "
                                 f"in the state dict but {target.shape} in the model")
            array = value.data if isinstance(value, Tensor) else np.asarray(value)
            target.data[...] = devices.move(array, target.device).astype(target.dtype, copy=False)
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ modes and placement
    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data[...] = 0

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self, target) -> "Module":
        """Move every parameter and buffer to a device, or cast the floating ones to a dtype (integer
        buffers keep theirs, as in PyTorch), in place; tied parameters stay tied."""
        casting = not isinstance(target, str)
        for t in list(self.parameters()) + [b for _, b in self.named_buffers()]:
            if casting and not t.is_floating_point():
                continue
            moved = t.detach().to(target)
            t.data, t.device = moved.data, moved.device
            if t.grad is not None:
                grad = t.grad.to(target)
                t.grad = grad
        return self

    def float(self) -> "Module":
        return self.to(dtypes.float32)

    def half(self) -> "Module":
        return self.to(dtypes.float16)

    def bfloat16(self) -> "Module":
        return self.to(dtypes.bfloat16)

    def apply(self, fn) -> "Module":
        for m in self.modules():
            fn(m)
        return self

    # ------------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


# ----------------------------------------------------------------------------- containers
class Sequential(Module):
    """Modules applied one after the other."""

    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def __getitem__(self, i):
        modules = list(self._modules.values())
        return Sequential(*modules[i]) if isinstance(i, slice) else modules[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        modules = list(self._modules.values())
        return ModuleList(modules[i]) if isinstance(i, slice) else modules[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of named modules, registered under their keys."""

    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            setattr(self, name, m)

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __setitem__(self, name: str, module: Module):
        setattr(self, name, module)

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()
