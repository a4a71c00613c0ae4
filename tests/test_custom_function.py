"""Ops of your own, written the PyTorch way: tg.autograd.Function with static forward(ctx, ...) and
backward(ctx, ...) on Tensors (tinygrad_gpu/ops/custom_function.py), beside our array-level form."""
import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.ops.elementwise import Mul
from tinygrad_gpu.tensor import Function


class Square(tg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return 2 * x * grad


class ExpWithMask(tg.autograd.Function):
    """exp(x), the mask x > 0 (float, marked non-differentiable) and argmax (integer): one output carries the
    gradient. Saves its output, which backward gets linked to the node, so the second derivative works."""
    seen_grads = []

    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        mask = (x > 0).float()
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(out)
        return out, mask, x.argmax()

    @staticmethod
    def backward(ctx, grad, grad_mask, grad_index):
        ExpWithMask.seen_grads.append((grad_mask, grad_index))
        out, = ctx.saved_tensors
        return grad * out


def written_for(base):
    """Cube and MulAdd, written once against a Function base class: ours (tg.autograd.Function) or
    torch.autograd.Function, so that the comparison with PyTorch runs the very same code in both engines."""
    class Cube(base):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, grad):
            x, = ctx.saved_tensors
            return 3 * x * x * grad

    class MulAdd(base):
        """x * y + alpha * x, alpha a Python number."""
        seen_needs_input_grad = []

        @staticmethod
        def forward(ctx, x, y, alpha):
            ctx.save_for_backward(x, y)
            ctx.alpha = alpha
            MulAdd.seen_needs_input_grad.append(tuple(ctx.needs_input_grad))
            return x * y + alpha * x

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            grad_x = grad * (y + ctx.alpha) if ctx.needs_input_grad[0] else None
            grad_y = grad * x if ctx.needs_input_grad[1] else None
            return grad_x, grad_y, None

    return Cube, MulAdd


Cube, MulAdd = written_for(tg.autograd.Function)


def float64(data, device, requires_grad=True):
    return tg.tensor(np.asarray(data, dtype=np.float64), dtype=tg.float64, device=device,
                     requires_grad=requires_grad)


def random64(shape, device, seed=0, requires_grad=True):
    return float64(np.random.default_rng(seed).uniform(-1.5, 1.5, shape), device, requires_grad)


# ----------------------------------------------------------------------------- the PyTorch form
def test_square_matches_the_analytic_gradient_and_gradcheck(device):
    x = float64([1.0, -2.0, 3.0], device)
    y = Square.apply(x)
    assert y.requires_grad and repr(y.grad_fn) == "<SquareBackward>"
    np.testing.assert_allclose(y.numpy(), [1, 4, 9])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, -4, 6])
    assert x.grad.dtype == tg.float64 and x.grad.device == x.device
    assert tg.gradcheck(Square.apply, (random64((3, 4), device),))
    assert tg.gradcheck(Square, (random64((9, 10), device),))          # the class itself; random-direction path
    assert tg.gradgradcheck(Square.apply, (random64((2, 3), device),))


def test_forward_runs_without_recording(device):
    seen = []

    class Probe(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(tg.is_grad_enabled())
            y = x * 2 + 1
            seen.append(y.requires_grad)
            return y

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = float64([1.0, 2.0], device)
    y = Probe.apply(x)
    assert seen == [False, False]
    assert y.grad_fn is not None and y.grad_fn.next_nodes == (x,)       # one node, straight to the leaf
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2])


