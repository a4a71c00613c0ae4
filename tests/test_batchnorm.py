"""nn.BatchNorm1d: batch statistics in training (biased variance to normalise, unbiased into running_var), the
running ones in eval, gradients through the batch statistics, and state dicts under torch's names; against
torch.nn.BatchNorm1d where torch is installed, and against the formulas and central differences everywhere."""
import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import nn

RNG = np.random.default_rng(0)
SHAPES = [(6, 3), (4, 3, 5)]


def batches(shape, k):
    return [RNG.standard_normal(shape) * 2 + 1.5 for _ in range(k)]


def set_(t, values):
    """Write values into a tensor's array in place, on whatever device it is (a cuda array takes no numpy one)."""
    t.data[...] = tg.tensor(values, dtype=t.dtype, device=t.device).data


def make_pair(torch, num_features, **options):
    """Our layer and torch's, float64, with the same random affine parameters."""
    layer = nn.BatchNorm1d(num_features, dtype=tg.float64, **options)
    theirs = torch.nn.BatchNorm1d(num_features, dtype=torch.float64, **options)
    if layer.weight is not None:
        weight = RNG.standard_normal(num_features)
        set_(layer.weight, weight)
        theirs.weight.data[...] = torch.tensor(weight)
    if layer.bias is not None:
        bias = RNG.standard_normal(num_features)
        set_(layer.bias, bias)
        theirs.bias.data[...] = torch.tensor(bias)
    return layer, theirs


def assert_states_equal(ours, theirs):
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(tsd)
    for name in sd:
        assert sd[name].dtype.name == str(tsd[name].dtype).replace("torch.", ""), name
        np.testing.assert_allclose(sd[name].numpy(), tsd[name].numpy(), rtol=1e-12, atol=1e-15, err_msg=name)


# ----------------------------------------------------------------------------- against torch
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("momentum", [0.1, None, 0.5])
def test_training_forward_backward_and_running_statistics_match_torch(shape, momentum):
    torch = pytest.importorskip("torch")
    layer, theirs = make_pair(torch, shape[1], momentum=momentum)
    for x in batches(shape, 3):
        upstream = RNG.standard_normal(shape)
        xo = tg.tensor(x, requires_grad=True)
        y = layer(xo)
        (y * tg.tensor(upstream)).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        yt = theirs(xt)
        (yt * torch.tensor(upstream)).sum().backward()
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(layer.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(layer.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert_states_equal(layer, theirs)
    assert layer.num_batches_tracked.item() == 3


@pytest.mark.parametrize("shape", SHAPES)
def test_eval_uses_running_statistics_like_torch(shape):
    torch = pytest.importorskip("torch")
    layer, theirs = make_pair(torch, shape[1])
    for x in batches(shape, 2):
        layer(tg.tensor(x))
        theirs(torch.tensor(x))
    layer.eval()
    theirs.eval()
    x = batches(shape, 1)[0]
    xo = tg.tensor(x, requires_grad=True)
    y = layer(xo)
    y.sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = theirs(xt)
    yt.sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert layer.num_batches_tracked.item() == 2                       # eval steps are not counted
    assert_states_equal(layer, theirs)


@pytest.mark.parametrize("options", [dict(affine=False), dict(bias=False), dict(track_running_stats=False),
                                     dict(affine=False, track_running_stats=False), dict(eps=1e-3, momentum=0.3)])
def test_options_state_dict_names_repr_and_values_match_torch(options):
    torch = pytest.importorskip("torch")
    layer, theirs = make_pair(torch, 3, **options)
    assert repr(layer) == repr(theirs)
    x = batches((5, 3, 2), 1)[0]
    for mode in ("train", "eval"):
        getattr(layer, mode)()
        getattr(theirs, mode)()
        np.testing.assert_allclose(layer(tg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-10, atol=1e-12, err_msg=mode)
    assert_states_equal(layer, theirs)


def test_state_dicts_move_between_torch_and_ours():
    torch = pytest.importorskip("torch")
    theirs = torch.nn.BatchNorm1d(4)
    for _ in range(3):
        theirs(torch.randn(8, 4) * 3 + 1)
    layer = nn.BatchNorm1d(4)
    layer.load_state_dict(theirs.state_dict())
    assert layer.num_batches_tracked.item() == 3 and layer.num_batches_tracked.dtype == tg.int64
    np.testing.assert_array_equal(layer.running_var.numpy(), theirs.running_var.numpy())
    layer(tg.randn(8, 4))
    back = torch.nn.BatchNorm1d(4)
    back.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in layer.state_dict().items()})
    assert back.num_batches_tracked.item() == 4
    np.testing.assert_array_equal(back.running_mean.numpy(), layer.running_mean.numpy())


# ----------------------------------------------------------------------------- on their own
@pytest.mark.parametrize("shape", SHAPES)
def test_training_output_is_normalised_per_channel_and_running_stats_follow_the_formula(shape):
    layer = nn.BatchNorm1d(shape[1], momentum=0.25, dtype=tg.float64)
    x = batches(shape, 1)[0]
    y = layer(tg.tensor(x)).numpy()
    dims = (0,) if len(shape) == 2 else (0, 2)
    n = x.size // shape[1]
    np.testing.assert_allclose(y.mean(dims), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(dims), x.var(dims) / (x.var(dims) + 1e-5), rtol=1e-12)
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.25 * x.mean(dims), rtol=1e-12)
    np.testing.assert_allclose(layer.running_var.numpy(), 0.75 + 0.25 * x.var(dims) * n / (n - 1), rtol=1e-12)
    layer.eval()
    expected = (x - layer.running_mean.numpy().reshape((1, -1) + (1,) * (len(shape) - 2))) / np.sqrt(
        layer.running_var.numpy().reshape((1, -1) + (1,) * (len(shape) - 2)) + 1e-5)
    np.testing.assert_allclose(layer(tg.tensor(x)).numpy(), expected, rtol=1e-12)


