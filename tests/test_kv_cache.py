"""GPT generation with a key-value cache (GPT.generate(use_cache=True), forward(caches=...)) and
nucleus (top-p) sampling in nn.sampling: the cache changes the cost, never the tokens."""
import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from tinygrad_gpu.nn import GPT, GPTConfig, KVCache
from tinygrad_gpu.nn.sampling import choose_next

on_standin = pytest.mark.skipif(not getattr(devices.cupy(), "__name__", "").endswith("cupy_standin"),
                                reason="reads the CuPy stand-in's counters")


def model64(block_size=8, seed=0):
    """A small random GPT in float64 whose weights are scaled up, so the likeliest token depends on
    the context (GPT-2's small initial weights make greedy generation repeat one token)."""
    tg.manual_seed(seed)
    model = GPT(GPTConfig(block_size=block_size, vocab_size=13, n_layer=2, n_head=2, n_embd=16)).to(tg.float64)
    for p in model.parameters():
        p.data[...] *= 15
    return model


def ids(*shape, seed=0):
    return tg.tensor(np.random.default_rng(seed).integers(0, 13, shape))


def greedy_reference(model, idx, n):
    """Greedy decoding written out: the whole cropped context through the model for every token."""
    idx = idx.numpy()
    for _ in range(n):
        logits, _ = model(tg.tensor(idx[:, -model.config.block_size:]))
        idx = np.concatenate([idx, logits.numpy()[:, -1].argmax(-1)[:, None]], 1)
    return idx


# ----------------------------------------------------------------------------- the cached forward
def test_cached_forward_in_pieces_gives_the_uncached_logits():
    model = model64().eval()
    tokens = ids(3, 8, seed=1)
    expected, _ = model(tokens)
    caches = model.new_caches()
    for start, end in ((0, 4), (4, 6), (6, 7), (7, 8)):      # a prompt, a chunk, then one token at a time
        logits, _ = model(tokens[:, start:end], caches=caches)
        np.testing.assert_allclose(logits.numpy(), expected.numpy()[:, start:end], rtol=0, atol=1e-12)
        assert all(len(cache) == end for cache in caches)
    head_size = 16 // 2
    assert caches[0].keys.shape == caches[0].values.shape == (3, 2, 8, head_size)


def test_cached_forward_refuses_positions_past_block_size_and_wrong_cache_counts():
    model = model64().eval()
    caches = model.new_caches()
    model(ids(1, 6), caches=caches)
    with pytest.raises(ValueError, match=r"length 9 \(6 cached, 3 new\).*block_size 8"):
        model(ids(1, 3), caches=caches)
    with pytest.raises(ValueError, match="1 caches for 2 layers"):
        model(ids(1, 3), caches=[KVCache()])


# ----------------------------------------------------------------------------- generation
@pytest.mark.parametrize("prompt_length", [1, 3, 8, 11], ids=["one", "short", "full-window", "longer-than-window"])
def test_greedy_tokens_are_the_same_with_and_without_the_cache(prompt_length):
    model = model64()
    start = ids(3, prompt_length, seed=prompt_length)
    cached = model.generate(start, 14, temperature=0).numpy()           # runs past block_size 8
    np.testing.assert_array_equal(cached, model.generate(start, 14, temperature=0, use_cache=False).numpy())
    np.testing.assert_array_equal(cached, greedy_reference(model, start, 14))
    assert len(np.unique(cached[:, prompt_length:])) > 3                 # the tokens do depend on the context
    assert model.training                                                # generate restores the mode


def test_sampled_tokens_are_the_same_with_and_without_the_cache():
    model = model64()
    start = ids(4, 2)
    tg.manual_seed(7)
    cached = model.generate(start, 12, temperature=0.8, top_k=6, top_p=0.9).numpy()
    tg.manual_seed(7)
    uncached = model.generate(start, 12, temperature=0.8, top_k=6, top_p=0.9, use_cache=False).numpy()
    np.testing.assert_array_equal(cached, uncached)