def test_a_non_tensor_argument_and_needs_input_grad(device):
    x, y = float64([1.0, 2.0], device), float64([3.0, -1.0], device, requires_grad=False)
    MulAdd.seen_needs_input_grad.clear()
    out = MulAdd.apply(x, y, 2.5)
    assert MulAdd.seen_needs_input_grad == [(True, False, False)]
    np.testing.assert_allclose(out.numpy(), [1 * 3 + 2.5, 2 * -1 + 5])
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2.5, -1 + 2.5])
    assert y.grad is None
    y.requires_grad_()
    MulAdd.seen_needs_input_grad.clear()
    assert tg.gradcheck(MulAdd.apply, (random64((3, 4), device, 1), random64((3, 4), device, 2), 2.5))
    assert MulAdd.seen_needs_input_grad[0] == (True, True, False)
    assert tg.gradgradcheck(MulAdd.apply, (random64((2, 3), device, 1), random64((2, 3), device, 2), -0.5))


def test_a_broadcast_input_gets_its_gradient_summed_back(device):
    x, y = float64([[1.0, 2.0], [3.0, 4.0]], device), float64([10.0, 20.0], device)
    MulAdd.apply(x, y, 0.0).sum().backward()              # backward returns grad * x, of x's shape, for y
    np.testing.assert_allclose(y.grad.numpy(), [4, 6])


def test_no_graph_when_nothing_requires_grad_or_under_no_grad(device):
    x = float64([1.0, 2.0], device, requires_grad=False)
    assert not Square.apply(x).requires_grad
    w = float64([1.0, 2.0], device)
    with tg.no_grad():
        MulAdd.seen_needs_input_grad.clear()
        out = MulAdd.apply(w, w, 1.0)
    assert not out.requires_grad and out.grad_fn is None
    assert MulAdd.seen_needs_input_grad == [(False, False, False)]


def test_mark_non_differentiable_and_integer_outputs(device):
    x = float64([0.5, -1.0, 2.0], device)
    ExpWithMask.seen_grads.clear()
    out, mask, index = ExpWithMask.apply(x)
    assert out.requires_grad and not mask.requires_grad and not index.requires_grad
    assert index.item() == 2 and mask.tolist() == [1, 0, 1]
    (out * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(x.numpy()))
    (grad_mask, grad_index), = ExpWithMask.seen_grads         # zeros for the others, as in PyTorch
    assert grad_mask.shape == (3,) and not grad_mask.numpy().any()
    assert grad_index.shape == () and grad_index.dtype == tg.int64
    assert tg.gradcheck(lambda t: ExpWithMask.apply(t)[0], (random64((3, 4), device),))


def test_a_saved_output_is_linked_to_the_node_so_second_derivatives_see_it(device):
    x = float64([0.5, -1.0, 2.0], device)
    out, _, _ = ExpWithMask.apply(x)
    first, = tg.grad(out.sum(), x, create_graph=True)
    second, = tg.grad(first.sum(), x)
    np.testing.assert_allclose(second.numpy(), np.exp(x.numpy()))
    assert tg.gradgradcheck(lambda t: ExpWithMask.apply(t)[0], (random64((2, 3), device),))


def test_second_derivative_through_a_custom_op(device):
    x = float64([1.0, -2.0, 0.5], device)
    first, = tg.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert first.requires_grad
    np.testing.assert_allclose(first.numpy(), 3 * x.numpy() ** 2)
    second, = tg.grad(first.sum(), x)
    np.testing.assert_allclose(second.numpy(), 6 * x.numpy())
    assert tg.gradgradcheck(Cube.apply, (random64((3, 4), device),))


def test_without_create_graph_backward_records_nothing(device):
    x = float64([1.0, 2.0], device)
    g, = tg.grad(Cube.apply(x).sum(), x)
    assert not g.requires_grad


