"""tinygrad_gpu.nn: Module mechanics (registration, state_dict, modes, devices, containers) and the
basic layers (Linear, Embedding, LayerNorm, Dropout, GELU) against NumPy, gradient-checked with
respect to their inputs and their own parameters in float64."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
from tinygrad_gpu import nn

from checks import values


def arrays_of(module):
    return {name: t.numpy().copy() for name, t in module.state_dict().items()}


class TwoLayer(nn.Module):
    """Linear -> GELU -> Linear, with a parameter assigned between the layers."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4)
        self.scale = nn.Parameter(tg.ones(4))
        self.act = nn.GELU()
        self.second = nn.Linear(4, 2)
        self.note = "not registered"            # plain attributes are not parameters or modules
        self.plain = tg.ones(2)                 # nor are plain (non-Parameter) tensors

    def forward(self, x):
        return self.second(self.act(self.first(x)) * self.scale)


class Tied(nn.Module):
    """An embedding whose table is also the output layer's weight (as in GPT)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.emb(ids))


# ----------------------------------------------------------------------------- registration
def test_parameters_and_modules_register_in_assignment_order():
    class Unsorted(nn.Module):
        def __init__(self):
            super().__init__()
            self.zeta = nn.Linear(1, 1)
            self.beta = nn.Parameter(tg.ones(1))
            self.alpha = nn.Linear(1, 1, bias=False)
            self.gamma = nn.Parameter(tg.ones(1))

    # As in PyTorch: a module's own parameters (in assignment order), then each child's, in order.
    assert [n for n, _ in Unsorted().named_parameters()] == ["beta", "gamma", "zeta.weight", "zeta.bias",
                                                             "alpha.weight"]
    assert list(Unsorted().state_dict()) == ["beta", "gamma", "zeta.weight", "zeta.bias", "alpha.weight"]
    m = TwoLayer()
    assert [n for n, _ in m.named_parameters()] == ["scale", "first.weight", "first.bias", "second.weight",
                                                    "second.bias"]
    assert [type(p) for p in m.parameters()] == [nn.Parameter] * 5
    assert all(p.requires_grad for p in m.parameters())
    assert [n for n, _ in m.named_children()] == ["first", "act", "second"]
    assert list(m.children()) == [m.first, m.act, m.second]
    assert [n for n, _ in m.named_modules()] == ["", "first", "act", "second"]
    assert list(m.modules())[0] is m
    assert m.num_parameters() == 3 * 4 + 4 + 4 + 4 * 2 + 2
    # Replacing a registered parameter keeps its place in the order.
    m.first.weight = nn.Parameter(tg.zeros(4, 3))
    assert [n for n, _ in m.named_parameters()][1] == "first.weight"
    assert not m.first.weight.numpy().any()
    # Deleting unregisters; replacing a parameter by a plain value unregisters it too.
    del m.scale
    assert "scale" not in dict(m.named_parameters())
    m.first.bias = None
    assert [n for n, _ in m.named_parameters()] == ["first.weight", "second.weight", "second.bias"]
    assert m.first.bias is None


def test_a_tied_parameter_is_listed_once_but_saved_under_each_name():
    m = Tied()
    assert m.head.weight is m.emb.weight
    assert [n for n, _ in m.named_parameters()] == ["emb.weight"]
    assert len(list(m.parameters())) == 1
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == ["emb.weight", "head.weight"]
    assert list(m.state_dict()) == ["emb.weight", "head.weight"]
    # Both uses contribute to the one gradient.
    ids = tg.tensor([0, 2, 2])
    m(ids).sum().backward()
    emb_part = np.zeros((5, 3))
    np.add.at(emb_part, [0, 2, 2], m.emb.weight.numpy().sum(0))      # d/d emb rows of sum(E[ids] @ E^T)
    head_part = np.zeros((5, 3)) + m.emb.weight.numpy()[[0, 2, 2]].sum(0)
    np.testing.assert_allclose(m.emb.weight.grad.numpy(), emb_part + head_part, rtol=1e-5, atol=1e-6)


def test_assigning_before_super_init_is_a_clear_error():
    class Forgetful(nn.Module):
        def __init__(self):
            self.layer = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgetful()


def test_missing_attribute_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="nonexistent"):
        nn.Linear(2, 2).nonexistent


def test_module_without_forward_says_so():
    class Empty(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="Empty"):
        Empty()(tg.ones(1))


def test_register_buffer_persistent_and_not():
    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("running", tg.zeros(2))
            self.register_buffer("scratch", tg.ones(3), persistent=False)

    m = WithBuffers()
    assert [n for n, _ in m.named_buffers()] == ["running", "scratch"]
    assert [n for n, _ in m.named_parameters()] == ["lin.weight", "lin.bias"]     # buffers are not parameters
    assert list(m.state_dict()) == ["running", "lin.weight", "lin.bias"]          # non-persistent not saved
    assert m.scratch.numpy().tolist() == [1, 1, 1]
    # Buffers load from a state dict and move with the module.
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    state["running"] = np.array([5.0, 6.0], np.float32)
    m.load_state_dict(state)
    assert m.running.numpy().tolist() == [5, 6]
    m.to(tg.float64)
    assert m.running.dtype == tg.float64 and m.scratch.dtype == tg.float64
    # Assigning a tensor to a buffer's name updates the buffer (as in PyTorch: BatchNorm's running stats).
    m.running = tg.tensor([7.0, 8.0])
    assert m.state_dict()["running"].numpy().tolist() == [7, 8]
    # Registering a name again as persistent makes it saved.
    m.register_buffer("scratch", tg.ones(3))
    assert "scratch" in m.state_dict()


# ----------------------------------------------------------------------------- state_dict
def test_state_dict_round_trip_is_bit_exact_and_gives_identical_outputs(tmp_path):
    tg.manual_seed(1)
    a = TwoLayer()
    tg.manual_seed(2)
    b = TwoLayer()
    x = tg.randn(5, 3)
    assert not np.array_equal(a(x).numpy(), b(x).numpy())
    b_params_before = list(b.parameters())
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for name, value in arrays_of(a).items():
        assert b.state_dict()[name].dtype == value.dtype
        np.testing.assert_array_equal(b.state_dict()[name].numpy(), value)
    np.testing.assert_array_equal(b(x).numpy(), a(x).numpy())
    # Loading copies in place: the same Parameter objects (optimizers hold them), not aliases of a's.
    assert all(p is q for p, q in zip(b.parameters(), b_params_before))
    a.first.weight.data[...] = 0
    assert not np.array_equal(b.first.weight.numpy(), a.first.weight.numpy())
    # State dict values are detached.
    assert not any(t.requires_grad for t in a.state_dict().values())
    # And through a file.
    tg.manual_seed(3)
    c = TwoLayer()
    tg.save(b.state_dict(), tmp_path / "two_layer.safetensors")
    c.load_state_dict(tg.load(tmp_path / "two_layer.safetensors"))
    np.testing.assert_array_equal(c(x).numpy(), b(x).numpy())


def test_loading_keeps_tied_weights_tied():
    tg.manual_seed(1)
    a = Tied()
    tg.manual_seed(2)
    b = Tied()
    b.load_state_dict(a.state_dict())
    assert b.head.weight is b.emb.weight
    np.testing.assert_array_equal(b.head.weight.numpy(), a.emb.weight.numpy())


def test_load_state_dict_strict_names_missing_and_unexpected_keys():
    m = TwoLayer()
    state = m.state_dict()
    del state["second.bias"]
    with pytest.raises(KeyError, match=r"missing.*second\.bias"):
        m.load_state_dict(state)
    state = m.state_dict()
    state["extra.weight"] = tg.zeros(2)
    with pytest.raises(KeyError, match=r"unexpected.*extra\.weight"):
        m.load_state_dict(state)


def test_load_state_dict_wrong_shape_names_key_and_both_shapes():
    m = TwoLayer()
    state = m.state_dict()
    state["first.weight"] = tg.zeros(3, 4)           # transposed: model has (4, 3)
    before = arrays_of(m)
    for strict in (True, False):
        with pytest.raises(ValueError, match=r"first\.weight.*\(3, 4\).*\(4, 3\)"):
            m.load_state_dict(state, strict=strict)
    assert m.first.weight.numpy().tolist() == before["first.weight"].tolist()


def test_load_state_dict_non_strict_reports_and_loads_the_rest():
    tg.manual_seed(1)
    a = TwoLayer()
    tg.manual_seed(2)
    b = TwoLayer()
    state = a.state_dict()
    del state["scale"]
    state["bogus"] = tg.ones(1)
    missing, unexpected = b.load_state_dict(state, strict=False)
    assert missing == ["scale"] and unexpected == ["bogus"]
    np.testing.assert_array_equal(b.second.weight.numpy(), a.second.weight.numpy())
    assert not np.array_equal(b.scale.numpy(), np.zeros(4))      # untouched: still its own init (ones)
    assert b.scale.numpy().tolist() == [1, 1, 1, 1]


def test_load_state_dict_accepts_numpy_arrays_and_casts_dtype():
    m = nn.Linear(2, 3)
    weights = np.arange(6, dtype=np.float64).reshape(3, 2)
    m.load_state_dict({"weight": weights, "bias": np.zeros(3)})
    assert m.weight.dtype == tg.float32
    np.testing.assert_array_equal(m.weight.numpy(), weights)


# ----------------------------------------------------------------------------- modes, grads, placement
def test_train_and_eval_propagate_and_switch_dropout():
    m = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Dropout(0.5), nn.GELU()))
    assert all(mod.training for mod in m.modules())
    assert m.eval() is m
    assert not any(mod.training for mod in m.modules())
    x = tg.randn(64, 4)
    np.testing.assert_array_equal(m(x).numpy(), m(x).numpy())          # eval: deterministic
    expected = nn.GELU()(m[0](x)).numpy()
    np.testing.assert_allclose(m(x).numpy(), expected, rtol=1e-6)       # dropout is the identity
    m.train()
    assert all(mod.training for mod in m.modules())
    hidden = m[0](x)
    dropped = m[1][0](hidden).numpy()
    assert 0.3 < (dropped == 0).mean() < 0.7
    m.train(False)
    assert not m[1][0].training


def test_zero_grad_clears_or_zeroes_every_gradient():
    m = TwoLayer()
    m(tg.randn(2, 3)).sum().backward()
    assert all(p.grad is not None and np.any(p.grad.numpy() != 0) for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np.any(p.grad.numpy()) for p in m.parameters())
    m(tg.randn(2, 3)).sum().backward()
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_requires_grad_toggles_every_parameter():
    m = TwoLayer()
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    assert not m(tg.randn(2, 3)).requires_grad
    m.requires_grad_()
    assert all(p.requires_grad for p in m.parameters())


def test_to_device_moves_everything_and_keeps_ties():
    m = Tied()
    ids = tg.tensor([[0, 4, 1]])
    expected = m(ids).numpy()
    params = list(m.parameters())
    assert m.to("emu") is m
    assert all(p.device == "emu" for p in m.parameters())
    assert all(p.device == "emu" for p in m.state_dict().values())
    assert list(m.parameters())[0] is params[0]                          # moved in place
    assert m.head.weight is m.emb.weight
    out = m(ids.to("emu"))
    assert out.device == "emu"
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    out.sum().backward()
    assert m.emb.weight.grad.device == "emu"
    m.to("cpu")
    assert m.emb.weight.device == "cpu" and m.emb.weight.grad.device == "cpu" and m.head.weight is m.emb.weight


def test_deepcopy_is_independent_and_keeps_ties():
    import copy
    m = Tied()
    c = copy.deepcopy(m)
    assert c.head.weight is c.emb.weight and c.emb.weight is not m.emb.weight
    ids = tg.tensor([1, 3])
    np.testing.assert_array_equal(c(ids).numpy(), m(ids).numpy())
    c.emb.weight.data[...] = 0
    assert m.emb.weight.numpy().any()


def test_to_dtype_casts_parameters():
    m = TwoLayer()
    x = tg.randn(2, 3)
    expected = m(x).numpy()
    m.to(tg.float64)
    assert all(p.dtype == tg.float64 and p.requires_grad for p in m.parameters())
    out = m(x.double())
    assert out.dtype == tg.float64
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_repr_shows_the_tree():
    m = nn.Sequential(nn.Linear(3, 2, bias=False), nn.GELU(approximate="tanh"),
                      nn.ModuleList([nn.Dropout(0.1)]))
    assert repr(nn.Linear(3, 2)) == "Linear(in_features=3, out_features=2, bias=True)"
    assert repr(m) == ("Sequential(\n"
                       "  (0): Linear(in_features=3, out_features=2, bias=False)\n"
                       "  (1): GELU(approximate='tanh')\n"
                       "  (2): ModuleList(\n"
                       "    (0): Dropout(p=0.1)\n"
                       "  )\n"
                       ")")
    assert repr(nn.Embedding(7, 3)) == "Embedding(7, 3)"
    assert repr(nn.LayerNorm(4)).startswith("LayerNorm((4,), eps=1e-05")
    assert repr(nn.Parameter(tg.ones(1))).startswith("Parameter containing:\n")


# ----------------------------------------------------------------------------- containers
def test_sequential_indexing_len_iteration_and_forward():
    layers = [nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and seq[0] is layers[0] and seq[-1] is layers[2]
    assert list(seq) == layers
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = tg.randn(5, 3)
    np.testing.assert_allclose(seq(x).numpy(), layers[2](layers[1](layers[0](x))).numpy(), rtol=1e-6)
    tail = seq[1:]
    assert isinstance(tail, nn.Sequential) and list(tail) == layers[1:]
    np.testing.assert_allclose(tail(layers[0](x)).numpy(), seq(x).numpy(), rtol=1e-6)
    with pytest.raises(IndexError):
        seq[3]


def test_module_list_append_index_iterate():
    ml = nn.ModuleList([nn.Linear(2, 2)])
    assert ml.append(nn.Linear(2, 3)) is ml
    assert len(ml) == 2 and ml[1].out_features == 3 and ml[-1] is ml[1]
    assert [m.out_features for m in ml] == [2, 3]
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert isinstance(ml[:1], nn.ModuleList) and len(ml[:1]) == 1

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList()
            for _ in range(3):
                self.layers.append(nn.Linear(1, 1))

    assert [n for n, _ in Holder().named_parameters()][-2:] == ["layers.2.weight", "layers.2.bias"]


def test_module_dict_keys_items_and_registration():
    md = nn.ModuleDict({"b": nn.Linear(1, 2), "a": nn.GELU()})
    md["c"] = nn.Linear(2, 1)
    assert len(md) == 3 and list(md) == ["b", "a", "c"] and list(md.keys()) == ["b", "a", "c"]
    assert "a" in md and "z" not in md
    assert md["c"].in_features == 2 and md.c is md["c"]
    assert [k for k, _ in md.items()] == ["b", "a", "c"] and list(md.values())[1] is md["a"]
    assert [n for n, _ in md.named_parameters()] == ["b.weight", "b.bias", "c.weight", "c.bias"]
    with pytest.raises(KeyError):
        md["z"]


# ----------------------------------------------------------------------------- layers
def gradcheck_layer(layer, x):
    """Gradients w.r.t. the input and every parameter of `layer` (perturbed in place by gradcheck)."""
    params = list(layer.parameters())
    assert all(p.dtype == tg.float64 for p in params)
    tg.gradcheck(lambda x, *ps: layer(x), [x, *params])


@given(st.integers(1, 4), st.integers(1, 4), st.booleans(),
       hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3), st.data())
def test_linear_forward_and_gradients(in_features, out_features, bias, batch, data):
    layer = nn.Linear(in_features, out_features, bias=bias).to(tg.float64)
    x_np = data.draw(values(batch + (in_features,)))
    x = tg.tensor(x_np, dtype=tg.float64, requires_grad=True)
    expected = x_np @ layer.weight.numpy().T + (layer.bias.numpy() if bias else 0)
    out = layer(x)
    assert out.shape == batch + (out_features,)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)
    assert [n for n, _ in layer.named_parameters()] == (["weight", "bias"] if bias else ["weight"])
    gradcheck_layer(layer, x)


def test_linear_init_is_uniform_within_one_over_sqrt_fan_in():
    layer = nn.Linear(50, 400)
    bound = 1 / math.sqrt(50)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert layer.weight.shape == (400, 50) and layer.bias.shape == (400,)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.99 * bound and np.abs(b).max() > 0.9 * bound     # the whole range is used
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound                    # uniform's std
    assert abs(w.mean()) < 0.02 * bound


@given(st.integers(1, 5), st.integers(1, 3), hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3),
       st.data())
def test_embedding_forward_and_gradients(num, dim, ids_shape, data):
    layer = nn.Embedding(num, dim).to(tg.float64)
    ids_np = data.draw(hnp.arrays(np.int64, ids_shape, elements=st.integers(0, num - 1)))
    out = layer(tg.tensor(ids_np))
    assert out.shape == ids_shape + (dim,)
    np.testing.assert_array_equal(out.numpy(), layer.weight.numpy()[ids_np])
    # Repeated ids add up their gradients.
    tg.gradcheck(lambda w: layer(tg.tensor(ids_np)), [layer.weight])
    upstream = np.random.default_rng(0).standard_normal(ids_shape + (dim,))
    layer.weight.grad = None
    layer(tg.tensor(ids_np)).backward(tg.tensor(upstream, dtype=tg.float64))
    expected = np.zeros((num, dim))
    np.add.at(expected, ids_np.reshape(-1), upstream.reshape(-1, dim))
    np.testing.assert_allclose(layer.weight.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_embedding_init_and_errors():
    layer = nn.Embedding(1000, 20)
    w = layer.weight.numpy()
    assert abs(w.std() - 1.0) < 0.03 and abs(w.mean()) < 0.03        # N(0, 1), as in PyTorch
    with pytest.raises(IndexError, match="1000"):
        layer(tg.tensor([0, 1000])).numpy()          # on a GPU the check is read with the next value
    with pytest.raises(RuntimeError, match="integer"):         # PyTorch's kind of error
        layer(tg.tensor([0.0, 1.0]))


def np_layer_norm(x, weight, bias, k, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    centered = x - x.mean(axes, keepdims=True)
    out = centered / np.sqrt((centered ** 2).mean(axes, keepdims=True) + eps)
    return out * (1 if weight is None else weight) + (0 if bias is None else bias)


@given(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=3), st.integers(1, 2), st.booleans(),
       st.data())
def test_layer_norm_forward_and_gradients(batch, k, bias, data):
    normalized = data.draw(hnp.array_shapes(min_dims=k, max_dims=k, min_side=1, max_side=4))
    layer = nn.LayerNorm(normalized if k > 1 else normalized[0], bias=bias).to(tg.float64)
    for p in layer.parameters():              # away from the ones/zeros init, so both matter
        nn.init.normal_(p, 1.0, 0.5)
    x_np = data.draw(values(batch + normalized))
    x = tg.tensor(x_np, dtype=tg.float64, requires_grad=True)
    expected = np_layer_norm(x_np, layer.weight.numpy(), layer.bias.numpy() if bias else None, k)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-9, atol=1e-9)
    gradcheck_layer(layer, x)


def test_layer_norm_parameters_and_init():
    assert [(n, p.shape) for n, p in nn.LayerNorm(4).named_parameters()] == [("weight", (4,)), ("bias", (4,))]
    assert [n for n, _ in nn.LayerNorm(4, bias=False).named_parameters()] == ["weight"]
    assert list(nn.LayerNorm(4, elementwise_affine=False).parameters()) == []
    ln = nn.LayerNorm((2, 3))
    assert ln.weight.numpy().tolist() == [[1, 1, 1]] * 2 and ln.bias.numpy().tolist() == [[0, 0, 0]] * 2
    out = ln(tg.randn(4, 2, 3)).numpy()
    np.testing.assert_allclose(out.mean((1, 2)), 0, atol=1e-6)
    np.testing.assert_allclose(out.var((1, 2)), 1, atol=1e-4)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        nn.LayerNorm(5)(tg.randn(2, 4))


def np_gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@given(st.sampled_from(["none", "tanh"]), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4), st.data())
def test_gelu_forward_and_gradients(approximate, shape, data):
    x_np = data.draw(values(shape, -5, 5))
    x = tg.tensor(x_np, dtype=tg.float64, requires_grad=True)
    layer = nn.GELU(approximate)
    np.testing.assert_allclose(layer(x).numpy(), np_gelu(x_np, approximate), rtol=1e-10, atol=1e-12)
    assert list(layer.parameters()) == []
    tg.gradcheck(layer, [x])


def test_dropout_train_scales_survivors_and_eval_is_identity():
    layer = nn.Dropout(0.3)
    x = tg.ones(20000, requires_grad=True)
    y = layer(x)
    dropped = y.numpy() == 0
    assert abs(dropped.mean() - 0.3) < 0.02
    np.testing.assert_allclose(y.numpy()[~dropped], 1 / 0.7, rtol=1e-6)
    y.backward(tg.ones(20000))
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())      # the same mask scales the gradient
    assert not np.array_equal(layer(x).numpy(), y.numpy())         # a fresh mask per call
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    assert not nn.Dropout(1.0)(x).numpy().any()
    np.testing.assert_array_equal(nn.Dropout(0.0)(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(1.5)(x)


def test_dropout_is_reproducible_with_the_seed():
    x = tg.ones(100)
    tg.manual_seed(7)
    first = nn.Dropout(0.5)(x).numpy()
    tg.manual_seed(7)
    np.testing.assert_array_equal(nn.Dropout(0.5)(x).numpy(), first)
