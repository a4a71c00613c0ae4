"""The backward pass: walk the graph from the outputs to the leaves, applying the chain rule.

The graph's nodes are ``Function`` objects (one per recorded op) and leaf tensors that
require grad.  ``backward`` does three things:

1. orders every node reachable from the outputs so that a node comes after all nodes that
   consume its result (an iterative depth-first search: no recursion limit, so a chain of
   100,000 ops is fine);
2. visits the nodes in that order, so each node's gradient is complete when it is visited,
   calls its ``backward`` once, and adds the results into its inputs' gradients, summing
   away broadcast dimensions here, in this one place;
3. frees what each node saved for backward (unless ``retain_graph``), so activations are
   released as soon as they have been used.

Adding up gradients costs memory traffic, so step 2 is careful about it: a sum the engine has
made itself is nobody else's array, and further contributions are added into it in place; and
the gradient of a slice (``x[2:5]``, each piece of ``split``) arrives as a ``SliceGradient``,
added into its place of one buffer instead of into a zero-filled copy of the whole input each.

With ``create_graph=True`` the backward ops are themselves recorded, so the gradients can
be differentiated again.
"""
from __future__ import annotations

import numpy as np

from . import device as devices
from .tensor import Tensor, set_grad_enabled


def sum_to_shape(grad: Tensor, shape: tuple) -> Tensor:
    """Undo broadcasting: sum `grad` over the dimensions that broadcasting added or stretched."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    stretched = tuple(i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    return grad.sum(dim=tuple(range(extra)) + stretched, keepdim=True).reshape(shape)


class SliceGradient:
    """The gradient that x[index] passes back to x: `values` at `index` (ints and slices only), zero
    everywhere else. GetItem's backward returns one when no graph is recorded; see _accumulate."""

    def __init__(self, values: Tensor, shape: tuple, index):
        self.values, self.shape, self.index = values, shape, index
        self.dtype = values.dtype

    def dense(self) -> Tensor:
        out = devices.array_module(self.values.device).zeros(self.shape, dtype=self.dtype)
        out[self.index] = self.values.data
        return Tensor._wrap(out, self.values.device)


def _dense(grad) -> Tensor:
    return grad.dense() if isinstance(grad, SliceGradient) else grad


def _accumulate(grads: dict, owned: set, key: int, grad, create_graph: bool, fresh: bool) -> None:
    """Add `grad` (a Tensor or a SliceGradient) into grads[key].

    `owned` holds the keys whose gradient is an array nobody else holds: a sum or a slice's zero
    buffer made here, or a fresh result of a backward (Function.fresh_gradients). Later
    contributions are added into it in place. Anything else may be shared (Add's backward hands
    one gradient to both inputs) and is never written to.
    """
    previous = grads.get(key)
    if previous is None:
        grads[key] = grad                       # a SliceGradient stays sparse until another one comes
        if fresh and not create_graph and not isinstance(grad, SliceGradient):
            owned.add(key)
        return
    if create_graph or previous.dtype != grad.dtype:       # recorded (or promoting) sums: new tensors
        grads[key] = _dense(previous) + _dense(grad)
        return
    if key not in owned:                        # the first sum makes a buffer of the engine's own
        if not isinstance(previous, SliceGradient) and not isinstance(grad, SliceGradient):
            if fresh:                           # or is the fresh result itself, which nobody else holds
                grad.data += previous.data
                grads[key] = grad
            else:
                grads[key] = previous + grad
            owned.add(key)
            return
        previous = previous.dense() if isinstance(previous, SliceGradient) else previous.clone()
        owned.add(key)
    if isinstance(grad, SliceGradient):
        previous.data[grad.index] += grad.values.data
    else:
        previous.data += grad.data
    grads[key] = previous


def _topological_order(roots) -> list:
    """Every node reachable from `roots`, each before the nodes its inputs came from."""
    order, seen = [], set()
    stack = [(node, False) for node in roots]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if not isinstance(node, Tensor):
            stack.extend((child, False) for child in node.next_nodes if child is not None and id(child) not in seen)
    order.reverse()
    return order