def test_momentum_none_averages_all_batches_equally():
    layer = nn.BatchNorm1d(2, momentum=None, dtype=tg.float64)
    xs = batches((4, 2), 3)
    for x in xs:
        layer(tg.tensor(x))
    np.testing.assert_allclose(layer.running_mean.numpy(), np.mean([x.mean(0) for x in xs], axis=0), rtol=1e-12)
    np.testing.assert_allclose(layer.running_var.numpy(), np.mean([x.var(0, ddof=1) for x in xs], axis=0),
                               rtol=1e-12)


@pytest.mark.parametrize("shape", [(4, 2), (3, 2, 3)])
@pytest.mark.parametrize("training", [True, False])
def test_gradcheck(shape, training):
    layer = nn.BatchNorm1d(shape[1], dtype=tg.float64)
    set_(layer.weight, RNG.standard_normal(shape[1]))
    set_(layer.bias, RNG.standard_normal(shape[1]))
    set_(layer.running_mean, RNG.standard_normal(shape[1]))
    set_(layer.running_var, RNG.random(shape[1]) + 0.5)
    layer.train(training)
    x = tg.tensor(batches(shape, 1)[0], requires_grad=True)
    assert tg.gradcheck(lambda x, w, b: layer(x), (x, layer.weight, layer.bias))


def test_buffers_are_updated_in_place_and_follow_casts():
    layer = nn.BatchNorm1d(3)
    running_mean = layer.running_mean
    array = running_mean.data
    layer(tg.randn(5, 3))
    assert layer.running_mean is running_mean and running_mean.data is array
    assert not np.all(running_mean.numpy() == 0)
    layer.to(tg.float64)
    assert layer.running_var.dtype == tg.float64 and layer.num_batches_tracked.dtype == tg.int64
    assert [name for name, _ in layer.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    layer.reset_parameters()
    assert layer.num_batches_tracked.item() == 0 and layer.running_var.tolist() == [1.0, 1.0, 1.0]


def test_without_running_statistics_eval_uses_the_batch():
    layer = nn.BatchNorm1d(2, track_running_stats=False).eval()
    x = tg.tensor([[1.0, 10.0], [3.0, 30.0]])
    np.testing.assert_allclose(layer(x).numpy(), [[-1, -1], [1, 1]], rtol=1e-5)
    assert list(layer.state_dict()) == ["weight", "bias"] and layer.running_mean is None


def test_errors_name_the_shapes():
    layer = nn.BatchNorm1d(3)
    with pytest.raises(ValueError, match=r"BatchNorm1d: expected a 2-D \(N, C\) or 3-D \(N, C, L\) input, got shape "
                                         r"\(2, 3, 4, 5\)"):
        layer(tg.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"BatchNorm1d: input of shape \(2, 4\) has 4 channels.*num_features=3"):
        layer(tg.zeros(2, 4))
    with pytest.raises(ValueError, match=r"more than 1 value per channel when training, got input of shape \(1, 3\)"):
        layer(tg.zeros(1, 3))
    assert layer.num_batches_tracked.item() == 0         # a refused batch counts for nothing
    layer.eval()
    assert layer(tg.ones(1, 3)).shape == (1, 3)           # eval needs no batch: the running statistics
