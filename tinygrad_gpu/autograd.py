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

With ``create_graph=True`` the backward ops are themselves recorded, so the gradients can
be differentiated again.
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor, set_grad_enabled


def sum_to_shape(grad: Tensor, shape: tuple) -> Tensor:
    """Undo broadcasting: sum `grad` over the dimensions that broadcasting added or stretched."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    stretched = tuple(i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    return grad.sum(dim=tuple(range(extra)) + stretched, keepdim=True).reshape(shape)


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


def _accumulate_into_leaf(leaf: Tensor, grad: Tensor, create_graph: bool) -> None:
    """PyTorch's rule: leaf gradients add up across backward calls until someone zeroes them."""
    if leaf.grad is None:
        leaf.grad = grad.clone()            # a copy: never alias the upstream gradient or another leaf's
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

    with set_grad_enabled(create_graph):
        for node in order:
            grad = grads.pop(id(node), None)
            if grad is None:
                continue
            if wanted is not None and id(node) in wanted:
                captured[id(node)] = grad
            if isinstance(node, Tensor):
                if wanted is None:
                    _accumulate_into_leaf(node, grad, create_graph)
                continue
            if wanted is not None and id(node) not in leads_to_input:
                continue
            if node.freed:
                raise RuntimeError(f"backward: trying to go through the graph a second time ({node!r} has already "
                                   "freed what it saved). Pass retain_graph=True to the first backward() "
                                   "if you need to backward twice.")
            input_grads = node.backward(grad)
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            if not retain_graph:
                node.release()
            for child, shape, child_grad in zip(node.next_nodes, node.input_meta, input_grads):
                if child is None or child_grad is None:
                    continue
                child_grad = sum_to_shape(child_grad, shape)
                previous = grads.get(id(child))
                grads[id(child)] = child_grad if previous is None else previous + child_grad
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
