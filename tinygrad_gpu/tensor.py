"""Tensor and Function: the two halves of the computation graph.

A ``Tensor`` holds an array (NumPy on ``cpu``/``emu``, CuPy on ``cuda``) and, when it was
computed from tensors that require grad, a link ``_ctx`` to the ``Function`` node that made
it.  A ``Function`` node remembers where each of its inputs came from (``next_nodes``) and
whatever its backward needs (``save_for_backward``).  ``autograd.backward`` walks these
nodes from the loss back to the leaves.

Every differentiable op is a ``Function`` subclass in ``tinygrad_gpu/ops/`` with its
forward (on arrays) and its backward (on Tensors, so that the backward pass can itself be
recorded for second derivatives) side by side.  The methods of ``Tensor`` below are a table
of contents: each is one line that hands over to an op.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import deferred_checks, dtypes
from . import device as devices


# ----------------------------------------------------------------------------- grad mode
class _GradMode:
    enabled = True


def is_grad_enabled() -> bool:
    return _GradMode.enabled


class set_grad_enabled:
    """Context manager (and decorator) that turns graph recording on or off."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self.previous = []

    def __enter__(self):
        self.previous.append(_GradMode.enabled)
        _GradMode.enabled = self.mode
        return self

    def __exit__(self, *exc):
        _GradMode.enabled = self.previous.pop()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(self.mode):
                return fn(*args, **kwargs)
        return wrapper


