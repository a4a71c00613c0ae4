"""16-bit floats and autocast: bfloat16/float16 tensors, PyTorch's promotion, and tg.autocast's casts
(which op runs in which dtype, nesting, the parameters' cast cache, backward in the forward's dtypes).

The numbers of a GPT under autocast are compared with float32 here on every device (cpu, emu:
our half-precision kernels, and cuda in the cuda pass), and with torch.autocast in
test_torch_parity.py. The kernels' own half-precision checks are in test_kernels.py.
"""
import numpy as np
import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu.nn import GPT, GPTConfig

from conftest import allocation

HALF = [tg.bfloat16, tg.float16]
HALF_IDS = ["bfloat16", "float16"]


def device_type(device):
    return "cuda" if device.startswith("cuda") else device


# ----------------------------------------------------------------------------- the dtypes
def test_bfloat16_is_a_floating_dtype_with_pytorchs_limits():
    x = tg.tensor([1.0, 2.0, 3.0]).bfloat16()
    assert x.dtype == tg.bfloat16 and x.is_floating_point() and x.element_size() == 2
    assert tg.tensor([1.0]).half().dtype == tg.float16 == tg.half
    info = tg.finfo(tg.bfloat16)            # torch.finfo(torch.bfloat16)'s values
    assert (info.bits, info.eps, info.resolution, info.tiny) == (16, 0.0078125, 0.01, 1.1754943508222875e-38)
    assert info.max == 3.3895313892515355e+38 and info.min == -info.max
    half = tg.finfo(tg.float16)
    assert (half.eps, half.max, half.resolution, half.tiny) == (0.0009765625, 65504.0, 0.001, 6.103515625e-05)
    assert tg.finfo().dtype == "float32" and tg.finfo(tg.float64).bits == 64
    with pytest.raises(TypeError, match="not a floating-point dtype"):
        tg.finfo(tg.int64)


@pytest.mark.parametrize("a, b, expected", [
    (tg.bfloat16, tg.float16, tg.float32),       # neither holds the other
    (tg.bfloat16, tg.float32, tg.float32),
    (tg.float16, tg.float32, tg.float32),
    (tg.bfloat16, tg.float64, tg.float64),
    (tg.bfloat16, tg.int64, tg.bfloat16),        # a float outranks an integer whatever its width
    (tg.bfloat16, tg.bool_, tg.bfloat16),
])
def test_promotion_follows_pytorch(a, b, expected):
    x, y = tg.ones(2, dtype=a), tg.ones(2, dtype=b)
    assert (x + y).dtype == expected and (y * x).dtype == expected


def test_scalars_and_zero_dim_tensors_do_not_widen_a_half_tensor():
    x = tg.ones(3, dtype=tg.bfloat16)
    assert (x * 2.5).dtype == tg.bfloat16 and (2.5 - x).dtype == tg.bfloat16 and (x + 1).dtype == tg.bfloat16
    assert (x + tg.tensor(1.0)).dtype == tg.bfloat16                # a 0-d float32 tensor
    assert (tg.ones(3) + tg.tensor(1.0, dtype=tg.bfloat16)).dtype == tg.float32


def test_half_tensors_record_gradients_and_sum_in_float32(device):
    x = tg.full((4096,), 1.0, dtype=tg.bfloat16, device=device, requires_grad=True)
    total = (x * 1.0).sum()
    # 4096 ones summed in bfloat16 would stick at 256 (256 + 1 rounds back to 256); in float32 it is exact
    assert total.dtype == tg.bfloat16 and total.item() == 4096.0
    total.backward()
    assert x.grad.dtype == tg.bfloat16 and np.all(x.grad.numpy() == 1)
    probs = (tg.arange(5, device=device).float() / 10).bfloat16().softmax(0)
    assert probs.dtype == tg.bfloat16 and abs(probs.float().sum().item() - 1) < 1e-2


def test_module_casts_only_its_floating_tensors():
    model = GPT(GPTConfig(block_size=8, vocab_size=20, n_layer=1, n_head=2, n_embd=8))
    model.bfloat16()
    assert {p.dtype for p in model.parameters()} == {tg.bfloat16}
    assert model.lm_head.weight is model.transformer.wte.weight           # still tied
    model.float()
    assert {p.dtype for p in model.parameters()} == {tg.float32}


