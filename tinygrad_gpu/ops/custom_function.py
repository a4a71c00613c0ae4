"""Custom ops written the PyTorch way: a ``Function`` subclass with static methods on Tensors.

    class Square(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            x, = ctx.saved_tensors
            return 2 * x * grad

    y = Square.apply(x)

``forward`` runs with recording off (as PyTorch runs it under no_grad), so the op is one node of
the graph whatever Tensor ops compute it. ``backward`` runs in the engine like any other op's, with
recording on when the graph of the backward is wanted (``create_graph=True``), so a backward written
with Tensor ops can be differentiated again. PyTorch 2's split form works too: ``forward(*args)``
without ctx, and ``setup_context(ctx, inputs, output)`` to fill ctx.

``ctx`` is the graph node itself: an instance of a ``Function`` subclass made once per custom class
(``prepare``, called when the class is created), whose ``backward(grad)`` is what the engine calls.
It checks what the user's backward returns (one gradient per forward argument, each of its input's
shape and device, cast to its dtype) and hands the engine one gradient per tensor argument.

One output carries a gradient: each node of this engine has one output, so a forward may return a
tuple, but all its Tensors except one must be non-differentiable (integer, or marked with
``ctx.mark_non_differentiable``); backward still receives one gradient per output, zeros for those
(None for values that are not Tensors), as in PyTorch.

Our own ops (``ops/*.py``) use the array-level form instead: ``forward`` an instance method that
computes on arrays. It records less and runs faster; ``Function.__init_subclass__`` tells the two
apart once per class, so our ops pay nothing for this module.
"""
from __future__ import annotations

import contextlib
import inspect

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Function, Tensor, _GradMode, set_grad_enabled

_THE_OUTPUT = object()      # stands for the output among the saved tensors: no cycle node -> output -> node


def uses_pytorch_form(cls) -> bool:
    """Does this Function subclass define forward as a staticmethod (PyTorch's form)?"""
    return isinstance(inspect.getattr_static(cls, "forward", None), staticmethod)


def prepare(cls) -> None:
    """Once per PyTorch-form class, at its creation: its apply, and the class of its graph nodes (its ctx)."""
    if "apply" not in cls.__dict__:
        cls.apply = classmethod(apply)
    cls._forward_takes_ctx = getattr(cls, "setup_context", None) is None   # PyTorch 2's split form has one
    cls._node_class = type(cls.__name__, (FunctionCtx,), {"function": cls, "__module__": cls.__module__})


def check_our_form(cls) -> None:
    """An array-level Function with a staticmethod backward would be called without its ctx: say so now."""
    if isinstance(inspect.getattr_static(cls, "backward", None), staticmethod):
        raise TypeError(f"{cls.__qualname__}: backward is a @staticmethod but forward is not; write both as "
                        "@staticmethod (PyTorch's form: forward(ctx, *args) on Tensors) or neither (the array "
                        "form of tinygrad_gpu/ops)")


def _is_float(t: Tensor) -> bool:
    return t.dtype.kind == "f" or t.dtype == dtypes.bfloat16