class no_grad(set_grad_enabled):
    """``with tg.no_grad():`` runs ops without recording a graph (evaluation, updates)."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self):
        super().__init__(True)


# ----------------------------------------------------------------------------- Function
class Function:
    """One recorded operation.  Subclasses define ``forward`` and ``backward``.

    ``forward(ctx, *inputs, **options)`` receives Tensors, computes on their ``.data``
    arrays and returns an array.  ``backward(ctx, grad)`` receives the gradient of the
    output as a Tensor and returns one gradient Tensor (or None) per input, written with
    Tensor ops, so that ``create_graph=True`` records it.  Gradients may have the broadcast
    shape of the output: the engine sums them back to each input's shape in one place
    (``gradient_sums.sum_to_shape``).

    Some backwards work on arrays instead (a CUDA kernel, a NumPy formula), which records
    nothing. Such a Function names a ``composition``: the same op written as Tensor ops,
    with forward's arguments. When a graph of the backward is wanted, the engine
    differentiates that composition instead (``autograd._differentiate_composition``), so
    no Function writes its backward twice.

    PyTorch's form works too: ``@staticmethod forward(ctx, *args)`` on Tensors, run without
    recording, and ``@staticmethod backward(ctx, *grads)``, called through ``Fn.apply(...)``
    (``ops/custom_function.py``). ``__init_subclass__`` tells the forms apart once per class.
    """

    saves_output = False          # set True when backward needs the forward's result
    composition = None            # the op as Tensor ops, for Functions whose backward works on arrays
    # Set True when backward, run without a graph, returns only arrays it has just made: spare arrays,
    # which the engine may add into and a leaf may keep without a copy (gradient_sums.py explains).
    backward_returns_spare = False
    # Set True when backward returns its incoming gradient itself (the Tensor it was given) for one input and
    # arrays it has just made for the others: then they are all spare when the incoming one was (a residual
    # add hands its gradient on to the residual stream, where a layer norm may write its own into it).
    hands_on_its_gradient = False
    # The engine sets this just before backward: True when the incoming gradient is spare, so that
    # backward may compute its result in that array instead of a new one (the fused ops hand it on to
    # their kernels' launchers as a *_is_spare argument).
    grad_output_is_spare = False
    # A staticmethod backward_together(nodes, grads) -> [grad of each node's input]: the backward of several nodes
    # of this class at once, made by the engine for those whose input is a leaf (autograd._Scope says when). Such
    # a class keeps its output's shape and dtype in input_shapes[0] and out_dtype (among the fields release()
    # keeps): the engine makes its gradient a place (gradient_slot) before the backward starts.
    backward_together = None
    float_only = False            # set True when integer inputs must be computed as floats (division)
    # Set to a piece of advice when PyTorch refuses the op if either operand is bool (subtraction): Tensor._binary
    # raises PyTorch's RuntimeError with it before promotion turns the bool into a number.
    rejects_bool = None
    # The engine sets this for the length of backward (None otherwise): gradient_so_far reads it.
    _sums_in_backward = None
    # Kept by release(): the graph's shape. input_dtypes is read by viz.py, which draws a graph (even a used one),
    # and by Cast's backward.
    _ENGINE_FIELDS = ("next_nodes", "input_shapes", "input_dtypes", "needs_input_grad", "recording", "freed", "device",
                      "grad_output_is_spare", "sequence_nr")
    # How many nodes have been recorded: each takes the next number as its sequence_nr (PyTorch's name), so that
    # tg.utils.checkpoint can tell the nodes a function made from those made before it.
    recorded = 0

    def __init_subclass__(cls, **kwargs):
        """Once per subclass, never per call: a staticmethod forward is PyTorch's form, which gets an apply of its
        own (ops/custom_function.py); the array form keeps the apply below."""
        super().__init_subclass__(**kwargs)
        from .ops import custom_function
        if custom_function.uses_pytorch_form(cls):
            custom_function.prepare(cls)
        else:
            custom_function.check_our_form(cls)

    @classmethod
    def apply(cls, *inputs: Tensor, **options) -> Tensor:
        device, wants_grad = inputs[0].device, False
        for t in inputs:
            if t.device != device:
                raise RuntimeError(f"{cls.op_name()}: expected all tensors on the same device, got {device} "
                                   f"and {t.device}; move one with .to({device!r})")
            wants_grad = wants_grad or t.requires_grad
        ctx = cls()
        ctx.device = device
        ctx.recording = _GradMode.enabled and wants_grad
        with devices.use(device):            # on a GPU, the op runs (and allocates) where its inputs live
            out = ctx.forward(*inputs, **options)
        # Where the result lives: the inputs' device, except for a copy to another (movement.ToDevice sets it).
        out_device = getattr(ctx, "out_device", device)
        if ctx.recording and out.dtype.kind != "f" and out.dtype != dtypes.bfloat16:
            ctx.recording = False      # integer and bool results (x.long(), argmax) carry no gradient
        if not ctx.recording:
            return Tensor._wrap(out, out_device)
        # Lists, not generators, make the tuples: faster, and this runs for every op recorded.
        ctx.next_nodes = nodes = tuple([t._node() for t in inputs])
        ctx.sequence_nr, Function.recorded = Function.recorded, Function.recorded + 1
        ctx.needs_input_grad = tuple([node is not None for node in nodes])
        ctx.input_shapes = tuple([t.data.shape for t in inputs])
        ctx.input_dtypes = tuple([t.data.dtype for t in inputs])
        ctx.freed = False
        if cls.saves_output:
            ctx.out_data = out
        if cls.composition is not None:
            ctx.inputs, ctx.options = inputs, options
        return Tensor._wrap(out, out_device, requires_grad=True, ctx=ctx)

    @classmethod
    def op_name(cls) -> str:
        return cls.__name__.lower()

    @property
    def xp(self):
        """The array module (numpy or cupy) for this node's device."""
        return devices.array_module(self.device)

    def save_for_backward(self, *tensors):
        if self.recording:
            self.saved_tensors = tensors

    @property
    def output(self) -> Tensor:
        """The forward result as a Tensor linked to this node (for second derivatives)."""
        return Tensor._wrap(self.out_data, getattr(self, "out_device", self.device), requires_grad=True, ctx=self)

    def release(self):
        """Drop everything saved for backward; the node keeps only its place in the graph. A node that saved
        nothing (an add, a cast) loses nothing by it, and a later backward may go through it again, as in
        PyTorch."""
        saved = [name for name in vars(self) if name not in self._ENGINE_FIELDS]
        for name in saved:
            delattr(self, name)
        self.freed = self.freed or bool(saved)

    def take_gradient_so_far(self, i: int):
        """For a backward that can add for free: the sum of what the ops consumed input i's value after this
        one have sent back to it so far, taken out of the engine's sums, as (a Tensor, whether it is spare:
        then the backward may write into it), or (None, False). The backward must then add it into the
        gradient it returns for input i: a kernel that writes a new gradient anyway adds it on the way, one
        pass instead of a separate sum (a layer norm's input, also the residual stream). (None, False) when
        nothing is waiting, the graph of the backward is recorded, or what waits is not a plain gradient of
        input i's shape and dtype; then the engine adds as usual."""
        sums, child = self._sums_in_backward, self.next_nodes[i]
        if sums is None or child is None:
            return None, False
        return sums.take(child, self.input_shapes[i], self.input_dtypes[i])

    def gradient_slot(self, i: int):
        """Where this backward may write input i's gradient, or None: when input i is a leaf whose .grad this
        backward makes (or a cast of one whose backward runs together with others', backward_together) and
        nothing has been sent to it yet, its place in one array that the engine makes for all such inputs of
        one dtype (GradientSums.slot). A backward that writes there returns that array, wrapped, as input i's
        gradient; one that asks must write it."""
        sums, child = self._sums_in_backward, self.next_nodes[i]
        if sums is None or child is None:
            return None
        return sums.slot(child, self.input_shapes[i], self.input_dtypes[i])

    def input_is_wanted(self, i: int) -> bool:
        """Does the backward running now want input i's own gradient (tg.grad(..., inputs=[it]))? For an op
        whose backward can send its gradients by another way in the graph that reaches the same leaves."""
        sums = self._sums_in_backward
        return sums is not None and sums.wanted is not None and id(self.next_nodes[i]) in sums.wanted

    def __repr__(self):
        return f"<{type(self).__name__}Backward>"


# ----------------------------------------------------------------------------- Tensor
def _to_array(data, dtype, device):
    """Copy Python data, a NumPy/CuPy array or a Tensor into a new array on `device`."""
    if isinstance(data, Tensor):
        array, from_python = data.data, False
    elif isinstance(data, (np.ndarray, np.generic)) or hasattr(data, "__cuda_array_interface__"):
        array, from_python = data, False
    else:
        try:
            array = np.asarray(data)
        except ValueError as e:      # ragged nested lists (PyTorch's error type)
            raise ValueError(f"tensor(): the nested lists do not form a rectangular array ({e})") from None
        from_python = True
        if array.dtype == object and not all(isinstance(v, int) for v in array.flat):   # huge ints: below
            raise TypeError(f"tensor(): cannot build a tensor from {type(data).__name__} "
                            "(expected numbers, nested lists of numbers, or an array)")
    target = np.dtype(dtype) if dtype is not None else dtypes.infer(array.dtype, from_python)
    if from_python:
        _check_python_values(array, target)
    with devices.use(device), np.errstate(over="ignore"):     # 1e40 as float32 is inf, as in PyTorch
        moved = devices.move(array, device)
        return moved.astype(target, copy=moved is array)     # one copy: the move's, or this one