def test_bfloat16_checkpoints_are_stored_as_bf16(tmp_path):
    from safetensors import safe_open
    x = tg.tensor([[1.5, -2.25], [3e38, 1e-38]]).bfloat16()
    path = str(tmp_path / "c.safetensors")
    tg.save({"x": x}, path)
    with safe_open(path, framework="numpy") as f:
        assert f.get_slice("x").get_dtype() == "BF16"
    back = tg.load(path)["x"]
    assert back.dtype == tg.bfloat16 and np.array_equal(back.numpy().view(np.uint16), x.numpy().view(np.uint16))


# ----------------------------------------------------------------------------- which op runs in which dtype
@pytest.mark.parametrize("low", HALF, ids=HALF_IDS)
def test_products_run_low_and_the_float32_list_runs_float32(device, low):
    x = tg.randn(4, 8, device=device)
    w = tg.randn(6, 8, device=device, requires_grad=True)
    targets = tg.tensor([0, 1, 5, 2], device=device)
    with tg.autocast(device_type(device), dtype=low):
        y = F.linear(x, w)
        assert y.dtype == low and (x @ w.transpose(0, 1)).dtype == low
        assert F.cross_entropy(y, targets).dtype == tg.float32
        assert y.softmax(-1).dtype == tg.float32 and y.log_softmax(-1).dtype == tg.float32
        assert F.layer_norm(y, (6,)).dtype == tg.float32
        assert y.sum().dtype == tg.float32 and y.exp().dtype == tg.float32 and (y ** 2).dtype == tg.float32
        assert F.mse_loss(y, y.detach()).dtype == tg.float32
        assert F.gelu(y, approximate="tanh").dtype == low and y.relu().dtype == low      # unlisted: as given
        assert y.mean().dtype == low                         # mean is not on the float32 list
        assert (y + x[:, :6]).dtype == tg.float32            # ordinary promotion: float32 wins
        assert (x.double() @ x.double().transpose(0, 1)).dtype == tg.float64      # float64 is never cast
    assert F.linear(x, w).dtype == tg.float32                # nothing is cast outside the region


def test_convolutions_and_einsum_are_products_too(device):
    image, kernel = tg.randn(1, 2, 5, 5, device=device), tg.randn(3, 2, 3, 3, device=device)
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        assert F.conv2d(image, kernel).dtype == tg.bfloat16
        assert F.conv2d(image, kernel, tg.zeros(3, device=device)).dtype == tg.bfloat16    # a bias joins the cast
        assert F.conv2d(F.conv2d(image, kernel, padding=1), tg.randn(4, 3, 1, 1, device=device)).dtype == tg.bfloat16
        assert tg.einsum("ij,jk->ik", kernel[0, 0], kernel[1, 0]).dtype == tg.bfloat16
        assert F.softplus(kernel.bfloat16()).dtype == tg.float32


def test_attention_runs_low_under_autocast(device):
    q, k, v = (tg.randn(2, 2, 5, 4, device=device) for _ in range(3))
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        assert F.scaled_dot_product_attention(q, k, v, is_causal=True).dtype == tg.bfloat16
        mask = tg.ones(5, 5, dtype=tg.bool_, device=device).tril()
        assert F.scaled_dot_product_attention(q, k, v, attn_mask=mask).dtype == tg.bfloat16


def test_regions_nest_and_enabled_false_turns_casting_off(device):
    x, w, kind = tg.randn(2, 3, device=device), tg.randn(3, 3, device=device), device_type(device)
    with tg.autocast(kind, dtype=tg.bfloat16):
        with tg.amp.autocast(kind, enabled=False):
            assert (x @ w).dtype == tg.float32
            with tg.autocast(kind, dtype=tg.float16):
                assert (x @ w).dtype == tg.float16
            assert (x @ w).dtype == tg.float32
        assert (x @ w).dtype == tg.bfloat16 and tg.amp.is_autocast_enabled(kind)
        other = "cpu" if kind != "cpu" else "cuda"
        assert not tg.amp.is_autocast_enabled(other)          # a region is for one device type
    assert (x @ w).dtype == tg.float32 and not tg.amp.is_autocast_enabled(kind)


