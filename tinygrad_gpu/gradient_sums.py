"""Adding up gradients while backward walks the graph, without needless copies.

The gradient of a tensor is the sum of what every op that consumed it sends back.
``GradientSums`` keeps those sums for the engine (``autograd.py``): ``add`` one
contribution, ``pop`` the total when the node's turn comes.

One idea saves most of the memory traffic here, and this is the one place it is
explained. An array is **spare** when nobody else holds it: no tensor, no saved value, no
caller. A spare array may be written in place; any other may not. What a backward hands
back is often not spare: ``Add`` gives the same gradient to both inputs, a reshape gives
a view of it, and a saved tensor may come back as it is. Spare are:

* a sum made here (the first time two contributions meet, in a new array, or in a
  spare one of the two);
* the zero-filled buffer that slice gradients are added into;
* what a backward returns when its Function declares ``backward_returns_spare``: arrays
  it has just made; and, when it declares ``hands_on_its_gradient``, its incoming gradient
  itself, returned for one input, when that was spare. ``TINYGRAD_GPU_CHECK_SPARE=1`` makes
  the engine check those promises after every such backward (``check_spare``); the test
  suite runs with it on.

``pop`` says whether the total is spare, and the engine passes that on: a leaf keeps a
spare gradient as its ``.grad`` without a copy, and a backward learns through
``Function.grad_output_is_spare`` that it may compute its result in its incoming gradient.
When the backward is recorded (``create_graph=True``) nothing is spare: every sum is a
Tensor op in the graph, and no array is ever written twice.

This module also holds what the ops and the engine both need, so neither imports the
other: ``sum_to_shape`` (undo broadcasting) and ``SliceGradient``. It imports neither
``tensor.py`` nor the ops: tensors come in from its callers.
"""
from __future__ import annotations

import math
import os

from . import device as devices


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() not in ("0", "", "false", "no", "off")


CHECK_SPARE = _flag("TINYGRAD_GPU_CHECK_SPARE")
PLAIN = _flag("TINYGRAD_GPU_PLAIN_SUMS")