def test_a_gradient_of_another_dtype_takes_its_inputs_dtype(device):
    class Float32Gradient(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return (grad * 2).float()

    x = float64([1.0, 2.0], device)
    Float32Gradient.apply(x).sum().backward()
    assert x.grad.dtype == tg.float64
    np.testing.assert_allclose(x.grad.numpy(), [2, 2])


def test_a_node_that_saved_nothing_can_be_gone_through_twice_and_one_that_saved_cannot(device):
    class Double(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None

    x = float64([1.0, 2.0], device)
    ones = tg.ones(2, dtype=tg.float64, device=device)
    y = Double.apply(x, 2.0)
    y.backward(ones)
    y.backward(ones)                                  # as in PyTorch: nothing saved, nothing freed
    np.testing.assert_allclose(x.grad.numpy(), [4, 4])
    z = Square.apply(x)
    z.backward(ones)
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward(ones)


def test_returning_an_input_gives_a_new_tensor_on_the_graph(device):
    class Identity(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 3                          # not the identity's gradient: proves this backward ran

    x = float64([1.0, 2.0], device)
    y = Identity.apply(x)
    assert y is not x and x.grad_fn is None and y.grad_fn is not None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3, 3])


def test_ctx_attributes_are_forwards_own_and_the_graph_draws(device):
    class Shift(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, by):
            ctx.output, ctx.device_name = "free to use", x.device      # names of forward's own choosing
            return x + by

        @staticmethod
        def backward(ctx, grad):
            assert ctx.output == "free to use"
            return grad, None

    x = float64([1.0, 2.0], device)
    y = Shift.apply(x, 1.0)
    assert "shift" in tg.viz.to_dot(y)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1, 1])


def test_setup_context_form(device):
    class Scale(tg.autograd.Function):              # PyTorch 2's split form: forward without ctx
        @staticmethod
        def forward(x, factor):
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None

    x = float64([1.0, 2.0], device)
    Scale.apply(x, 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3, 3])
    Scale.apply(x, factor=2.0).sum().backward()         # a keyword becomes an input, as in PyTorch
    np.testing.assert_allclose(x.grad.numpy(), [5, 5])


# ----------------------------------------------------------------------------- against PyTorch
def test_the_same_ops_written_for_torch_agree(device):
    torch = pytest.importorskip("torch")

    TorchCube, TorchMulAdd = written_for(torch.autograd.Function)

    rng = np.random.default_rng(3)
    a, b, u = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    x, y = float64(a, device), float64(b, device)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, tout = MulAdd.apply(x, y, 1.5), TorchMulAdd.apply(tx, ty, 1.5)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    (out * tg.tensor(u, dtype=tg.float64, device=device)).sum().backward()
    (tout * torch.tensor(u)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)

    x, tx = float64(a, device), torch.tensor(a, requires_grad=True)
    first, = tg.grad(Cube.apply(x).sum(), x, create_graph=True)
    tfirst, = torch.autograd.grad(TorchCube.apply(tx).sum(), tx, create_graph=True)
    second, = tg.grad((first * first).sum(), x)
    tsecond, = torch.autograd.grad((tfirst * tfirst).sum(), tx)
    np.testing.assert_allclose(first.detach().numpy(), tfirst.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------- misuse: clear errors
def test_the_wrong_number_of_gradients_is_a_clear_error(device):
    class TwoGradients(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, alpha):
            return x * y * alpha

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    x, y = float64([1.0], device), float64([2.0], device)
    with pytest.raises(RuntimeError, match=r"TwoGradients\.backward returned 2 gradients, but forward took 3 "
                                           r"arguments \(Tensor, Tensor, non-tensor\).*return grad_0, grad_1, None"):
        TwoGradients.apply(x, y, 2.0).sum().backward()


def test_extra_none_gradients_are_allowed_but_not_a_gradient_for_a_number(device):
    class ExtraNone(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, None

    class NumberGradient(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha):
            return x * alpha

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, grad

    x = float64([1.0], device)
    ExtraNone.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2])
    with pytest.raises(RuntimeError, match=r"NumberGradient\.backward returned a gradient for argument 1, which is "
                                           "not a Tensor; return None"):
        NumberGradient.apply(x, 2.0).sum().backward()