def test_autocast_is_a_decorator_and_checks_its_arguments():
    @tg.autocast("cpu")
    def product(a, b):
        return a @ b
    a = tg.randn(2, 2, device="cpu")
    assert product(a, a).dtype == tg.bfloat16                                  # the cpu's default
    assert tg.amp.get_autocast_dtype("cuda") == tg.float16                     # PyTorch's defaults
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tg.autocast("cpu", dtype=tg.float64)
    with pytest.raises(ValueError, match="device_type"):
        tg.autocast("tpu")


def test_binary_cross_entropy_is_refused_inside_a_region(device):
    p, ones = tg.rand(4, device=device).clamp(0.1, 0.9), tg.ones(4, device=device)
    with tg.autocast(device_type(device)), pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
        F.binary_cross_entropy(p, ones)
    assert F.binary_cross_entropy(p, ones).dtype == tg.float32


def test_a_weight_used_twice_is_cast_once_and_gets_a_float32_gradient(device):
    x = tg.randn(3, 4, device=device)
    w = tg.randn(5, 4, device=device, requires_grad=True)
    with tg.autocast(device_type(device)):
        first, second = F.linear(x, w), F.linear(x * 2, w)
        casts = {first._ctx.next_nodes[1], second._ctx.next_nodes[1]}     # the node each weight came from
        assert len(casts) == 1 and type(next(iter(casts))).__name__ == "Cast"
        loss = (first.float() * second.float()).sum()
    loss.backward()
    assert w.grad.dtype == tg.float32
    with tg.autocast(device_type(device)):     # a new region casts afresh (the weight may have changed)
        assert F.linear(x, w)._ctx.next_nodes[1] not in casts


def test_two_backwards_in_one_region_share_the_cast_and_add_up(device):
    """The cached cast is one node in two graphs: each backward goes through it (it saves nothing)."""
    x = tg.randn(3, 4, device=device)
    w = tg.randn(5, 4, device=device, requires_grad=True)
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        for _ in range(2):                          # gradient accumulation written inside one region
            F.linear(x, w).float().sum().backward()
    once = tg.randn(5, 4, device=device, requires_grad=True)
    once.data[...] = w.data
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        F.linear(x, once).float().sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2 * once.grad.numpy())


# ----------------------------------------------------------------------------- a region's parameters, cast together
def tied_model(device):
    """Two products and a weight used twice, once in a product (cast) and once in float32 (an embedding's way)."""
    tg.manual_seed(5)
    w1, w2 = (tg.randn(6, 6, device=device, requires_grad=True) for _ in range(2))
    b = tg.randn(6, device=device, requires_grad=True)
    x = tg.randn(4, 6, device=device)

    def loss(dtype):
        with tg.autocast(device_type(device), dtype=dtype):
            h = F.linear(F.linear(x, w1, b).relu(), w2)
            return (h.float() * (w2.sum(0) + 1)).sum()       # w2 also in float32: two gradients, one leaf
    return (w1, w2, b), loss


def cast_nodes(out):
    """The class names of the nodes between `out`'s graph and the leaves that require grad."""
    names, stack, seen = set(), [out._ctx], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or isinstance(node, tg.Tensor):
            continue
        seen.add(id(node))
        if any(isinstance(child, tg.Tensor) for child in node.next_nodes):
            names.add(type(node).__name__)
        stack.extend(node.next_nodes)
    return names


@pytest.mark.parametrize("low", HALF, ids=HALF_IDS)
def test_the_next_region_casts_the_parameters_together_with_the_same_numbers(device, low):
    """The first region casts each parameter at its first use; the next, on emu and cuda, casts all of them in one
    launch when it meets the first, and the backward casts their gradients back together. Loss, gradients and
    the leaves' hooks are those of the one-by-one casts."""
    params, loss_of = tied_model(device)
    seen = []
    params[1].register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    results = []
    for region in range(3):
        loss = loss_of(low)
        assert ("CastTogether" in cast_nodes(loss)) == (region > 0 and device != "cpu")
        loss.backward()
        results.append([loss.numpy()] + [p.grad.numpy() for p in params])
        assert all(p.grad.dtype == tg.float32 for p in params)
        for p in params:
            p.grad = None
    for later in results[1:]:
        for a, b in zip(results[0], later):
            np.testing.assert_array_equal(a, b)
    assert len(seen) == 3 and all(np.array_equal(h, results[0][2]) for h in seen)   # once each, when complete