def test_with_the_cache_each_new_token_runs_through_the_model_alone(monkeypatch):
    """After the prompt a step feeds one position, until the window is full; past it, the whole
    cropped context runs again each step, as without the cache."""
    model = model64()
    fed = []
    embed = model.transformer.wte.forward
    monkeypatch.setattr(model.transformer.wte, "forward", lambda idx: fed.append(idx.shape[1]) or embed(idx))
    model.generate(ids(2, 3), 8, temperature=0)
    assert fed == [3, 1, 1, 1, 1, 1, 8, 8]
    fed.clear()
    model.generate(ids(2, 3), 8, temperature=0, use_cache=False)
    assert fed == [3, 4, 5, 6, 7, 8, 8, 8]


# ----------------------------------------------------------------------------- top-p
PROBS = np.array([0.5, 0.3, 0.1, 0.06, 0.04])


def draws(probs, n=20000, **sampling):
    """n tokens drawn from `probs` by choose_next, each row its own draw, on the default device."""
    logits = tg.tensor(np.tile(np.log(probs), (n, 1)), dtype=tg.float32)
    return tg.Tensor._wrap(choose_next(logits.data, device=logits.device, **sampling), logits.device).numpy()


@pytest.mark.parametrize("top_p, nucleus", [(0.4, [0]), (0.75, [0, 1]), (0.85, [0, 1, 2]), (0.93, [0, 1, 2, 3])])
def test_top_p_draws_only_from_the_nucleus_in_proportion(top_p, nucleus):
    tg.manual_seed(0)
    drawn = draws(PROBS, top_p=top_p)
    assert set(drawn.tolist()) == set(nucleus)
    expected = np.zeros(5)
    expected[nucleus] = PROBS[nucleus] / PROBS[nucleus].sum()
    assert np.abs(np.bincount(drawn, minlength=5) / len(drawn) - expected).max() < 0.015


def test_top_k_applies_before_top_p():
    """After top_k=3 the probabilities are renormalised, (0.556, 0.333, 0.111): 0.85 is reached with two
    tokens. top_p over the full distribution would need three."""
    tg.manual_seed(0)
    assert set(draws(PROBS, top_k=3, top_p=0.85).tolist()) == {0, 1}


def test_top_p_keeps_every_token_tied_with_the_least_likely_kept_one():
    tg.manual_seed(0)
    assert set(draws(np.array([0.3, 0.3, 0.3, 0.1]), n=3000, top_p=0.2).tolist()) == {0, 1, 2}


def test_top_p_one_is_no_top_p():
    tg.manual_seed(3)
    everything = draws(PROBS, top_p=1.0)
    tg.manual_seed(3)
    np.testing.assert_array_equal(everything, draws(PROBS))
    model, start = model64(), ids(2, 3)
    tg.manual_seed(4)
    first = model.generate(start, 10, top_p=1.0).numpy()
    tg.manual_seed(4)
    np.testing.assert_array_equal(model.generate(start, 10).numpy(), first)


@pytest.mark.parametrize("arguments, message", [
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"), (dict(top_p=-0.5), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(temperature=-1.0), "temperature must be >= 0"), (dict(top_k=0), "top_k must be a positive integer"),
])
def test_bad_sampling_arguments(arguments, message):
    model = model64()
    for use_cache in (True, False):
        with pytest.raises(ValueError, match=message):
            model.generate(ids(1, 2), 3, use_cache=use_cache, **arguments)


# ----------------------------------------------------------------------------- the GPU never waits
@on_standin
@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(top_k=5, top_p=0.9)], ids=["greedy", "top-p"])
def test_cached_generation_does_no_host_syncs(sampling):
    from tinygrad_gpu.testing.cupy_standin import counters
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11)).to("cuda")
    start = tg.zeros(2, 2, dtype=tg.int64, device="cuda")
    model.generate(start, 2, **sampling)          # the first call builds the kernels and the generator
    counters.reset()
    out = model.generate(start, 10, **sampling)   # past block_size too
    assert counters.host_syncs == 0, counters.sites
    assert "float64" not in counters.allocated_dtypes
    assert out.device.startswith("cuda") and out.shape == (2, 12)
