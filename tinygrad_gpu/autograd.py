"""The backward pass: walk the graph from the outputs to the leaves, applying the chain rule.

The graph's nodes are ``Function`` objects (one per recorded op) and the leaf tensors that
require grad. ``run_backward`` is the whole algorithm:

1. order every node reachable from the outputs so that each comes after all the nodes that
   consume its result (an iterative depth-first search: no recursion limit, so a chain of
   100,000 ops is fine);
2. visit the nodes in that order, so that a node's gradient is complete when its turn
   comes; call its ``backward`` once, and add what it returns into its inputs' gradients
   (summing away broadcast dimensions on the way: ``gradient_sums.sum_to_shape``); a leaf's
   total goes into its ``.grad`` (``_accumulate_into_leaf``);
3. free what each node saved for backward (unless ``retain_graph``), so activations are
   released as soon as they have been used.

What a backward covers beyond that (``tg.grad``'s inputs and the nodes leading to them, the
casts whose backward waits to run together) is ``_Scope``'s to say, in one place.

The sums live in ``GradientSums`` (``gradient_sums.py``), which also explains the one
optimisation of this engine: adding into arrays that nobody else holds instead of copying.

With ``create_graph=True`` the backward ops are themselves recorded, so the gradients can
be differentiated again. An op whose backward works on arrays (a CUDA kernel, or its NumPy
reference) records nothing; it names a ``composition`` instead, the same op written as
Tensor ops, and that is what this engine differentiates when a graph is wanted
(``_differentiate_composition``).

Two hooks let code outside watch a backward run (DistributedDataParallel uses both, to start
averaging gradients across processes while backward is still going): a leaf's post-accumulate
hook runs as soon as the leaf's ``.grad`` is complete for this backward, and ``queue_callback``
runs a function once the whole backward has finished.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import numpy as np

from . import device as devices
from . import gradient_sums
from .amp import autocast_mode
from .gradient_sums import GradientSums
from .tensor import Function, Tensor, set_grad_enabled  # noqa: F401  (Function: tg.autograd.Function, PyTorch's name)


def run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=None) -> dict:
    """The engine behind ``Tensor.backward`` and ``tg.grad``: the chain rule, node by node.

    Without `inputs`, gradients accumulate into the ``.grad`` of every leaf. With `inputs`,
    nothing is accumulated, and the gradients of exactly those tensors are returned, keyed
    by the id of their node.
    """
    retain_graph = create_graph if retain_graph is None else retain_graph
    root_grads = _root_gradients(outputs, grad_outputs)      # d output / d output: ones, or the caller's
    roots = [out._node() for out in outputs]
    order = _topological_order(roots)           # 1. each node before the nodes its inputs came from
    scope = _Scope(order, inputs, create_graph)
    sums = gradient_sums.new_sums(recorded=create_graph, wanted=scope.wanted)
    for node, grad in zip(roots, root_grads):
        sums.add(node, grad)
    scope.offer_places(sums)
    # Grad mode records the backward only for create_graph; autocast is off: each backward computes in the dtypes
    # its forward chose (amp/autocast_mode.py).
    waiting, capturing, into_leaves, passing = (scope.waiting, scope.wanted is not None, scope.into_leaves,
                                                scope.passes_over_some)          # (locals: read once per node)
    with _queued_callbacks_run_after(), set_grad_enabled(create_graph), autocast_mode.suspended():
        for node in order:                      # 2. so a node's gradient is complete when its turn comes
            if id(node) in waiting:
                continue                                        # a leaf of casts that wait: its turn comes last
            with devices.use(node.device):                      # on a GPU: where this node lives
                grad, spare = sums.pop(node)                    # the sum of what its consumers sent back
                if grad is None:
                    continue                                    # no path from the outputs carries a gradient
                if capturing:
                    spare = scope.capture(node, grad, spare)    # tg.grad: an input's gradient is returned
                if isinstance(node, Tensor):                    # a leaf: into its .grad
                    if into_leaves:
                        _accumulate_into_leaf(node, grad, spare, create_graph)
                    continue
                if passing and scope.passes_over(node, grad):
                    continue
                input_grads = _call_backward(node, grad, spare, create_graph, sums)     # the local chain rule
                if not retain_graph:
                    node.release()              # 3. what it saved for backward is freed as soon as it is used
                made_spare = node.backward_returns_spare or (node.hands_on_its_gradient and spare)
                for child, shape, child_grad in zip(node.next_nodes, node.input_shapes, input_grads):
                    if child is not None and child_grad is not None:
                        sums.add(child, child_grad, shape, spare=made_spare)     # into each input's sum
        scope.run_waiting(sums, retain_graph)
    return scope.captured


class _Scope:
    """What one backward covers, beyond the chain rule.

    * ``tg.grad(outputs, inputs)``: the gradients of `inputs` are captured (``wanted``, ``captured``), no
      leaf's .grad changes, and only the nodes on a path to an input run their backward (``needed``).
    * A node whose class has ``backward_together`` (fused.CastTogether, autocast's casts of a region's
      parameters) and whose input is a leaf waits, and so does that leaf: once every other node is done,
      each such class's waiting nodes on one device run their backward together (one launch for all of
      them), and then the waiting leaves get their gradients and run their hooks (``run_waiting``).
    """

    def __init__(self, order: list, inputs, create_graph: bool):
        self.order, self.create_graph = order, create_graph
        self.into_leaves = inputs is None
        self.wanted = None if inputs is None else {id(t._node()) for t in inputs}
        self.needed = None if inputs is None else _nodes_leading_to(self.wanted, order)
        # Casts that wait (passes_over) only where they are, and only when .grad is made without a graph.
        self.casts_wait = self.into_leaves and not create_graph and any(map(_runs_together, order))
        self.passes_over_some = self.needed is not None or self.casts_wait
        self.captured = {}
        self.together = {}          # (class, device) -> [(node, grad)]
        self.waiting = {}           # id(leaf) -> leaf, in the order first met

    def offer_places(self, sums: GradientSums) -> None:
        """The gradients that may get places in one array (GradientSums.slot): the leaves whose .grad this
        backward makes, and the casts that run together."""
        if not self.into_leaves or self.create_graph:
            return
        for node in self.order:
            if isinstance(node, Tensor) and node.grad is None:          # a .grad: lives until zero_grad
                sums.placeable[id(node)] = (node.shape, node.dtype, node.device, "kept")
            elif _runs_together(node):                                  # gone once cast back
                sums.placeable[id(node)] = (node.input_shapes[0], node.out_dtype, node.device, "passing")

    def capture(self, node, grad, spare: bool) -> bool:
        """Keep the gradient of a tg.grad input; whether `grad` is still spare (the caller's array now)."""
        if self.wanted is not None and id(node) in self.wanted:
            self.captured[id(node)] = grad
            return False
        return spare

    def passes_over(self, node, grad) -> bool:
        """Does this node's backward not run now? Not at all when the node is off every path to a tg.grad
        input; later when it waits to run together with others of its class: then it is queued with its
        gradient, and so is the leaf it leads to."""
        if self.needed is not None:
            return id(node) not in self.needed
        if self.casts_wait and _runs_together(node):
            self.together.setdefault((type(node), node.device), []).append((node, grad))
            self.waiting.setdefault(id(node.next_nodes[0]), node.next_nodes[0])
            return True
        return False

    def run_waiting(self, sums: GradientSums, retain_graph: bool) -> None:
        """Once every other node is done: each class's waiting nodes on one device in one backward_together,
        then the waiting leaves' gradients into their .grad (and their hooks)."""
        for (cls, device), pairs in self.together.items():
            nodes = [node for node, _ in pairs]
            for node in nodes:
                node._sums_in_backward = sums                   # for gradient_slot, as in _call_backward
            try:
                with devices.use(device):
                    input_grads = cls.backward_together(nodes, [grad for _, grad in pairs])
            finally:
                for node in nodes:
                    del node._sums_in_backward
            for node, child_grad in zip(nodes, input_grads):
                sums.add(node.next_nodes[0], child_grad, node.input_shapes[0], spare=cls.backward_returns_spare)
                if not retain_graph:
                    node.release()
        for leaf in self.waiting.values():
            with devices.use(leaf.device):
                grad, spare = sums.pop(leaf)
                _accumulate_into_leaf(leaf, grad, spare, create_graph=False)     # nothing waits under create_graph


def _runs_together(node) -> bool:
    """Does this node's backward wait, to run with others of its class (backward_together), when the graph of the
    backward is not recorded? A node whose class has backward_together and whose input is a leaf."""
    return not isinstance(node, Tensor) and type(node).backward_together is not None \
        and isinstance(node.next_nodes[0], Tensor)


# ----------------------------------------------------------------------------- hooks
_post_accumulate_grad_hooks = {}     # id(leaf) -> {handle id: hook(leaf)}; an entry goes when its leaf does
_queued_callbacks = []          # one list per backward running now (a backward may run inside another)


class RemovableHandle:
    """What registering a hook returns: remove() unregisters it."""
    _numbers = itertools.count()        # not id(self): a discarded handle's id is reused by the next one

    def __init__(self, hooks: dict):
        self.hooks, self.id = hooks, next(self._numbers)

    def remove(self) -> None:
        self.hooks.pop(self.id, None)


def register_post_accumulate_grad_hook(leaf: Tensor, hook) -> RemovableHandle:
    """Run hook(leaf) each time a backward has finished adding into ``leaf.grad``."""
    if leaf._ctx is not None or not leaf.requires_grad:
        raise RuntimeError("register_post_accumulate_grad_hook: only a leaf tensor that requires grad has a .grad "
                           "to accumulate into")
    hooks = _post_accumulate_grad_hooks.get(id(leaf))
    if hooks is None:
        hooks = _post_accumulate_grad_hooks[id(leaf)] = {}
        weakref.finalize(leaf, _post_accumulate_grad_hooks.pop, id(leaf), None)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


@contextlib.contextmanager
def _queued_callbacks_run_after():
    """Around a backward: once it has finished, the callbacks its hooks queued run, in order (none if it failed)."""
    _queued_callbacks.append([])
    try:
        yield
        queued = _queued_callbacks[-1]
    finally:
        _queued_callbacks.pop()
    for callback in queued:
        callback()


def queue_callback(callback) -> None:
    """Run callback() once the backward now running has finished (call it from a hook)."""
    if not _queued_callbacks:
        raise RuntimeError("queue_callback: no backward is running; call it from a hook during backward()")
    _queued_callbacks[-1].append(callback)


def _call_backward(node, grad: Tensor, spare: bool, create_graph: bool, sums: GradientSums) -> tuple:
    """One gradient (or None) per input of `node`, for the gradient `grad` of its output."""
    if node.freed:
        raise RuntimeError(f"backward: trying to go through the graph a second time ({node!r} has already freed "
                           "what it saved). Pass retain_graph=True to the first backward() if you need to "
                           "backward twice.")
    if create_graph and node.composition is not None:
        return _differentiate_composition(node, grad)
    node.grad_output_is_spare = spare
    node._sums_in_backward = sums
    try:
        input_grads = node.backward(grad)
    finally:
        del node._sums_in_backward          # back to the class's None; release() keeps no trace of it
    input_grads = input_grads if isinstance(input_grads, tuple) else (input_grads,)
    if gradient_sums.CHECK_SPARE and (node.backward_returns_spare or (node.hands_on_its_gradient and spare)):
        gradient_sums.check_spare(node, grad, spare, input_grads)
    return input_grads


def _differentiate_composition(node, output_grad: Tensor) -> tuple:
    """The recorded backward of an op whose own backward works on arrays: recompute the op from its
    inputs as its composition of Tensor ops, and differentiate that with this engine. Each input
    goes in through a copy of its own, so an input given twice gets each use's share once."""
    inputs = [t.clone() if t.requires_grad else t for t in node.inputs]
    out = node.composition(*inputs, **node.options)
    wanted = [t for t in inputs if t.requires_grad]
    grads = iter(grad(out, wanted, output_grad, retain_graph=True, create_graph=True, allow_unused=True))
    return tuple(next(grads) if t.requires_grad else None for t in inputs)


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


def _nodes_leading_to(wanted: set, order: list) -> set:
    """For tg.grad: the ids of the Function nodes whose backward leads to a wanted node; no other
    backward needs to run."""
    needed = set()
    for node in reversed(order):                # the inputs of each node before the node
        if not isinstance(node, Tensor) and any(child is not None and (id(child) in wanted or id(child) in needed)
                                                for child in node.next_nodes):
            needed.add(id(node))
    return needed


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
            with devices.use(out.device):
                given = Tensor._wrap(devices.array_module(out.device).ones_like(out.data), out.device)
        elif not isinstance(given, Tensor):
            given = Tensor(given, dtype=out.dtype, device=out.device)
        if given.shape != out.shape:
            raise RuntimeError(f"backward: gradient has shape {given.shape} but output {i} has shape {out.shape}")
        if given.device != out.device:
            raise RuntimeError(f"backward: gradient is on {given.device} but output {i} is on {out.device}")
        grads.append(given)
    return grads


def _accumulate_into_leaf(leaf: Tensor, grad: Tensor, spare: bool, create_graph: bool) -> None:
    """A leaf's gradient for this backward, complete: added into its .grad by PyTorch's rule (leaf gradients
    add up across backward calls until someone zeroes them), then its post-accumulate hooks run."""
    if leaf.grad is None:
        leaf.grad = grad if spare else grad.clone()      # never an alias of another gradient or the caller's
    elif create_graph or leaf.grad.requires_grad:
        leaf.grad = leaf.grad + grad                      # recorded: keep the graph of each intact
    else:
        leaf.grad.data += grad.data                       # in place: no new buffer for every micro-batch
    hooks = _post_accumulate_grad_hooks.get(id(leaf)) if _post_accumulate_grad_hooks else None
    for hook in list(hooks.values()) if hooks else ():
        hook(leaf)


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