def _root_gradients(outputs, grad_outputs) -> list:
    grads = []
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(f"backward: output {i} does not require grad: none of the tensors it was computed "
                               "from has requires_grad=True, or it was computed under tg.no_grad()")
        given = None if grad_outputs is None else grad_outputs[i]
        if given is None:
            if out.numel() != 1:
                raise RuntimeError(f"backward: output {i} has shape {out.shape}; a gradient can only be implied for "
                                   "a single-element output. Pass gradient= (a tensor of the output's shape), "
                                   "or reduce the output first, e.g. .sum()")
            given = Tensor._wrap(out.data * 0 + 1, out.device)
        elif not isinstance(given, Tensor):
            given = Tensor(given, dtype=out.dtype, device=out.device)
        if given.shape != out.shape:
            raise RuntimeError(f"backward: gradient has shape {given.shape} but output {i} has shape {out.shape}")
        if given.device != out.device:
            raise RuntimeError(f"backward: gradient is on {given.device} but output {i} is on {out.device}")
        grads.append(given)
    return grads


def _accumulate_into_leaf(leaf: Tensor, grad: Tensor, create_graph: bool, made_here: bool) -> None:
    """PyTorch's rule: leaf gradients add up across backward calls until someone zeroes them."""
    if leaf.grad is None:
        # a copy, never an alias of the upstream gradient or another leaf's; but a sum the engine
        # made is nobody else's array
        leaf.grad = grad if made_here else grad.clone()
    elif create_graph or leaf.grad.requires_grad:
        leaf.grad = leaf.grad + grad        # keep the graph of the old gradient intact
    else:
        leaf.grad.data += grad.data         # in place: no new buffer for every micro-batch


def run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=None):
    """The engine behind ``Tensor.backward`` and ``tg.grad``.

    Without `inputs`, gradients accumulate into the ``.grad`` of every leaf.  With
    `inputs`, nothing is accumulated and the gradients of exactly those tensors are
    returned (None where no gradient reaches one).
    """
    if retain_graph is None:
        retain_graph = create_graph
    grads = {}   # id(node) -> gradient of that node's output so far
    roots = []
    for out, grad in zip(outputs, _root_gradients(outputs, grad_outputs)):
        node = out._node()
        roots.append(node)
        grads[id(node)] = grad if id(node) not in grads else grads[id(node)] + grad
    order = _topological_order(roots)

    wanted, captured = None, {}
    if inputs is not None:
        wanted = {id(t._node()) for t in inputs if t._node() is not None}
        # Only nodes from which some wanted input can be reached need their backward run.
        leads_to_input = set()
        for node in reversed(order):
            if id(node) in wanted or (not isinstance(node, Tensor)
                                      and any(c is not None and id(c) in leads_to_input for c in node.next_nodes)):
                leads_to_input.add(id(node))

    owned = set()
    with set_grad_enabled(create_graph):
        for node in order:
            grad = grads.pop(id(node), None)
            if grad is None:
                continue
            made_here = id(node) in owned or isinstance(grad, SliceGradient)
            owned.discard(id(node))
            grad = _dense(grad)
            if wanted is not None and id(node) in wanted:
                captured[id(node)] = grad
            if isinstance(node, Tensor):
                if wanted is None:
                    _accumulate_into_leaf(node, grad, create_graph, made_here)
                continue
            if wanted is not None and id(node) not in leads_to_input:
                continue
            if node.freed:
                raise RuntimeError(f"backward: trying to go through the graph a second time ({node!r} has already "
                                   "freed what it saved). Pass retain_graph=True to the first backward() "
                                   "if you need to backward twice.")
            node.grad_is_spare = made_here and id(node) not in captured      # a captured one goes to the caller
            input_grads = node.backward(grad)
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            if not retain_graph:
                node.release()
            for child, shape, child_grad in zip(node.next_nodes, node.input_meta, input_grads):
                if child is None or child_grad is None:
                    continue
                if not isinstance(child_grad, SliceGradient):
                    child_grad = sum_to_shape(child_grad, shape)
                _accumulate(grads, owned, id(child), child_grad, create_graph, node.fresh_gradients)
    return captured


def backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False) -> None:
    run_backward(list(outputs), grad_outputs, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned (not accumulated into .grad).

    ``tg.grad(tg.grad(y, x, create_graph=True)[0].sum(), x)`` gives second derivatives.
    """
    single_output = isinstance(outputs, Tensor)
    outputs = [outputs] if single_output else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is not None and isinstance(grad_outputs, (Tensor, np.ndarray)):
        grad_outputs = [grad_outputs]
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} does not require grad, so no gradient can be computed for it")
    captured = run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=inputs)
    results = []
    for i, t in enumerate(inputs):
        g = captured.get(id(t._node()))
        if g is None and not allow_unused:
            raise RuntimeError(f"grad: input {i} was not used to compute the outputs; "
                               "pass allow_unused=True to get None for it")
        results.append(g)
    return tuple(results)