def test_a_gradient_of_the_wrong_shape_is_a_clear_error(device):
    class WrongShape(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad[:2]

    x = float64([1.0, 2.0, 3.0], device)
    with pytest.raises(RuntimeError, match=r"WrongShape\.backward returned a gradient of shape \(2,\) for argument 0, "
                                           r"whose shape is \(3,\)"):
        WrongShape.apply(x).sum().backward()


def test_a_gradient_that_is_not_a_tensor_is_a_clear_error(device):
    class ArrayGradient(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad.numpy() * 2

    with pytest.raises(TypeError, match=r"ArrayGradient\.backward returned ndarray for argument 0; return a Tensor"):
        ArrayGradient.apply(float64([1.0], device)).sum().backward()


def test_forward_must_return_tensors(device):
    class ReturnsArray(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.numpy() * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    with pytest.raises(TypeError, match=r"ReturnsArray\.forward returned ndarray; it must return a Tensor"):
        ReturnsArray.apply(float64([1.0], device))


def test_two_outputs_with_gradients_are_refused_with_what_to_do(device):
    class SinCos(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, grad_sin, grad_cos):
            return grad_sin

    x = float64([1.0], device)
    with pytest.raises(RuntimeError, match=r"SinCos\.forward returned 2 outputs that carry a gradient .*"
                                           r"mark_non_differentiable.*one Function per output"):
        SinCos.apply(x)
    with tg.no_grad():                               # nothing recorded: nothing to refuse
        sin, cos = SinCos.apply(x)
    np.testing.assert_allclose([sin.item(), cos.item()], [np.sin(1.0), np.cos(1.0)])


def test_save_for_backward_takes_tensors_only(device):
    class SavesANumber(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.save_for_backward(x, alpha)
            return x * alpha

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    with pytest.raises(TypeError, match=r"SavesANumber: save_for_backward saves Tensors.*argument 1 is float.*"
                                        r"ctx\.alpha = alpha"):
        SavesANumber.apply(float64([1.0], device), 2.0)


def test_a_static_backward_needs_a_static_forward():
    with pytest.raises(TypeError, match=r"HalfStatic: backward is a @staticmethod but forward is not"):
        class HalfStatic(tg.autograd.Function):
            def forward(ctx, x):
                return x.data

            @staticmethod
            def backward(ctx, grad):
                return grad


# ----------------------------------------------------------------------------- our array-level form, unchanged
def test_our_array_level_form_still_works_and_keeps_its_apply(device):
    class ArraySquare(Function):
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.data * x.data

        def backward(ctx, grad):
            x, = ctx.saved_tensors
            return 2 * x * grad

    # the form is told once per class: our ops keep Function.apply itself, nothing checked per call
    assert ArraySquare.apply.__func__ is Function.apply.__func__
    assert "apply" not in ArraySquare.__dict__ and not hasattr(Mul, "_node_class")
    x = float64([1.0, -2.0], device)
    y = ArraySquare.apply(x)
    np.testing.assert_allclose(y.numpy(), [1, 4])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, -4])
    assert tg.gradcheck(ArraySquare.apply, (random64((3, 4), device),))
    assert tg.gradgradcheck(ArraySquare, (random64((2, 3), device),))
    a, b = float64([2.0], device), float64([5.0], device)
    Mul.apply(a, b).backward()
    assert a.grad.item() == 5 and b.grad.item() == 2


def test_a_tensor_by_keyword_is_an_input_and_mixed_devices_are_refused():
    x, y = (tg.tensor(values, device="cpu", requires_grad=True) for values in ([1.0, 2.0], [3.0, 4.0]))
    MulAdd.apply(x, y=y, alpha=0.5).sum().backward()          # bound in forward's order, as PyTorch binds them
    np.testing.assert_allclose(x.grad.numpy(), [3.5, 4.5])
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="MulAdd: expected all tensors on the same device, got cpu and emu"):
        MulAdd.apply(x, y.detach().to("emu"), 0.5)