def test_the_products_16_bit_weight_gradients_are_written_into_one_array(device, monkeypatch):
    """With the casts made together (emu and cuda), each product writes its weight's 16-bit gradient into a place
    the engine made in one array for all the casts' gradients, and the casts back read them there (the numbers
    are checked against the one-by-one casts' in the test above)."""
    if device == "cpu":
        pytest.skip("the cpu casts one by one")
    from tinygrad_gpu import kernels
    params, loss_of = tied_model(device)
    loss_of(tg.bfloat16).backward()                              # the first region: one by one
    cast, casts = kernels.multi_tensor.cast, []

    def recording(arrays, dtype, *rest, **options):
        casts.append(arrays)
        return cast(arrays, dtype, *rest, **options)
    monkeypatch.setattr(kernels.multi_tensor, "cast", recording)
    loss_of(tg.bfloat16).backward()
    casts_back = [arrays for arrays in casts if arrays[0].dtype == tg.bfloat16]
    assert len(casts_back) == 1
    weights = [a for a in casts_back[0] if a.ndim == 2]          # w1's and w2's, from the products
    assert len(weights) == 2 and len({allocation(a) for a in weights}) == 1


def test_a_16_bit_parameters_gradient_is_not_in_the_casts_array(device, monkeypatch):
    """A bfloat16 parameter's .grad (kept until zero_grad) and the casts' bfloat16 gradients (gone once cast back)
    are places in two arrays, so the .grad does not keep the casts' memory alive."""
    if device == "cpu":
        pytest.skip("the cpu casts one by one")
    from tinygrad_gpu import kernels
    tg.manual_seed(7)
    w = tg.randn(6, 6, device=device, requires_grad=True)
    low = tg.randn(6, 6, device=device, dtype=tg.bfloat16, requires_grad=True)
    x = tg.randn(4, 6, device=device)

    def loss():
        with tg.autocast(device_type(device), dtype=tg.bfloat16):
            return F.linear(F.linear(x, w), low).float().sum()
    loss().backward()                                            # the first region: one by one
    w.grad = low.grad = None
    cast, casts = kernels.multi_tensor.cast, []

    def recording(arrays, dtype, *rest, **options):
        casts.append(arrays)
        return cast(arrays, dtype, *rest, **options)
    monkeypatch.setattr(kernels.multi_tensor, "cast", recording)
    loss().backward()
    (cast_back,) = [arrays for arrays in casts if arrays[0].dtype == tg.bfloat16]
    assert low.grad.dtype == tg.bfloat16 and allocation(low.grad.data) not in {allocation(a) for a in cast_back}


def test_casts_made_together_keep_the_other_ways_through_the_graph(device):
    """tg.grad, create_graph and a cast of a parameter the last region did not cast: each as before."""
    params, loss_of = tied_model(device)
    loss_of(tg.bfloat16).backward()                              # the first region: one by one
    want = [p.grad.numpy() for p in params]
    got = tg.grad(loss_of(tg.bfloat16), list(params))           # wanted tensors: nothing is gathered
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b.numpy())
    first = tg.grad(loss_of(tg.bfloat16), [params[0]], create_graph=True)[0]
    assert first.requires_grad                                   # a graph of the backward, through the casts
    extra = tg.randn(6, 6, device=device, requires_grad=True)    # not cast by the last region: cast alone
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        F.linear(tg.randn(2, 6, device=device), params[0])
        assert type(F.linear(tg.randn(2, 6, device=device), extra)._ctx.next_nodes[1]).__name__ == "Cast"


@pytest.mark.skipif(not tg.cuda_available() or not tg.device.cupy().__name__.endswith("cupy_standin"),
                    reason="reads the CuPy stand-in's counters")