def apply(cls, *args, **kwargs):
    """Run forward(ctx, *args) without recording and link its output to a node whose backward is cls.backward."""
    ctx = cls._node_class()
    # As PyTorch: keywords and defaults become positional arguments (inputs), in forward's order.
    leading = (ctx,) if cls._forward_takes_ctx else ()
    bound = inspect.signature(cls.forward).bind(*leading, *args, **kwargs)
    bound.apply_defaults()
    args, kwargs = bound.args[len(leading):], bound.kwargs
    for name, value in kwargs.items():
        if isinstance(value, Tensor):
            raise TypeError(f"{cls.__qualname__}.apply: the tensor {name}= goes to a keyword-only parameter of "
                            "forward, where it would get no gradient; make it a positional parameter")
    positions = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
    tensors = [args[i] for i in positions]
    for t in tensors[1:]:
        if t.device != tensors[0].device:
            raise RuntimeError(f"{cls.__qualname__}: expected all tensors on the same device, got "
                               f"{tensors[0].device} and {t.device}; move one with .to({tensors[0].device!r})")
    grad_enabled = _GradMode.enabled
    ctx.needs_input_grad = tuple(grad_enabled and isinstance(a, Tensor) and a.requires_grad for a in args)
    ctx.recording = any(ctx.needs_input_grad)
    ctx.device = tensors[0].device if tensors else None
    on_device = devices.use(ctx.device) if tensors else contextlib.nullcontext()
    with set_grad_enabled(False), on_device:     # PyTorch, too, runs forward under no_grad
        if cls._forward_takes_ctx:
            result = cls.forward(ctx, *args, **kwargs)
        else:                                   # PyTorch 2's split form: forward(*args), then setup_context
            result = cls.forward(*args, **kwargs)
            cls.setup_context(ctx, args, result)
    single = isinstance(result, Tensor)
    if not single and not isinstance(result, tuple):
        raise TypeError(f"{cls.__qualname__}.forward returned {type(result).__name__}; it must return a Tensor "
                        "(or a tuple of them). Compute the result with Tensor ops (e.g. x * x), or wrap an array "
                        "with tg.tensor(array, device=x.device)")
    outputs = (result,) if single else result
    marked = ctx.__dict__.pop("_non_differentiable", ())
    differentiable = [k for k, o in enumerate(outputs)
                      if isinstance(o, Tensor) and _is_float(o) and id(o) not in marked]
    if not ctx.recording or not differentiable:
        return result
    if len(differentiable) > 1:
        raise RuntimeError(
            f"{cls.__qualname__}.forward returned {len(differentiable)} outputs that carry a gradient (outputs "
            f"{', '.join(map(str, differentiable))}), but each node of tinygrad_gpu's graph has one output. Mark "
            "all but one with ctx.mark_non_differentiable(...), write one Function per output, or return them "
            "joined in one Tensor (tg.cat of flattened outputs) and split that after apply")
    index = differentiable[0]
    out = outputs[index]
    ctx.next_nodes = tuple(t._node() for t in tensors)
    ctx.sequence_nr, Function.recorded = Function.recorded, Function.recorded + 1
    ctx.input_shapes = tuple(t.shape for t in tensors)
    ctx.input_dtypes = tuple(t.data.dtype for t in tensors)
    ctx.freed = False
    ctx._positions, ctx._n_args = positions, len(args)
    saved = ctx.__dict__.get("_saved")
    if saved and any(t is out for t in saved) and not any(t is out for t in tensors):
        # a saved output: backward gets it linked to this node (Function.output), as PyTorch does
        ctx._saved = tuple(_THE_OUTPUT if t is out else t for t in saved)
        ctx.out_data, ctx.out_device = out.data, out.device
    wrapped = Tensor._wrap(out.data, out.device, requires_grad=True, ctx=ctx)
    if single:
        return wrapped
    ctx._output_index = index
    ctx._other_outputs = tuple((o.shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outputs)
    return outputs[:index] + (wrapped,) + outputs[index + 1:]


class FunctionCtx(Function):
    """The graph node of one call of a PyTorch-form Function, and the ctx its forward and backward receive.
    ``prepare`` makes one subclass per custom class, named after it (so its repr is <SquareBackward>) and
    pointing at it (``function``)."""

    function = None             # the user's Function subclass
    _output_index = None        # which output carries the gradient, when forward returned a tuple
    output = None               # free for forward's own use (ctx.output = ...); a saved output is kept in _saved
    materialize_grads = True    # zeros (not None) for the outputs that carry no gradient, as in PyTorch
    freed = False

    def save_for_backward(self, *tensors) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{self.function.__qualname__}: save_for_backward saves Tensors (or None), but "
                                f"argument {i} is {type(t).__name__}; keep other values as attributes of ctx "
                                "(ctx.alpha = alpha)")
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self.freed:
            raise RuntimeError(f"{self.function.__qualname__}: the tensors saved for backward have been freed by a "
                               "backward that went through this graph already; pass retain_graph=True to the "
                               "first backward() if you need to backward twice")
        saved = self.__dict__.get("_saved", ())
        return tuple(Function.output.fget(self) if t is _THE_OUTPUT else t for t in saved)

    def mark_non_differentiable(self, *outputs) -> None:
        self._non_differentiable = {id(t) for t in outputs}

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        raise RuntimeError(f"{self.function.__qualname__}: mark_dirty is for ops that modify their inputs in place; "
                           "tinygrad_gpu has no in-place tensor ops, so return a new tensor instead")

    def release(self) -> None:
        """Drop the saved tensors (and the output's array), keep the attributes forward set on ctx: a second
        backward may go through a node that saved nothing, as in PyTorch."""
        saved = self.__dict__.pop("_saved", None)
        self.__dict__.pop("out_data", None)
        self.freed = self.freed or bool(saved)

    def backward(self, grad: Tensor) -> tuple:
        """What the engine calls: the user's backward, given one gradient per output, checked; one gradient per
        tensor argument."""
        fn = self.function
        if self._output_index is None:
            grads = (grad,)
        else:
            grads = tuple(grad if k == self._output_index else self._zeros(meta)
                          for k, meta in enumerate(self._other_outputs))
        user_backward = getattr(fn, "backward", None)
        if user_backward is None:
            raise NotImplementedError(f"{fn.__qualname__} defines no backward; add "
                                      "@staticmethod def backward(ctx, grad) returning one gradient per forward "
                                      "argument")
        return self._checked(user_backward(self, *grads))

    def _zeros(self, meta):
        if meta is None or not self.materialize_grads:
            return None
        shape, dtype, device = meta
        with devices.use(device):
            return Tensor._wrap(devices.array_module(device).zeros(shape, dtype=dtype), device)

    def _checked(self, result) -> tuple:
        name = self.function.__qualname__
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(result) != self._n_args:
            if len(result) < self._n_args or any(g is not None for g in result[self._n_args:]):
                raise RuntimeError(self._count_message(len(result)))
            result = result[:self._n_args]             # extra Nones are allowed, as in PyTorch
        if len(self._positions) != self._n_args:
            for k, g in enumerate(result):
                if g is not None and k not in self._positions:
                    raise RuntimeError(f"{name}.backward returned a gradient for argument {k}, which is not a "
                                       "Tensor; return None in its place")
        grads = []
        for k, shape, dtype, node in zip(self._positions, self.input_shapes, self.input_dtypes, self.next_nodes):
            g = result[k]
            if g is None or node is None:             # none, or for an input that needs none: dropped
                grads.append(None)
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"{name}.backward returned {type(g).__name__} for argument {k}; return a Tensor "
                                "(computed with Tensor ops from grad and ctx.saved_tensors) or None")
            if g.shape != shape and not _sums_back_to(g.shape, shape):
                raise RuntimeError(f"{name}.backward returned a gradient of shape {tuple(g.shape)} for argument {k}, "
                                   f"whose shape is {tuple(shape)}; return a gradient of the argument's shape (or "
                                   "of a shape it broadcasts to: that is summed back to it)")
            if g.device != self.device:
                raise RuntimeError(f"{name}.backward returned a gradient on {g.device} for argument {k}, which is "
                                   f"on {self.device}; move it with .to({self.device!r})")
            if g.dtype != dtype:                       # as PyTorch: the gradient takes its input's dtype
                if not _is_float(g):
                    raise TypeError(f"{name}.backward returned a {g.dtype} gradient for argument {k} ({dtype}); "
                                    "gradients are floating point")
                g = g.to(dtype=dtype)
            grads.append(g)
        return tuple(grads)

    def _count_message(self, got: int) -> str:
        name = self.function.__qualname__
        kinds = ["Tensor" if k in self._positions else "non-tensor" for k in range(self._n_args)]
        example = ", ".join(f"grad_{k}" if k in self._positions else "None" for k in range(self._n_args))
        return (f"{name}.backward returned {got} gradient{'s' if got != 1 else ''}, but forward took {self._n_args} "
                f"argument{'s' if self._n_args != 1 else ''} ({', '.join(kinds)}); return one gradient per forward "
                f"argument, in order, with None for non-tensor arguments and inputs that need no gradient, "
                f"e.g. `return {example}`")


def _sums_back_to(grad_shape: tuple, shape: tuple) -> bool:
    """Can a gradient of grad_shape be summed back to an input of `shape` (does shape broadcast to it)?"""
    try:
        return np.broadcast_shapes(grad_shape, shape) == tuple(grad_shape)
    except ValueError:
        return False
