"""Check analytical gradients against numerical ones (central differences).

For a function ``fn`` of some tensors, pick a random upstream gradient ``u`` for each output
and look at the scalar ``f(x) = sum(u * fn(x))``.  Its derivative in input coordinate j is
estimated by ``(f(x + eps e_j) - f(x - eps e_j)) / (2 eps)``, with an error of order eps^2,
and compared with what ``backward`` computes.

* Small inputs and outputs: the full Jacobian, every (output, input) pair, both ways:
  one pair of evaluations per input element gives a column, one backward per output element
  a row.
* Large ones: one random direction v per call: ``(f(x + eps v) - f(x - eps v)) / (2 eps)``
  against ``sum(grad * v)``, two evaluations whatever the size; only when that fails, a
  bisection over the elements (about 4 log2(n) more evaluations) finds one to name.

Use float64 inputs: in float32 the rounding error of f swamps the eps^2 term.

``fn`` is any function of tensors: an op, a composition, or a custom op's ``Fn.apply`` in either
form of ``Function`` (passing the class itself works too). Arguments that are not tensors are
passed through unchecked, and outputs that are not tensors are ignored, as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from .autograd import grad as autograd_grad
from .tensor import Function, Tensor


class GradcheckError(AssertionError):
    pass


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _callable(fn):
    """fn itself, or fn.apply for a Function class (Square rather than Square.apply)."""
    return fn.apply if isinstance(fn, type) and issubclass(fn, Function) else fn


def _outputs(result) -> tuple:
    """The tensors among what fn returned (a custom op may return other values beside them)."""
    return tuple(o for o in _as_tuple(result) if isinstance(o, Tensor))


def _projection(outputs, upstream) -> float:
    """f = sum over outputs of sum(u * output), in float64 on the CPU."""
    return float(sum((o.numpy().astype(np.float64) * u).sum() for o, u in zip(outputs, upstream)))


def _analytical(fn_outputs, inputs, grad_outputs) -> list:
    """Vector-Jacobian products: d/dinput of sum(grad_output * output)."""
    pairs = [(o, g) for o, g in zip(fn_outputs, grad_outputs) if o.requires_grad]
    if not pairs:    # no output depends on any input through the graph: every gradient is 0
        return [np.zeros(x.shape) for x in inputs]
    grads = autograd_grad([o for o, _ in pairs], inputs, grad_outputs=[g for _, g in pairs],
                          retain_graph=True, allow_unused=True)
    return [np.zeros(x.shape) if g is None else g.numpy().astype(np.float64) for g, x in zip(grads, inputs)]


def _fail(message: str, raise_exception: bool) -> bool:
    if raise_exception:
        raise GradcheckError(message)
    return False


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0,
              full_jacobian_max: int = 64, raise_exception: bool = True) -> bool:
    """True if the gradients of `fn` at `inputs` match central differences; else raise.

    `inputs` are tensors; those with requires_grad=True are checked and must be float64.
    The error names the input (its position in `inputs`), the element, and both values.
    """
    fn, inputs = _callable(fn), _as_tuple(inputs)
    # Positions in `inputs`, so that "input 2" in a message means fn's third argument even when
    # some arguments (integer indices, constants) are not checked.
    positions = [k for k, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    checked = [inputs[k] for k in positions]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True, so there is nothing to check")
    for k, x in zip(positions, checked):
        if x.dtype != np.float64:
            raise ValueError(f"gradcheck: input {k} is {x.dtype}; use float64 so that central differences are "
                             "accurate (x.double())")
    outputs = _outputs(fn(*inputs))
    rng = np.random.default_rng(seed)
    upstream = [rng.standard_normal(o.shape) for o in outputs]

    def f() -> float:
        return _projection(_outputs(fn(*inputs)), upstream)

    n_out = sum(o.numel() for o in outputs)
    full = all(x.numel() <= full_jacobian_max for x in checked) and n_out <= full_jacobian_max
    if full:
        return _check_full_jacobian(fn, inputs, positions, checked, outputs, eps, atol, rtol, raise_exception)

    upstream_tensors = [Tensor(u, dtype=o.dtype, device=o.device) for o, u in zip(outputs, upstream)]
    analytical = _analytical(outputs, checked, upstream_tensors)
    directions = [rng.standard_normal(x.shape) for x in checked]
    numerical = _directional(f, checked, directions, eps)
    expected = float(sum((a * d).sum() for a, d in zip(analytical, directions)))
    if abs(expected - numerical) > atol + rtol * abs(numerical):
        # One number says *that* something is wrong, not *where*: bisect to an element (a few
        # more evaluations, only on failure) so the message can name it, like the full path's.
        i, index, analytical_j, numerical_j = _locate(f, checked, analytical, directions, eps)
        return _fail(f"gradcheck: input {positions[i]} (shape {checked[i].shape}), element {index}: "
                     f"d sum(u * output) / d input: analytical {analytical_j:.8g}, numerical {numerical_j:.8g} "
                     f"(u a random upstream gradient; found after the derivative along a random direction "
                     f"disagreed: analytical {expected:.8g}, numerical {numerical:.8g})", raise_exception)
    return True


def _directional(f, checked, directions, eps) -> float:
    """(f(x + eps v) - f(x - eps v)) / (2 eps) for NumPy directions v, one per checked input."""
    xp_dirs = [Tensor(d, dtype=x.dtype, device=x.device).data for d, x in zip(directions, checked)]
    originals = [x.data.copy() for x in checked]
    values = []
    for sign in (1, -1):
        for x, d, original in zip(checked, xp_dirs, originals):
            x.data[...] = original + sign * eps * d
        try:
            values.append(f())
        finally:
            for x, original in zip(checked, originals):
                x.data[...] = original
    return (values[0] - values[1]) / (2 * eps)


def _locate(f, checked, analytical, directions, eps):
    """After a failed directional check: (input number, element, analytical, numerical) of a wrong partial.

    The mismatch along v restricted to a set of elements is the sum of the mismatches of its
    halves, so keeping the worse half at each step ends, after log2(n) steps, on an element
    whose partial derivative is wrong.
    """
    def mismatch(i, elements):
        dirs = [np.zeros(x.shape) for x in checked]
        dirs[i].reshape(-1)[elements] = directions[i].reshape(-1)[elements]
        return abs(_directional(f, checked, dirs, eps) - float((analytical[i] * dirs[i]).sum()))

    i = max(range(len(checked)), key=lambda i: mismatch(i, np.arange(checked[i].numel())))
    elements = np.arange(checked[i].numel())
    while len(elements) > 1:
        left, right = elements[:len(elements) // 2], elements[len(elements) // 2:]
        elements = left if mismatch(i, left) >= mismatch(i, right) else right
    j = int(elements[0])
    unit = [np.zeros(x.shape) for x in checked]
    unit[i].reshape(-1)[j] = 1.0
    index = tuple(int(n) for n in np.unravel_index(j, checked[i].shape))
    return i, index, float(analytical[i].reshape(-1)[j]), _directional(f, checked, unit, eps)


def _check_full_jacobian(fn, inputs, positions, checked, outputs, eps, atol, rtol, raise_exception) -> bool:
    """Compare every entry d output[k] / d input[j]."""
    n_out = [o.numel() for o in outputs]
    for i, x in enumerate(checked):
        numerical = np.zeros((sum(n_out), x.numel()))
        for j in range(x.numel()):
            position = np.unravel_index(j, x.shape)
            original = x.data[position].copy()
            columns = []
            for step in (eps, -eps):
                x.data[position] = original + step
                try:
                    columns.append(np.concatenate([o.numpy().astype(np.float64).reshape(-1)
                                                   for o in _outputs(fn(*inputs))]))
                finally:
                    x.data[position] = original
            numerical[:, j] = (columns[0] - columns[1]) / (2 * eps)
        analytical = np.zeros_like(numerical)
        row = 0
        for k, o in enumerate(outputs):
            for m in range(o.numel()):
                basis = [np.zeros(p.shape) for p in outputs]
                basis[k].reshape(-1)[m] = 1.0
                g = _analytical(outputs, [x], [Tensor(b, dtype=p.dtype, device=p.device)
                                               for b, p in zip(basis, outputs)])[0]
                analytical[row] = g.reshape(-1)
                row += 1
        error = np.abs(analytical - numerical) - (atol + rtol * np.abs(numerical))
        if error.size and error.max() > 0:
            out_index, in_index = np.unravel_index(int(np.argmax(error)), error.shape)
            element = tuple(int(n) for n in np.unravel_index(in_index, x.shape))   # (1, 2), not np.int64 reprs
            return _fail(f"gradcheck: input {positions[i]} (shape {x.shape}), element {element}, "
                         f"output element {out_index}: analytical {analytical[out_index, in_index]:.8g}, "
                         f"numerical {numerical[out_index, in_index]:.8g}", raise_exception)
    return True


def gradgradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0,
                  full_jacobian_max: int = 64, raise_exception: bool = True) -> bool:
    """Check second derivatives: gradcheck the function x -> d/dx sum(u * fn(x)) built with create_graph."""
    fn, inputs = _callable(fn), _as_tuple(inputs)
    checked = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    rng = np.random.default_rng(seed + 1)
    upstream = {}

    def first_derivative(*xs):
        outputs = _outputs(fn(*xs))
        if not upstream:
            upstream["u"] = [Tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=o.device) for o in outputs]
        pairs = [(o, u) for o, u in zip(outputs, upstream["u"]) if o.requires_grad]
        grads = autograd_grad([o for o, _ in pairs], checked, grad_outputs=[u for _, u in pairs],
                              create_graph=True, allow_unused=True)
        return tuple(g if g is not None else Tensor(np.zeros(x.shape), device=x.device)
                     for g, x in zip(grads, checked))

    return gradcheck(first_derivative, inputs, eps, atol, rtol, seed, full_jacobian_max, raise_exception)