def test_on_the_standin_a_regions_parameters_are_cast_in_one_launch_each_way(monkeypatch):
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)    # the suite's own check reads pointers on the host
    tg.manual_seed(6)
    weights = [tg.randn(8, 8, device="cuda", requires_grad=True) for _ in range(5)]
    x = tg.randn(2, 8, device="cuda")

    def forward():
        h = x
        with tg.autocast("cuda", dtype=tg.bfloat16):
            for w in weights:
                h = F.linear(h, w)
            return h.float().sum()
    launches = []
    for region in range(2):                                      # the first: one cast each way per weight
        counters.reset()
        loss = forward()
        forward_launches = counters.launches
        counters.reset()
        loss.backward()
        launches.append((forward_launches, counters.launches))
        assert all(w.grad.dtype == tg.float32 for w in weights)
        for w in weights:
            w.grad = None
    (forward_first, backward_first), (forward_next, backward_next) = launches
    assert forward_first - forward_next == backward_first - backward_next == len(weights) - 1


@pytest.mark.skipif(not tg.cuda_available() or tg.device.cuda_device_count() < 2, reason="needs two cuda devices")
def test_parameters_on_two_gpus_are_cast_together_per_gpu():
    """One region, a layer on each GPU: each GPU's parameters are cast in one launch there, and their gradients
    cast back there; the numbers are the one-by-one casts'."""
    tg.manual_seed(8)
    weights = [tg.randn(6, 6, device=d, requires_grad=True) for d in ("cuda:0", "cuda:0", "cuda:1", "cuda:1")]
    x = tg.randn(3, 6, device="cuda:0")

    def loss():
        with tg.autocast("cuda", dtype=tg.bfloat16):
            h = F.linear(F.linear(x, weights[0]), weights[1]).to("cuda:1")
            return F.linear(F.linear(h, weights[2]), weights[3]).float().sum()
    results = []
    for region in range(2):
        out = loss()
        assert ("CastTogether" in cast_nodes(out)) == (region == 1)
        out.backward()
        results.append([w.grad.numpy() for w in weights])
        assert [w.grad.device for w in weights] == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
        for w in weights:
            w.grad = None
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("low", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_norm_that_feeds_products_writes_the_products_dtype_with_the_same_numbers(device, low, bias):
    """LayerNorm(feeds_products=True) under autocast: its output already in the region's dtype (no cast node
    after it), and the output, the next product and every gradient the bits of the float32 layer norm plus the
    product's cast; outside a region, float32 as always."""
    tg.manual_seed(3)
    norm = tg.nn.LayerNorm(24, bias=bias, feeds_products=True).to(device)
    plain = tg.nn.LayerNorm(24, bias=bias).to(device)
    plain.load_state_dict(norm.state_dict())
    with tg.no_grad():
        norm.weight.data[...] = tg.randn(24, device=device).data
        plain.weight.data[...] = norm.weight.data
    w = tg.randn(10, 24, device=device, requires_grad=True)
    x0 = tg.randn(3, 20, 24, device=device) * 4 + 1
    residual = tg.randn(3, 20, 24, device=device)              # x's gradient from elsewhere, added in the kernel
    results = []
    for layer in (norm, plain):
        x = x0.detach().requires_grad_()
        with tg.autocast(device_type(device), dtype=low):
            h = layer(x)
            assert h.dtype == (low if layer is norm else tg.float32)
            y = F.linear(h, w)
        (y.float().square().sum() + (x * residual).sum()).backward()
        results.append([h.to(dtype=low).numpy(), y.numpy(), x.grad.numpy(), layer.weight.grad.numpy(), w.grad.numpy()]
                       + ([layer.bias.grad.numpy()] if bias else []))
        w.grad = None
    for a, b in zip(*results):
        np.testing.assert_array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert norm(x0).dtype == tg.float32                                # no region: float32
    with tg.autocast(device_type(device), dtype=low):
        assert norm(x0.double()).dtype == tg.float64                   # float64 is never cast


def test_layer_norm_out_dtype_is_for_float32_data_and_16_bit_out(device):
    x = tg.randn(2, 8, device=device)
    with pytest.raises(ValueError, match="layer_norm: out_dtype float64 is for float32 data and float16 or bfloat16"):
        F.layer_norm(x, 8, out_dtype=tg.float64)
    with pytest.raises(ValueError, match="got float64 data"):
        F.layer_norm(x.double(), 8, out_dtype=tg.bfloat16)
    got = F.layer_norm(x, 8, out_dtype=tg.bfloat16)
    np.testing.assert_array_equal(got.numpy(), F.layer_norm(x, 8).to(dtype=tg.bfloat16).numpy())


def test_a_cast_made_under_no_grad_is_not_kept_and_cache_enabled_false_keeps_none(device):
    from tinygrad_gpu.amp import autocast_mode
    x = tg.randn(3, 4, device=device)
    w = tg.randn(5, 4, device=device, requires_grad=True)
    with tg.autocast(device_type(device)):
        with tg.no_grad():
            F.linear(x, w)                          # an evaluation first: its cast has no graph
        F.linear(x, w).float().sum().backward()
    assert w.grad is not None
    with tg.autocast(device_type(device), cache_enabled=False):
        first, second = F.linear(x, w), F.linear(x, w)
        assert first._ctx.next_nodes[1] is not second._ctx.next_nodes[1] and not autocast_mode._State.cache


def test_bfloat16_takes_the_floating_paths_of_the_ops():
    values = tg.tensor([1.0, float("nan"), 0.5, 3.0]).bfloat16()
    assert np.isnan(values.cummax(0).values.float().numpy()[1:]).all()           # nan propagates, as for floats
    out = tg.zeros(2).bfloat16().scatter_reduce(0, tg.tensor([0, 0, 1, 1]), tg.tensor([1.0, 2.0, 5.0, 6.0]).bfloat16(),
                                                "mean", include_self=False)
    assert out.float().tolist() == [1.5, 5.5]                                     # a mean, not a floor division
    top = tg.zeros(2).bfloat16().scatter_reduce(0, tg.tensor([0, 1]), tg.tensor([-1.0, 2.0]).bfloat16(), "amax",
                                                include_self=False)
    assert top.float().tolist() == [-1.0, 2.0]


def test_backward_computes_in_the_dtypes_the_forward_chose(device):
    x = tg.randn(3, 4, device=device, requires_grad=True)
    w = tg.randn(5, 4, device=device, requires_grad=True)
    with tg.autocast(device_type(device), dtype=tg.bfloat16):
        hidden = F.linear(x, w)
        loss = hidden.float().square().sum()
        # backward inside the region: the product's backward still runs in bfloat16, not cast again
        (grad_hidden,) = tg.grad(loss, [hidden], retain_graph=True)
        loss.backward()
    assert grad_hidden.dtype == tg.bfloat16
    assert x.grad.dtype == tg.float32 and w.grad.dtype == tg.float32
    reference = (2 * x.detach().numpy() @ w.detach().numpy().T) @ w.detach().numpy()
    assert np.allclose(x.grad.numpy(), reference, rtol=0.05, atol=0.05 * np.abs(reference).max())


# ----------------------------------------------------------------------------- a GPT under autocast
def _tiny_gpt(device):
    tg.manual_seed(3)
    return GPT(GPTConfig(block_size=8, vocab_size=32, n_layer=2, n_head=2, n_embd=16, dropout=0.0)).to(device)


@pytest.mark.parametrize("low", HALF, ids=HALF_IDS)
def test_a_gpt_under_autocast_stays_near_float32_and_keeps_float32_parameters(device, low):
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.integers(0, 32, (3, 8)), device=device)
    y = tg.tensor(rng.integers(0, 32, (3, 8)), device=device)
    model = _tiny_gpt(device)
    _, loss32 = model(x, y)
    loss32.backward()
    grads32 = {name: p.grad.numpy() for name, p in model.named_parameters()}
    model.zero_grad()
    with tg.autocast(device_type(device), dtype=low):
        logits, loss = model(x, y)
    loss.backward()
    assert logits.dtype == low and loss.dtype == tg.float32
    # 16-bit products carry a relative error of about 2^-8 (bfloat16) or 2^-11 (float16) per rounding;
    # a few roundings deep, the loss of a 2-layer model stays within a few times that
    assert abs(loss.item() - loss32.item()) < {tg.bfloat16: 0.03, tg.float16: 0.005}[low]
    for name, p in model.named_parameters():
        assert p.dtype == tg.float32 and p.grad.dtype == tg.float32, name
        ours, reference = p.grad.numpy(), grads32[name]
        scale = np.abs(reference).max()
        assert np.abs(ours - reference).max() <= {tg.bfloat16: 0.1, tg.float16: 0.02}[low] * scale + 1e-6, name