def sum_to_shape(grad, shape: tuple):
    """Undo broadcasting: sum `grad` over the dimensions that broadcasting added or stretched."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    stretched = tuple(i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    return grad.sum(dim=tuple(range(extra)) + stretched, keepdim=True).reshape(shape)


class SliceGradient:
    """The gradient that x[index] sends back to x: `values` at `index` (ints and slices only), zero
    everywhere else. Kept sparse until it meets another gradient: the pieces of a split then add
    into one zero-filled buffer, instead of each making a zero-filled copy of the whole input."""

    def __init__(self, values, shape: tuple, index):
        self.values, self.shape, self.index = values, shape, index
        self.dtype = values.dtype

    def dense(self):
        array = devices.array_module(self.values.device).zeros(self.shape, dtype=self.dtype)
        array[self.index] = self.values.data
        return type(self.values)._wrap(array, self.values.device)      # a Tensor, like the values


def _dense(grad):
    return grad.dense() if isinstance(grad, SliceGradient) else grad


class GradientSums:
    """The gradient of each node so far (keyed by the node's id), and which of them are spare.

    ``PlainGradientSums`` below is what it does, written plainly: add, pop, and nothing else. Everything
    here beyond that saves copies: in-place adds into spare arrays, slices kept sparse, places in one
    array for the parameters' gradients (slot), and sums a kernel takes over (take).
    """

    def __init__(self, recorded: bool, wanted: set = None):
        self.recorded = recorded       # create_graph: sums are recorded ops, never in place
        self.wanted = wanted           # tg.grad's inputs (ids of their nodes), or None: every leaf
        self.sums = {}
        self.spare = set()
        # Places for gradients (slot): id of a node that may have one (the engine says which) -> (shape, dtype,
        # device, "kept" or "passing") of its gradient; then id -> the places made and not yet taken. Kept and
        # passing gradients get arrays of their own: a leaf's .grad, a view, would keep the whole array alive.
        self.placeable = {}
        self.slots = {}

    def add(self, node, grad, shape: tuple = None, spare: bool = False) -> None:
        """Add `grad` (a Tensor or a SliceGradient) into the gradient of `node`, whose output has
        `shape`: a gradient of the broadcast shape is summed back to it first."""
        if shape is not None and not isinstance(grad, SliceGradient):
            grad = sum_to_shape(grad, shape)
        key, spare = id(node), spare and not self.recorded
        previous = self.sums.get(key)
        if previous is None:                        # the first contribution: kept as it is
            self.sums[key] = grad
            if spare and not isinstance(grad, SliceGradient):
                self.spare.add(key)
            return
        if self.recorded or previous.dtype != grad.dtype:        # a new tensor (promoting, or recorded)
            self.sums[key] = _dense(previous) + _dense(grad)
            if not self.recorded:
                self.spare.add(key)
            return
        if key not in self.spare:                   # the first sum: an array of our own from now on
            self.spare.add(key)
            if spare and not isinstance(grad, SliceGradient):
                previous, grad = grad, previous     # the new contribution is one: add into it
            elif isinstance(previous, SliceGradient) or isinstance(grad, SliceGradient):
                previous = previous.dense() if isinstance(previous, SliceGradient) else previous.clone()
            else:
                self.sums[key] = previous + grad    # a new array, in one pass
                return
        if isinstance(grad, SliceGradient):
            previous.data[grad.index] += grad.values.data
        else:
            previous.data += grad.data
        self.sums[key] = previous

    def take(self, node, shape: tuple, dtype):
        """Take the sum so far of `node`'s gradient out, for a backward that adds it into its own contribution
        (Function.take_gradient_so_far): (a Tensor, whether it is spare). (None, False), and the sum stays,
        unless it is a plain array of `shape` and `dtype` and nothing is recorded."""
        grad = self.sums.get(id(node))
        if self.recorded or grad is None or isinstance(grad, SliceGradient) or grad.shape != shape \
                or grad.dtype != dtype:
            return None, False
        return self.pop(node)

    def slot(self, node, shape: tuple, dtype):
        """An array for a backward to write `node`'s gradient into, or None. Only for the nodes the engine made
        placeable (without a recorded graph: the leaves whose .grad this backward makes, and the casts of
        parameters whose backwards it runs together, autograd.run_backward), while nothing is summed for the
        node yet, once each: the first ask for a dtype on a device makes one array for all such nodes (the
        leaves' apart from the casts'), and each gets a view of it. So a step's parameter gradients are one
        allocation, not one each (and, as views of one array, lie end to end in memory)."""
        meta = self.placeable.get(id(node))
        if meta is None or id(node) in self.sums or meta[:2] != (tuple(shape), dtype):
            return None
        if id(node) not in self.slots:
            device = meta[2]
            group = {key: other[0] for key, other in self.placeable.items()
                     if other[1:] == meta[1:] and key not in self.slots}       # their shapes, by id
            with devices.use(device):                        # made, and cut into views, where the nodes live
                flat = devices.array_module(device).empty(sum(map(math.prod, group.values())), dtype)
                start = 0
                for key, place_shape in group.items():
                    self.slots[key] = flat[start:start + math.prod(place_shape)].reshape(place_shape)
                    start += math.prod(place_shape)
        del self.placeable[id(node)]
        return self.slots.pop(id(node))

    def pop(self, node):
        """(the total gradient of `node` as a Tensor, whether it is spare), or (None, False)."""
        grad = self.sums.pop(id(node), None)
        if isinstance(grad, SliceGradient):
            return grad.dense(), True               # a zero-filled buffer made just now
        spare = id(node) in self.spare
        self.spare.discard(id(node))
        return grad, spare


class PlainGradientSums(GradientSums):
    """GradientSums without its savings: each sum a new array, nothing spare, no places and no sums taken
    over. ``TINYGRAD_GPU_PLAIN_SUMS=1`` makes the engine use it (``new_sums``); tests/test_gradient_sums.py
    checks that a GPT's gradients are the same with it."""

    def add(self, node, grad, shape: tuple = None, spare: bool = False) -> None:
        grad = _dense(grad) if shape is None else sum_to_shape(_dense(grad), shape)     # shape: None for outputs
        self.sums[id(node)] = grad if id(node) not in self.sums else self.sums[id(node)] + grad

    def pop(self, node):
        return self.sums.pop(id(node), None), False                                    # never spare

    def take(self, node, shape: tuple, dtype):
        return None, False

    def slot(self, node, shape: tuple, dtype):
        return None


def new_sums(recorded: bool, wanted: set = None) -> GradientSums:
    """The sums one backward keeps: plain ones when TINYGRAD_GPU_PLAIN_SUMS asks (PLAIN, read at import)."""
    return (PlainGradientSums if PLAIN else GradientSums)(recorded, wanted)


# ----------------------------------------------------------------------------- the check
def _is_array(value) -> bool:
    return hasattr(value, "__array_interface__") or hasattr(value, "__cuda_array_interface__")


def _arrays_in(value) -> list:
    """The arrays in a value a node keeps: an array, a Tensor's data, or those inside a tuple or list."""
    if isinstance(value, (tuple, list)):
        return [a for item in value for a in _arrays_in(item)]
    if _is_array(value):
        return [value]
    data = getattr(value, "data", None)
    return [data] if _is_array(data) else []


def check_spare(node, incoming, incoming_is_spare: bool, grads) -> None:
    """Raise if a backward that declares its gradients spare (backward_returns_spare, or hands_on_its_gradient
    with a spare incoming gradient) returned an array that someone else holds: its incoming gradient (unless
    that was spare itself), anything the node keeps (its saved tensors and inputs, arrays from the forward), or
    another of the gradients it returned."""
    xp = devices.array_module(node.device)
    held = [("its incoming gradient", incoming.data)] if not incoming_is_spare else []
    held += [(f"its {name}", array) for name, value in vars(node).items() for array in _arrays_in(value)]
    returned = [(i, g.data) for i, g in enumerate(grads) if g is not None and not isinstance(g, SliceGradient)]
    for n, (i, array) in enumerate(returned):
        others = held + [(f"its gradient for input {j}", other) for j, other in returned[n + 1:]]
        for what, other in others:
            if xp.shares_memory(array, other):
                declared = "backward_returns_spare" if node.backward_returns_spare else "hands_on_its_gradient"
                raise RuntimeError(f"{node!r} declares {declared}, but its gradient for input {i} "
                                   f"shares memory with {what}: it is not spare, and the engine would write "
                                   "into it. Return a new array, or drop the declaration.")