def _given(op: str, values: tuple, name: str) -> tuple:
    """The *shape of x.reshape(2, 3) or x.reshape((2, 3)): at least one argument, as PyTorch wants (x.reshape(())
    is the 0-d form)."""
    if not values:
        raise TypeError(f"{op}() missing 1 required positional arguments: \"{name}\"")
    return values


def _tensor_only(op: str, value, name: str = "other"):
    """value, when it is a Tensor; PyTorch takes no Python number there (maximum, logaddexp, isclose, lerp's end,
    logical_and, dot), and neither do we: its TypeError."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' (position 1) must be Tensor, not {type(value).__name__}")
    return value


def _check_python_values(array, target) -> None:
    """Python numbers must fit the tensor's type, as in PyTorch: an int past int64 is a ValueError (NumPy would
    make it uint64 or an object), and an integer dtype refuses values outside its range, nan and inf
    (RuntimeError; NumPy would wrap them around or make them garbage)."""
    if array.dtype.kind == "u" or array.dtype == object and array.size:
        raise ValueError("tensor(): an integer is outside int64's range [-2**63, 2**63 - 1]")
    if target.kind not in "iu" or array.dtype.kind not in "iuf" or not array.size:
        return
    info = np.iinfo(target)
    low, high = array.min(), array.max()
    if not (np.isfinite(low) and np.isfinite(high)) or low < info.min or high > info.max:
        raise RuntimeError(f"tensor(): a value cannot be converted to type {target} without overflow (the values "
                           f"lie in [{low}, {high}], {target} holds [{info.min}, {info.max}])")


class Tensor:
    """An n-dimensional array that remembers how it was computed."""

    __slots__ = ("data", "device", "requires_grad", "grad", "_ctx", "__weakref__")
    __array_priority__ = 1000     # so that ndarray * Tensor calls Tensor.__rmul__

    def __init__(self, data, dtype=None, device=None, requires_grad=False):
        if device is None and isinstance(data, Tensor):
            device = data.device
        self.device = devices.canonical(device)
        self.data = _to_array(data, dtype, self.device)
        self.grad = None
        self._ctx = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, array, device, requires_grad=False, ctx=None) -> Tensor:
        """Fast internal constructor for an array already on `device` with the right dtype."""
        if isinstance(array, np.generic):      # NumPy turns 0-d results into scalars; keep arrays
            array = np.asarray(array)
        t = cls.__new__(cls)
        t.data, t.device, t.requires_grad, t.grad, t._ctx = array, device, requires_grad, None, ctx
        return t

    def _node(self):
        """The graph node a gradient for this tensor flows into: its Function, or itself (a leaf)."""
        if self._ctx is not None:
            return self._ctx
        return self if self.requires_grad else None

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        return int(self.data.size)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def element_size(self) -> int:
        return self.data.itemsize

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self):
        return self._ctx

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:
        """The last two dims swapped: each matrix of a batch transposed."""
        if self.ndim == 1:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices, got shape "
                               f"{self.shape}")
        return self.transpose(-2, -1) if self.ndim else self      # a 0-d tensor is its own, as in PyTorch

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", precision=4, prefix="tensor(")
        extras = []
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self.dtype not in (dtypes.float32, dtypes.int64, dtypes.bool_):
            extras.append(f"dtype={self.dtype}")
        if self._ctx is not None:
            extras.append(f"grad_fn={self._ctx!r}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}{''.join(', ' + e for e in extras)})"

    # ------------------------------------------------------------------ conversion
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (a copy when the tensor lives on a GPU). A GPU's waiting index
        checks are read with it (deferred_checks.py)."""
        if devices.is_cuda(self.device):
            deferred_checks.raise_pending()
        return devices.move(self.data, "cpu")

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"item(): only a tensor with one element can be converted to a Python number, "
                             f"this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self._only_element())

    def __int__(self):
        return int(self._only_element())

    def _only_element(self):
        """float(x) and int(x): PyTorch's ValueError (item() raises RuntimeError) for several elements."""
        if self.numel() != 1:
            raise ValueError(f"only one element tensors can be converted to Python scalars, this one has shape "
                             f"{self.shape}")
        return self.item()

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor with shape {self.shape} is ambiguous; "
                               "use .any() or .all()")
        return bool(self.item())

    def __index__(self):
        if self.numel() != 1 or dtypes.category(self.dtype) != 1:
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self.item())

    def to(self, target=None, dtype=None) -> Tensor:
        """``x.to('cuda')``, ``x.to(tg.float64)`` or ``x.to('cpu', tg.float64)``; differentiable."""
        if target is None and dtype == self.dtype:      # the common no-op inside binary ops: no parsing
            return self
        device = None
        if target is not None:
            try:
                dtype_from_target = np.dtype(target) if not isinstance(target, str) else None
            except TypeError:
                dtype_from_target = None
            if dtype_from_target is not None:
                dtype = dtype_from_target
            else:
                device = devices.canonical(target)
        out = self
        if device is not None and device != self.device:
            out = _movement.ToDevice.apply(out, device=device)
        if dtype is not None and np.dtype(dtype) != out.dtype:
            out = _elementwise.Cast.apply(out, dtype=np.dtype(dtype))
        return out

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Tensor:
        return self.to(f"cuda:{index}")

    def float(self) -> Tensor:
        return self.to(dtype=dtypes.float32)

    def double(self) -> Tensor:
        return self.to(dtype=dtypes.float64)

    def half(self) -> Tensor:
        return self.to(dtype=dtypes.float16)

    def bfloat16(self) -> Tensor:
        return self.to(dtype=dtypes.bfloat16)

    def long(self) -> Tensor:
        return self.to(dtype=dtypes.int64)

    def int(self) -> Tensor:
        return self.to(dtype=dtypes.int32)

    def bool(self) -> Tensor:
        return self.to(dtype=dtypes.bool_)

    def is_floating_point(self) -> bool:
        return dtypes.is_floating(self.dtype)

    # ------------------------------------------------------------------ autograd
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and not dtypes.is_floating(self.dtype):
            raise RuntimeError(f"only floating-point tensors can require gradients, this one is {self.dtype}; "
                               "convert it first with .float()")
        if not requires_grad and self._ctx is not None:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor; use .detach() instead")
        self.requires_grad = bool(requires_grad)
        return self

    def detach(self) -> Tensor:
        """The same values (shared memory), cut from the graph."""
        return Tensor._wrap(self.data, self.device)

    def clone(self) -> Tensor:
        return _elementwise.Clone.apply(self)

    def contiguous(self) -> Tensor:
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see autograd.backward)."""
        _autograd.backward([self], None if gradient is None else [gradient], retain_graph, create_graph)

    def register_post_accumulate_grad_hook(self, hook):
        """Run hook(self) whenever a backward has finished adding into this leaf's ``.grad``; returns a
        handle whose remove() unregisters it (autograd.py)."""
        return _autograd.register_post_accumulate_grad_hook(self, hook)

    # ------------------------------------------------------------------ helpers for ops
    def _scalar_like(self, value) -> Tensor:
        """A Python number as a 0-d tensor on this device, with PyTorch's scalar dtype rule."""
        dtype = dtypes.scalar_dtype(value, self.dtype)
        if dtype.kind in "iu" and isinstance(value, int) and not isinstance(value, bool):
            value = dtypes.wrap_int(value, dtype)          # int32 | 0xFFFFFFFF: the constant becomes -1
        with devices.use(self.device):
            return Tensor._wrap(devices.array_module(self.device).asarray(value, dtype=dtype), self.device)

    def _as_tensor(self, other) -> Tensor:
        if isinstance(other, Tensor):
            return other
        if isinstance(other, (int, float, bool, np.number, np.bool_)):
            return self._scalar_like(other)
        return Tensor(other, device=self.device)

    def _binary(self, op, other, reverse=False):
        """Promote both operands to a common dtype, then apply `op` (a Function)."""
        if op.rejects_bool:                  # a Python bool counts too, though it would join an int tensor as an int
            dtypes.reject_bool(op.op_name(), self.dtype, np.asarray(other).dtype if not isinstance(other, Tensor)
                               else other.dtype, advice=op.rejects_bool, error=RuntimeError)
        other = self._as_tensor(other)
        a, b = (other, self) if reverse else (self, other)
        dtype = dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)
        if op.float_only and not dtypes.is_floating(dtype):
            dtype = dtypes.default_float
        return op.apply(a.to(dtype=dtype), b.to(dtype=dtype))

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other): return self._binary(_elementwise.Add, other)
    def __radd__(self, other): return self._binary(_elementwise.Add, other, reverse=True)
    def __sub__(self, other): return self._binary(_elementwise.Sub, other)
    def __rsub__(self, other): return self._binary(_elementwise.Sub, other, reverse=True)
    def __mul__(self, other): return self._binary(_elementwise.Mul, other)
    def __rmul__(self, other): return self._binary(_elementwise.Mul, other, reverse=True)
    def __truediv__(self, other): return self._binary(_elementwise.Div, other)
    def __rtruediv__(self, other): return self._in_float32()._binary(_elementwise.Div, other, reverse=True)
    def __pow__(self, exponent): return _elementwise.pow(self._in_float32(), exponent)
    def __rpow__(self, base):
        exponent = self._in_float32()
        if isinstance(base, (int, float)):                                     # a number ** a tensor
            dtype = dtypes.promote(dtypes.scalar_dtype(base, exponent.dtype), 0, exponent.dtype, exponent.ndim)
            if dtypes.is_floating(dtype):
                return _elementwise.PowOfNumber.apply(exponent.to(dtype=dtype), base=base)
        return _elementwise.pow(self._as_tensor(base)._in_float32(), exponent)
    def __matmul__(self, other):
        return NotImplemented if isinstance(other, numbers.Number) else _linalg.matmul(self, self._as_tensor(other))

    def __rmatmul__(self, other):
        return NotImplemented if isinstance(other, numbers.Number) else _linalg.matmul(self._as_tensor(other), self)

    def __pos__(self):
        dtypes.reject_bool("positive (unary +)", self.dtype, error=RuntimeError)
        return self

    def __neg__(self):
        dtypes.reject_bool("neg", self.dtype, advice="for a mask use ~ (logical_not)", error=RuntimeError)
        return _elementwise.Neg.apply(self)
    def __abs__(self): return self.abs()
    def add(self, other, *, alpha=1):
        return self + other if type(alpha) is int and alpha == 1 else self._scaled(_elementwise.Add, other, alpha)

    def sub(self, other, *, alpha=1):
        return self - other if type(alpha) is int and alpha == 1 else self._scaled(_elementwise.Sub, other, alpha)

    def _scaled(self, op, other, alpha):
        """self + alpha * other (or -): the operands promoted first, so that alpha, a number, widens nothing; with
        PyTorch's checks of alpha's kind."""
        other = self._as_tensor(other)
        dtype = dtypes.promote(self.dtype, self.ndim, other.dtype, other.ndim)
        if isinstance(alpha, bool) and dtype != dtypes.bool_:
            raise RuntimeError(f"{op.op_name()}: a bool alpha is only supported for bool results, these are {dtype}")
        if isinstance(alpha, float) and not dtypes.is_floating(dtype):
            raise RuntimeError(f"{op.op_name()}: for integral input tensors ({dtype}), alpha must not be a float")
        return self._binary(op, (other.to(dtype=dtype) * alpha).to(dtype=dtype))     # alpha widens nothing

    def mul(self, other): return self * other
    def div(self, other, rounding_mode=None): return _rounding.div(self, other, rounding_mode)
    def true_divide(self, other): return self / other
    def pow(self, exponent): return self ** exponent
    def matmul(self, other): return self @ other
    def neg(self): return -self

    # comparisons give bool tensors and no gradient
    def __eq__(self, other): return _elementwise.compare(self, other, "equal")
    def __ne__(self, other): return _elementwise.compare(self, other, "not_equal")
    def __lt__(self, other): return _elementwise.compare(self, other, "less")
    def __le__(self, other): return _elementwise.compare(self, other, "less_equal")
    def __gt__(self, other): return _elementwise.compare(self, other, "greater")
    def __ge__(self, other): return _elementwise.compare(self, other, "greater_equal")
    __hash__ = object.__hash__
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__

    def logical_not(self): return _elementwise.logical(self, None, "logical_not")
    def logical_and(self, other): return _elementwise.logical(self, _tensor_only("logical_and", other), "logical_and")
    def logical_or(self, other): return _elementwise.logical(self, _tensor_only("logical_or", other), "logical_or")
    def logical_xor(self, other): return _elementwise.logical(self, _tensor_only("logical_xor", other), "logical_xor")
    # ~ & | ^ << >> are bitwise, as in PyTorch: on bool tensors ~ & | ^ are logical not/and/or/xor
    def __invert__(self):
        if dtypes.category(self.dtype) > 1:      # PyTorch: ~ is a TypeError here, bitwise_not a NotImplementedError
            raise TypeError(f"~ (operator.invert) is only implemented on integer and bool tensors, not {self.dtype}; "
                            "for a mask use x == 0 or logical_not")
        return _bitwise.bitwise_not(self)
    def __and__(self, other): return _bitwise.bitwise(self, other, "bitwise_and")
    def __rand__(self, other): return _bitwise.bitwise(self, other, "bitwise_and", reverse=True)
    def __or__(self, other): return _bitwise.bitwise(self, other, "bitwise_or")
    def __ror__(self, other): return _bitwise.bitwise(self, other, "bitwise_or", reverse=True)
    def __xor__(self, other): return _bitwise.bitwise(self, other, "bitwise_xor")
    def __rxor__(self, other): return _bitwise.bitwise(self, other, "bitwise_xor", reverse=True)
    def __lshift__(self, other): return _bitwise.bitwise(self, other, "bitwise_left_shift")
    def __rlshift__(self, other): return _bitwise.bitwise(self, other, "bitwise_left_shift", reverse=True)
    def __rshift__(self, other): return _bitwise.bitwise(self, other, "bitwise_right_shift")
    def __rrshift__(self, other): return _bitwise.bitwise(self, other, "bitwise_right_shift", reverse=True)
    def bitwise_not(self): return _bitwise.bitwise_not(self)
    bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__
    bitwise_left_shift, bitwise_right_shift = __lshift__, __rshift__
    def isfinite(self): return _elementwise.predicate(self, "isfinite")
    def isnan(self): return _elementwise.predicate(self, "isnan")
    def any(self, dim=None, keepdim=False): return _reduce.any_or_all(self, "any", dim, keepdim)
    def all(self, dim=None, keepdim=False): return _reduce.any_or_all(self, "all", dim, keepdim)

    # ------------------------------------------------------------------ unary math
    def exp(self): return _elementwise.Exp.apply(self._floating()._in_float32())
    def log(self): return _elementwise.Log.apply(self._floating()._in_float32())
    def sqrt(self): return _elementwise.Sqrt.apply(self._floating())
    def rsqrt(self): return _elementwise.Rsqrt.apply(self._floating()._in_float32())
    def reciprocal(self): return _elementwise.Reciprocal.apply(self._floating()._in_float32())
    def tanh(self): return _elementwise.Tanh.apply(self._floating())
    def sigmoid(self): return _elementwise.Sigmoid.apply(self._floating())
    def sin(self): return _elementwise.Sin.apply(self._floating())
    def cos(self): return _elementwise.Cos.apply(self._floating())
    def erf(self): return _elementwise.Erf.apply(self._floating())
    def relu(self):
        dtypes.reject_bool("relu", self.dtype, error=RuntimeError)
        return _elementwise.Relu.apply(self)

    def abs(self):
        dtypes.reject_bool("abs", self.dtype)
        return _elementwise.Abs.apply(self)

    def sign(self): return _elementwise.sign(self)
    def square(self):
        x = self.long() if self.dtype == dtypes.bool_ else self      # PyTorch: a bool's square is int64
        return x * x

    def gelu(self, approximate="none"): return _elementwise.gelu(self, approximate)
    def clamp(self, min=None, max=None): return _elementwise.clamp(self, min, max)
    clip = clamp
    def clamp_min(self, min): return _elementwise.clamp(self, min, None)
    def clamp_max(self, max): return _elementwise.clamp(self, None, max)
    def maximum(self, other): return self._binary(_elementwise.Maximum, _tensor_only("maximum", other))
    def minimum(self, other): return self._binary(_elementwise.Minimum, _tensor_only("minimum", other))
    def where(self, condition, other): return _elementwise.where(condition, self, other)
    def masked_fill(self, mask, value):
        if isinstance(value, Tensor) and value.requires_grad and not self.is_floating_point():
            raise RuntimeError(f"masked_fill: a value that requires grad into a {self.dtype} tensor, which can carry "
                               "no gradient; fill with value.detach()")
        if self.dtype.kind in "iu":     # nan, inf or a number out of range into integers: PyTorch's RuntimeError
            _check_python_values(np.asarray(value.item() if isinstance(value, Tensor) else value), self.dtype)
        return _elementwise.where(mask, self._as_tensor(value).to(dtype=self.dtype), self)

    def _floating(self) -> Tensor:
        """Math functions of integer tensors compute in the default float type, as PyTorch does."""
        return self if dtypes.is_floating(self.dtype) else self.to(dtype=dtypes.default_float)

    def _in_float32(self) -> Tensor:
        """The input of an op that autocast runs in float32 (softmax, sum, exp, ...): a 16-bit float is cast
        up inside an autocast region, anything else is left alone (amp/autocast_mode.py)."""
        return _autocast.float32(self)[0] if _autocast.region_open() else self

    # ------------------------------------------------------------------ reductions
    def sum(self, dim=None, keepdim=False, dtype=None): return _reduce.sum(self._in_float32(), dim, keepdim, dtype)
    def mean(self, dim=None, keepdim=False, *, dtype=None): return _reduce.mean(self, dim, keepdim, dtype)
    def var(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return _reduce.var(self, dim, keepdim, _reduce.correction_of(unbiased, correction))
    def std(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return _reduce.std(self, dim, keepdim, _reduce.correction_of(unbiased, correction))
    def max(self, dim=None, keepdim=False):
        return _reduce.extreme(self, dim, keepdim, "max") if not isinstance(dim, Tensor) else self.maximum(dim)
    def min(self, dim=None, keepdim=False):
        return _reduce.extreme(self, dim, keepdim, "min") if not isinstance(dim, Tensor) else self.minimum(dim)
    def amax(self, dim=None, keepdim=False): return _reduce.amax(self, dim, keepdim, "max")
    def amin(self, dim=None, keepdim=False): return _reduce.amax(self, dim, keepdim, "min")
    def argmax(self, dim=None, keepdim=False): return _reduce.arg_extreme(self, dim, keepdim, "argmax")
    def argmin(self, dim=None, keepdim=False): return _reduce.arg_extreme(self, dim, keepdim, "argmin")
    def logsumexp(self, dim, keepdim=False):
        if dim is None:                  # PyTorch: the dim is required
            raise TypeError("logsumexp(): argument 'dim' must be an int or a tuple of ints, not None")
        return _reduce.logsumexp(self, dim, keepdim)
    def softmax(self, dim, dtype=None): return _reduce.softmax(self, dim, dtype, _reduce.Softmax)
    def log_softmax(self, dim, dtype=None): return _reduce.softmax(self, dim, dtype, _reduce.LogSoftmax)

    # ------------------------------------------------------------------ movement
    def reshape(self, *shape): return _movement.reshape(self, _given("reshape", shape, "shape"))
    view = reshape
    def view_as(self, other): return self.reshape(other.shape)
    def reshape_as(self, other): return self.reshape(other.shape)
    def flatten(self, start_dim=0, end_dim=-1): return _movement.flatten(self, start_dim, end_dim)
    def permute(self, *dims): return _movement.permute(self, _given("permute", dims, "dims"))
    def transpose(self, dim0, dim1): return _movement.transpose(self, dim0, dim1)
    def movedim(self, source, destination): return _movement.movedim(self, source, destination)
    def expand(self, *shape): return _movement.expand(self, _given("expand", shape, "size"))
    def expand_as(self, other): return self.expand(other.shape)
    def squeeze(self, dim=None): return _movement.squeeze(self, dim)
    def unsqueeze(self, dim): return _movement.unsqueeze(self, dim)
    def __getitem__(self, index): return _movement.getitem(self, index)
    def split(self, split_size_or_sections, dim=0): return _movement.split(self, split_size_or_sections, dim)
    def chunk(self, chunks, dim=0): return _movement.chunk(self, chunks, dim)
    def unbind(self, dim=0): return _movement.unbind(self, dim)
    def narrow(self, dim, start, length): return _movement.narrow(self, dim, start, length)
    def index_select(self, dim, index): return _movement.index_select(self, dim, index)
    def tril(self, diagonal=0): return _movement.Triangle.apply(self, diagonal=diagonal, upper=False)
    def triu(self, diagonal=0): return _movement.Triangle.apply(self, diagonal=diagonal, upper=True)

    # ------------------------------------------------------------------ more math
    # trigonometric and hyperbolic functions and their inverses (ops/trigonometric.py)
    def tan(self): return _trigonometric.Tan.apply(self._floating()._in_float32())
    def asin(self): return _trigonometric.Asin.apply(self._floating()._in_float32())
    def acos(self): return _trigonometric.Acos.apply(self._floating()._in_float32())
    def atan(self): return _trigonometric.Atan.apply(self._floating())
    def sinh(self): return _trigonometric.Sinh.apply(self._floating()._in_float32())
    def cosh(self): return _trigonometric.Cosh.apply(self._floating()._in_float32())
    def asinh(self): return _trigonometric.Asinh.apply(self._floating())
    def acosh(self): return _trigonometric.Acosh.apply(self._floating())
    def atanh(self): return _trigonometric.Atanh.apply(self._floating())
    def atan2(self, other): return self._binary(_trigonometric.Atan2, _tensor_only("atan2", other))
    arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2
    # exponentials and logarithms in bases 2 and 10, log(e^a + e^b) (ops/exponential.py)
    def exp2(self): return _exponential.Exp2.apply(self._floating())
    def log2(self): return _exponential.Log2.apply(self._floating()._in_float32())
    def log10(self): return _exponential.Log10.apply(self._floating()._in_float32())
    def expm1(self): return _exponential.Expm1.apply(self._floating()._in_float32())
    def log1p(self): return _exponential.Log1p.apply(self._floating()._in_float32())
    def logaddexp(self, other):
        other = _tensor_only("logaddexp", other)
        _elementwise.check_broadcast("logaddexp", self.shape, other.shape)
        if dtypes.category(dtypes.promote(self.dtype, self.ndim, other.dtype, other.ndim)) < 2:
            raise NotImplementedError(f"logaddexp: not implemented for {self.dtype} and {other.dtype} tensors (as in "
                                      "PyTorch); convert first, e.g. x.float()")
        return self._binary(_exponential.LogAddExp, other)
    # rounding, and the divisions that round (ops/rounding.py); % and // as in Python and PyTorch
    def floor(self): return _rounding.to_whole(self, _rounding.Floor)
    def ceil(self): return _rounding.to_whole(self, _rounding.Ceil)
    def trunc(self): return _rounding.to_whole(self, _rounding.Trunc)
    fix = trunc
    def round(self, decimals=None): return _rounding.to_whole(self, _rounding.Round, decimals=decimals)
    def fmod(self, other): return self._binary(_rounding.Fmod, other)
    def remainder(self, other): return self._binary(_rounding.Remainder, other)
    def __mod__(self, other): return self._binary(_rounding.Remainder, other)
    def __rmod__(self, other): return self._binary(_rounding.Remainder, other, reverse=True)
    def floor_divide(self, other): return self._binary(_rounding.FloorDivide, other)
    def __floordiv__(self, other): return self._binary(_rounding.FloorDivide, other)
    def __rfloordiv__(self, other): return self._binary(_rounding.FloorDivide, other, reverse=True)
    # one value weighed against another (ops/blend.py); tests for infinities (bool results, no gradient)
    def copysign(self, other): return self._binary(_blend.CopySign, other)
    def lerp(self, end, weight): return _blend.lerp(self, _tensor_only("lerp", end, "end"), weight)
    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return _blend.isclose(self, _tensor_only("isclose", other), rtol, atol, equal_nan)
    def isinf(self): return _elementwise.predicate(self, "isinf")
    def isposinf(self): return _elementwise.predicate(self, "isposinf")
    def isneginf(self): return _elementwise.predicate(self, "isneginf")

    # ------------------------------------------------------------------ products, scans and sorting
    def prod(self, dim=None, keepdim=False, dtype=None): return _reduce.prod(self._in_float32(), dim, keepdim, dtype)
    def cumsum(self, dim, dtype=None): return _scan.cumsum(self._in_float32(), dim, dtype)
    def cumprod(self, dim, dtype=None): return _scan.cumprod(self._in_float32(), dim, dtype)
    def cummax(self, dim): return _scan.cumulative_extreme(self, dim, "cummax")
    def cummin(self, dim): return _scan.cumulative_extreme(self, dim, "cummin")
    def logcumsumexp(self, dim): return _scan.logcumsumexp(self, dim)
    def sort(self, dim=-1, descending=False, stable=False): return _sort.sort(self, dim, descending, stable)
    def argsort(self, dim=-1, descending=False, stable=False): return _sort.argsort(self, dim, descending, stable)
    def msort(self): return _sort.sort(self, 0).values
    def topk(self, k, dim=-1, largest=True, sorted=True): return _sort.topk(self, k, dim, largest, sorted)

    # ------------------------------------------------------------------ gather and scatter
    def gather(self, dim, index): return _gather.gather(self, dim, index)
    def scatter(self, dim, index, src=None, *, value=None): return _gather.scatter(self, dim, index, src, value)
    def scatter_add(self, dim, index, src): return _gather.scatter_add(self, dim, index, src)
    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        return _gather.scatter_reduce(self, dim, index, src, reduce, include_self)
    def masked_select(self, mask): return _gather.masked_select(self, mask)
    def nonzero(self, *, as_tuple=False): return _gather.nonzero(self, as_tuple)

    # ------------------------------------------------------------------ rearranging
    def flip(self, *dims_given, dims=None): return _rearrange.flip(self, dims_given if dims is None else dims)
    def roll(self, shifts, dims=None): return _rearrange.roll(self, shifts, dims)
    def repeat(self, *sizes): return _rearrange.repeat(self, _given("repeat", sizes, "repeats"))
    def repeat_interleave(self, repeats, dim=None): return _rearrange.repeat_interleave(self, repeats, dim)
    def unflatten(self, dim, sizes): return _rearrange.unflatten(self, dim, sizes)
    def unfold(self, dimension, size, step): return _rearrange.unfold(self, dimension, size, step)
    def diag(self, diagonal=0): return _rearrange.diag(self, diagonal)
    def diagonal(self, offset=0, dim1=0, dim2=1): return _rearrange.diagonal(self, offset, dim1, dim2)
    def dot(self, other): return _linalg.dot(self, _tensor_only("dot", other, "tensor"))
    def outer(self, other): return _linalg.outer(self, _tensor_only("outer", other, "vec2"))

    # ------------------------------------------------------------------ compositions of the ops above
    # (ops/compositions.py: no Function of their own, so their gradients are the ops')
    def erfc(self): return _compositions.erfc(self)
    def logit(self, eps=None): return _compositions.logit(self, eps)
    def signbit(self): return _compositions.signbit(self)
    def frac(self): return _compositions.frac(self)
    def deg2rad(self): return _compositions.deg2rad(self)
    def rad2deg(self): return _compositions.rad2deg(self)
    def nan_to_num(self, nan=0.0, posinf=None, neginf=None): return _compositions.nan_to_num(self, nan, posinf, neginf)
    def sinc(self): return _compositions.sinc(self)
    def fmax(self, other): return _compositions.fmax(self, _tensor_only("fmax", other))
    def fmin(self, other): return _compositions.fmin(self, _tensor_only("fmin", other))
    def hypot(self, other): return _compositions.hypot(self, _tensor_only("hypot", other))
    def xlogy(self, other): return _compositions.xlogy(self, other)
    def logaddexp2(self, other): return _compositions.logaddexp2(self, _tensor_only("logaddexp2", other))
    def equal(self, other): return _compositions.equal(self, _tensor_only("equal", other))
    def nansum(self, dim=None, keepdim=False, *, dtype=None): return _compositions.nansum(self, dim, keepdim, dtype=dtype)
    def nanmean(self, dim=None, keepdim=False, *, dtype=None):
        return _compositions.nanmean(self, dim, keepdim, dtype=dtype)
    def aminmax(self, *, dim=None, keepdim=False): return _compositions.aminmax(self, dim=dim, keepdim=keepdim)
    def count_nonzero(self, dim=None): return _compositions.count_nonzero(self, dim)
    def median(self, dim=None, keepdim=False): return _compositions.median(self, dim, keepdim)
    def kthvalue(self, k, dim=-1, keepdim=False): return _compositions.kthvalue(self, k, dim, keepdim)
    def norm(self, p="fro", dim=None, keepdim=False, dtype=None): return _compositions.norm(self, p, dim, keepdim, dtype)
    def trace(self): return _compositions.trace(self)
    def t(self): return _compositions.t(self)
    def ravel(self): return _compositions.ravel(self)
    def broadcast_to(self, size): return _compositions.broadcast_to(self, size)
    def tile(self, *dims): return _compositions.tile(self, _movement.shape_arg(dims))
    def fliplr(self): return _compositions.fliplr(self)
    def flipud(self): return _compositions.flipud(self)
    def diag_embed(self, offset=0, dim1=-2, dim2=-1): return _compositions.diag_embed(self, offset, dim1, dim2)
    def tensor_split(self, indices_or_sections, dim=0): return _compositions.tensor_split(self, indices_or_sections, dim)
    def take(self, index): return _compositions.take(self, index)
    def take_along_dim(self, indices, dim=None): return _compositions.take_along_dim(self, indices, dim)
    def argwhere(self): return _compositions.argwhere(self)
    def index_add(self, dim, index, source, *, alpha=1): return _compositions.index_add(self, dim, index, source,
                                                                                         alpha=alpha)
    def mm(self, mat2): return _compositions.mm(self, mat2)
    def bmm(self, mat2): return _compositions.bmm(self, mat2)
    def mv(self, vec): return _compositions.mv(self, vec)
    def addmm(self, mat1, mat2, *, beta=1, alpha=1): return _compositions.addmm(self, mat1, mat2, beta=beta, alpha=alpha)
    def kron(self, other): return _compositions.kron(self, other)
    def type_as(self, other): return self.to(dtype=other.dtype)

    # ------------------------------------------------------------------ PyTorch's other names for the same ops
    subtract, multiply, divide, negative, absolute, positive = sub, mul, div, neg, abs, __pos__
    swapaxes = swapdims = transpose
    moveaxis = movedim
    sgn = sign

# The op modules import Tensor and Function from here, so they come last.
from .ops import bitwise as _bitwise  # noqa: E402
from .ops import blend as _blend  # noqa: E402
from .ops import compositions as _compositions  # noqa: E402
from .ops import elementwise as _elementwise  # noqa: E402
from .ops import exponential as _exponential  # noqa: E402
from .ops import gather as _gather  # noqa: E402
from .ops import linalg as _linalg  # noqa: E402
from .ops import movement as _movement  # noqa: E402
from .ops import rearrange as _rearrange  # noqa: E402
from .ops import reduce as _reduce  # noqa: E402
from .ops import rounding as _rounding  # noqa: E402
from .ops import scan as _scan  # noqa: E402
from .ops import sort as _sort  # noqa: E402
from .ops import trigonometric as _trigonometric  # noqa: E402
from . import autograd as _autograd  # noqa: E402
from .amp import autocast_mode as _autocast  # noqa: E402
