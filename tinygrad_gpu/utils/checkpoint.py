"""Activation (gradient) checkpointing: trade a second forward pass for the memory of the activations.

A plain forward keeps every intermediate result that some backward will read: for a transformer that is
about a dozen arrays of (batch x context x width) per block, and they, not the weights, fill the memory
once batch times context grows. ``checkpoint(function, *args)`` keeps only the inputs of `function`:

    forward:   run function(*args) and keep the result, not the graph inside it;
    backward:  run function(*args) again, from the kept inputs and with the random stream and autocast
               regions the first run had, this time recording; differentiate that (tg.grad) with the
               gradient that arrived, and hand the gradients on to the inputs and the parameters inside.

The recomputation draws the same dropout masks (every generator is set back to what the forward saw:
NumPy's PCG64 state on the cpu and emu, a Philox stream's seed and offset on a GPU; one that had not drawn
yet is made afresh) and computes the same numbers, so the gradients equal those without checkpointing bit
for bit; the price is one more forward of `function` per backward (benchmarks/memory.py measures both).

Which parameters `function` uses is found by running it once recording, at the forward, and walking the
graph it made: the checkpoint's node then takes them as inputs, so their gradients reach .grad in the outer
backward, with its hooks (DistributedDataParallel's) running as for any leaf. That graph is dropped as soon
as it has been walked, so at most one checkpointed function's activations are held at a time, in the
forward as in the backward. A tensor computed outside the function (not a leaf) must come in as one of its
arguments, positional or keyword; one that reaches it otherwise, through a closure, is refused in one line.

PyTorch's ``torch.utils.checkpoint.checkpoint`` arguments: `use_reentrant` is accepted for code written for
PyTorch; both of its values run this non-reentrant way (hooks, tg.grad and parameters reached only
inside `function` behave as without checkpointing). Differentiating twice through a checkpoint
(create_graph=True) is refused.
"""
from __future__ import annotations

import contextlib

from .. import autograd, random
from ..amp import autocast_mode
from ..tensor import Function, Tensor, is_grad_enabled, set_grad_enabled

__all__ = ["checkpoint"]


def checkpoint(function, *args, use_reentrant: bool = None, preserve_rng_state: bool = True, **kwargs):
    """function(*args, **kwargs), whose activations are recomputed in backward instead of kept. Returns
    what `function` returns: one Tensor."""
    if use_reentrant not in (None, True, False):
        raise TypeError(f"checkpoint: use_reentrant must be True, False or None, got {use_reentrant!r}")
    if not is_grad_enabled():               # nothing will be differentiated: nothing to keep anyway
        return function(*args, **kwargs)
    rng = random.get_all_rng_states() if preserve_rng_state else None
    regions = autocast_mode.regions_now()
    first_node = Function.recorded          # the nodes numbered from here on are the function's
    out = function(*args, **kwargs)
    if not isinstance(out, Tensor):
        raise TypeError(f"checkpoint: the function must return one Tensor, got {type(out).__name__}; wrap a "
                        "function with several results in one checkpoint each")
    if not out.requires_grad:
        return out
    tensors = _tensors_in(args, kwargs)
    parameters = _leaves_inside(out, tensors, first_node)
    return Checkpoint.apply(*tensors, *parameters, out=out.detach(), function=function, args=args, kwargs=kwargs,
                            rng=rng, regions=regions)


class Checkpoint(Function):
    """The node standing for a whole checkpointed function: its inputs are the function's Tensor arguments, then
    the leaves (parameters) it reached. checkpoint() has run the function already, to find those leaves; forward
    is handed that output (its graph dropped) and keeps what backward needs to run the function again."""

    def forward(self, *inputs, out, function, args, kwargs, rng, regions):
        self.function, self.args, self.kwargs, self.rng, self.regions = function, args, kwargs, rng, regions
        self.parameters = inputs[len(_tensors_in(args, kwargs)):]
        return out.data

    def backward(self, grad):
        if is_grad_enabled():               # the engine records the backward: create_graph=True
            raise RuntimeError("checkpoint: differentiating twice (create_graph=True) through a checkpointed "
                               "function is not supported; call the function without checkpoint for that")
        # The arguments again, cut from the outer graph, wanting gradients where the originals did.
        args = [_cut(a) for a in self.args]
        kwargs = {name: _cut(a) for name, a in self.kwargs.items()}
        with _random_state_set(self.rng), autocast_mode.regions_as(self.regions), set_grad_enabled(True):
            out = self.function(*args, **kwargs)
        tensors = _tensors_in(args, kwargs)
        wanted = [a for a in tensors if a.requires_grad]
        grads = iter(autograd.grad(out, wanted + list(self.parameters), grad, allow_unused=True))
        return (*(next(grads) if a.requires_grad else None for a in tensors), *grads)


def _tensors_in(args, kwargs) -> list:
    """The Tensor arguments, positional then keyword: the first inputs of the checkpoint's node."""
    return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]


def _cut(argument):
    """A Tensor argument as a new leaf with the same values, requiring grad as it did; anything else as it is."""
    return argument.detach().requires_grad_(argument.requires_grad) if isinstance(argument, Tensor) else argument


def _leaves_inside(out: Tensor, arguments: list, first_node: int) -> list:
    """The leaves that require grad which `out`'s graph reaches without passing through `arguments`: the
    parameters `function` used, in the order first met. A node recorded before the function ran (numbered
    below `first_node`) is a tensor computed outside it that reached it some other way than as an argument
    (a closure): refused, since the recomputation would differentiate through the outer graph too. Except a
    parameter's cast that the autocast region kept from earlier: the recomputation, in a region of its own,
    casts the parameter again, so the walk goes on to the parameter."""
    seen = {id(t._node()) for t in arguments}         # the walk stops at the arguments
    leaves, stack = [], [out._node()]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Tensor):
            leaves.append(node)
        elif node.sequence_nr < first_node and not autocast_mode.is_kept_cast(node):
            raise ValueError(f"checkpoint: the function uses a tensor computed outside it (by {node.op_name()}) "
                             "that is not among its arguments; pass that tensor as an argument")
        else:
            stack.extend(node.next_nodes)
    return leaves


@contextlib.contextmanager
def _random_state_set(state):
    """Inside: the generators as `state` left them (None: as they are); after: as they were."""
    if state is None:
        yield
        return
    now = random.get_all_rng_states()
    random.set_all_rng_states(state)
    try:
        yield
    finally:
        random.set_all_rng_states(now)
