"""tg.save / tg.load: safetensors files with JSON metadata, exact round trips, atomic writes, clear errors."""
import json
import os
import pickle

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import tinygrad_gpu as tg
from tinygrad_gpu import checkpoint
from tinygrad_gpu.nn import GPT, GPTConfig


def assert_same(a, b, where="checkpoint"):
    """Structural and bit-for-bit equality: same container types, same keys, same dtypes and bits."""
    if isinstance(a, tg.Tensor):
        assert isinstance(b, tg.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.numpy().tobytes() == b.numpy().tobytes(), where          # bits, so nan and -0.0 count too
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), where                # key order and key types kept
        for k in a:
            assert type(k) is type(list(b)[list(a).index(k)]), where
            assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(b) is type(a) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}/{i}")
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert type(a) is type(b) and a == b, where
        if isinstance(a, float):
            assert np.copysign(1.0, a) == np.copysign(1.0, b), where


def folder_listing(path):
    return sorted(os.listdir(path))


# ----------------------------------------------------------------------------- round trips
def test_tensors_of_every_dtype_round_trip_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    state = {
        "f32": tg.tensor(rng.standard_normal((3, 4)).astype(np.float32)),
        "f64": tg.tensor(np.array([np.pi, -0.0, np.nan, np.inf, -np.inf, 5e-324])),
        "i64": tg.tensor(np.array([[-(2 ** 62), 0, 2 ** 62 + 1]], dtype=np.int64)),
        "bool": tg.tensor(np.array([True, False, True])),
        "f16": tg.tensor(np.array([1.5, -2.25], dtype=np.float16)),
        "i32": tg.tensor(np.array([7, -7], dtype=np.int32)),
        "scalar": tg.tensor(2.5),
        "empty": tg.zeros(0, 3),
        "transposed": tg.tensor(rng.standard_normal((3, 5))).transpose(0, 1),   # not contiguous
        "array": rng.standard_normal(4),                                         # a NumPy array is stored too
    }
    path = tmp_path / "t.safetensors"
    tg.save(state, path)
    loaded = tg.load(path)
    state["array"] = tg.tensor(state["array"])            # arrays come back as tensors
    assert_same(state, loaded)
    assert loaded["i64"].numpy()[0, 2] == 2 ** 62 + 1
    assert all(t.device == "cpu" for t in loaded.values())


def test_nested_containers_and_plain_values_round_trip(tmp_path):
    state = {
        "step": 1200, "best": 1.4697, "neg_zero": -0.0, "nan": float("nan"), "inf": float("inf"),
        "name": "shakespeare_char", "unicode": "naïve ✓", "nothing": None, "flag": True, "big": 2 ** 70,
        "list": [1, 2.0, "three", None, [tg.tensor([4.0])]],
        "tuple": (0.9, 0.99),
        "empty": {"list": [], "tuple": (), "dict": {}},
        "optimizer": {"state": {0: {"step": 3, "exp_avg": tg.tensor([1.0, 2.0])}, 10: {"step": 1}},
                      "param_groups": [{"params": [0, 10], "lr": 1e-3, "betas": (0.9, 0.95)}]},
        "tricky keys": {"__tensor__": "not a reference", "__dict__": [1], "a.b/c": 1, "": 2},
        "mixed keys": {1: "int", "1": "str"},
    }
    path = tmp_path / "nest.safetensors"
    tg.save(state, path)
    assert_same(state, tg.load(path))


def test_non_dict_top_level_values(tmp_path):
    for i, value in enumerate([tg.tensor([1.0, 2.0]), [tg.tensor([1]), 2], ("a", None), 3.5, "text", None]):
        tg.save(value, tmp_path / f"{i}.safetensors")
        assert_same(value, tg.load(tmp_path / f"{i}.safetensors"))


def test_tensor_paths_that_collide_stay_distinct(tmp_path):
    """'a/b' as one key and 'b' inside 'a' name the same place in the tensor table; both must survive."""
    state = {"a/b": tg.tensor([1.0]), "a": {"b": tg.tensor([2.0])}, "x": [tg.tensor([3.0])], "x/0": tg.tensor([4.0]),
             1: tg.tensor([5.0]), "1": tg.tensor([6.0])}
    tg.save(state, tmp_path / "c.safetensors")
    assert_same(state, tg.load(tmp_path / "c.safetensors"))


def test_the_same_tensor_twice_loads_as_equal_copies(tmp_path):
    t = tg.tensor([1.0, 2.0])
    tg.save({"a": t, "b": t}, tmp_path / "s.safetensors")
    loaded = tg.load(tmp_path / "s.safetensors")
    assert_same({"a": t, "b": t}, loaded)


def tiny_gpt(seed, bias=True):
    tg.manual_seed(seed)
    return GPT(GPTConfig(block_size=8, vocab_size=13, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=bias))


@pytest.mark.parametrize("bias", [True, False])
def test_gpt_state_dict_round_trip_keeps_both_tied_names(tmp_path, bias):
    model = tiny_gpt(0, bias)
    sd = model.state_dict()
    assert "transformer.wte.weight" in sd and "lm_head.weight" in sd
    tg.save(sd, tmp_path / "gpt.safetensors")
    loaded = tg.load(tmp_path / "gpt.safetensors")
    assert list(loaded) == list(sd)
    assert_same(dict(sd), loaded)

    other = tiny_gpt(1, bias)
    assert not np.array_equal(other.lm_head.weight.numpy(), model.lm_head.weight.numpy())
    other.load_state_dict(loaded, strict=True)
    assert other.lm_head.weight is other.transformer.wte.weight               # still tied
    for (name, p), (_, q) in zip(model.named_parameters(), other.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
    idx = tg.tensor(np.arange(8).reshape(1, 8) % 13)
    assert np.array_equal(model(idx)[0].numpy(), other(idx)[0].numpy())


def test_load_onto_emu(tmp_path):
    state = {"w": tg.tensor([[1.0, 2.0]]), "ids": tg.tensor([3, 4]), "meta": {"n": 1}}
    tg.save(state, tmp_path / "e.safetensors")
    loaded = tg.load(tmp_path / "e.safetensors", device="emu")
    assert loaded["w"].device == "emu" and loaded["ids"].device == "emu"
    assert np.array_equal(loaded["w"].numpy(), [[1.0, 2.0]]) and loaded["ids"].dtype == np.int64
    assert loaded["meta"] == {"n": 1}
    saved_from_emu = tmp_path / "from_emu.safetensors"
    tg.save(loaded, saved_from_emu)                         # and back from emu
    assert tg.load(saved_from_emu)["w"].device == "cpu"


def test_save_accepts_str_and_pathlib_and_creates_folders(tmp_path):
    tg.save({"a": 1}, str(tmp_path / "s.safetensors"))
    tg.save({"a": 2}, tmp_path / "new" / "deeper" / "p.safetensors")
    assert tg.load(str(tmp_path / "s.safetensors")) == {"a": 1}
    assert tg.load(tmp_path / "new" / "deeper" / "p.safetensors") == {"a": 2}


def test_saving_again_replaces_the_file(tmp_path):
    path = tmp_path / "x.safetensors"
    tg.save({"v": tg.tensor([1.0])}, path)
    tg.save({"w": tg.tensor([2.0, 3.0])}, path)
    assert_same({"w": tg.tensor([2.0, 3.0])}, tg.load(path))
    assert folder_listing(tmp_path) == ["x.safetensors"]


def test_saved_file_gets_the_usual_permissions(tmp_path):
    """A checkpoint is created like any file the user writes (umask applies), not private 0600 as
    a raw temporary file would be."""
    tg.save({"a": 1}, tmp_path / "ckpt.safetensors")
    with open(tmp_path / "plain", "wb"):
        pass
    mode = os.stat(tmp_path / "ckpt.safetensors").st_mode & 0o777
    assert mode == os.stat(tmp_path / "plain").st_mode & 0o777


# ----------------------------------------------------------------------------- the format
def test_file_is_real_safetensors_with_json_metadata(tmp_path):
    path = tmp_path / "real.safetensors"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    tg.save({"model": {"w": tg.tensor(w)}, "step": 7}, path)
    arrays = safetensors.numpy.load_file(str(path))
    assert list(arrays) == ["model/w"]
    assert np.array_equal(arrays["model/w"], w) and arrays["model/w"].dtype == np.float32
    with safetensors.safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata()
    structure = json.loads(metadata["tinygrad_gpu"])
    assert "model/w" in json.dumps(structure) and "7" in json.dumps(structure)
    with open(path, "rb") as f:
        header_length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_length))              # the format's own JSON header
    assert header["model/w"]["dtype"] == "F32" and header["model/w"]["shape"] == [2, 3]


def test_plain_safetensors_file_loads_as_names_to_tensors(tmp_path):
    path = tmp_path / "hf.safetensors"
    arrays = {"h.0.attn.weight": np.ones((2, 2), np.float32), "wte": np.arange(3, dtype=np.int64)}
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "pt"})
    loaded = tg.load(path)
    assert sorted(loaded) == sorted(arrays)
    for name, a in arrays.items():
        assert isinstance(loaded[name], tg.Tensor) and np.array_equal(loaded[name].numpy(), a)
        assert loaded[name].dtype == a.dtype
    safetensors.numpy.save_file(arrays, str(tmp_path / "no_meta.safetensors"))      # no metadata at all
    assert sorted(tg.load(tmp_path / "no_meta.safetensors")) == sorted(arrays)


# ----------------------------------------------------------------------------- atomicity
@pytest.fixture
def previous(tmp_path):
    """A folder with one good checkpoint; yields (path, its bytes)."""
    path = tmp_path / "ckpt.safetensors"
    tg.save({"model": {"w": tg.tensor([1.0, 2.0])}, "step": 1}, path)
    return path, path.read_bytes()


def assert_previous_intact(path, data):
    assert path.read_bytes() == data
    assert tg.load(path)["step"] == 1
    assert folder_listing(path.parent) == [path.name]                 # no temporary file left behind


class Boom(Exception):
    pass


def raise_boom(*args, **kwargs):
    raise Boom("interrupted")


def raise_keyboard_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


NEW_STATE = {"model": {"w": tg.tensor([9.0, 9.0])}, "step": 2}


@pytest.mark.parametrize("module, name, failure, error", [
    (os, "replace", raise_boom, Boom),                                    # the rename
    (os, "fsync", raise_boom, Boom),                  # after the temporary file has bytes in it
    (os, "replace", raise_keyboard_interrupt, KeyboardInterrupt),         # Ctrl-C in the middle of a save
    (safetensors.numpy, "save", raise_boom, Boom),                        # the serializer
], ids=["rename", "write", "keyboard-interrupt", "serializer"])
def test_interrupted_save_leaves_previous_checkpoint(previous, monkeypatch, module, name, failure, error):
    path, data = previous
    monkeypatch.setattr(module, name, failure)
    with pytest.raises(error):
        tg.save(NEW_STATE, path)
    monkeypatch.undo()
    assert_previous_intact(path, data)


def test_unserializable_value_leaves_previous_checkpoint(previous):
    path, data = previous
    with pytest.raises(TypeError):
        tg.save({"model": {"w": tg.tensor([9.0])}, "step": 2, "bad": object()}, path)
    assert_previous_intact(path, data)


def test_after_a_failed_save_the_next_save_works(previous, monkeypatch):
    path, data = previous
    monkeypatch.setattr(os, "replace", raise_boom)
    with pytest.raises(Boom):
        tg.save(NEW_STATE, path)
    monkeypatch.undo()
    tg.save(NEW_STATE, path)
    assert_same(NEW_STATE, tg.load(path))
    assert folder_listing(path.parent) == [path.name]


# ----------------------------------------------------------------------------- errors
def test_missing_file_is_file_not_found_naming_the_path(tmp_path):
    path = tmp_path / "nope.safetensors"
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        tg.load(path)


def _corrupt_files(tmp_path):
    good = tmp_path / "good.safetensors"
    tg.save({"w": tg.tensor(np.arange(4000, dtype=np.float32)), "step": 3}, good)
    data = good.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    files = {
        "truncated_half": data[:len(data) // 2],                        # cut in the tensor bytes
        "truncated_header": data[:header_end // 2],                     # cut inside the JSON header
        "one_byte_short": data[:-1],
        "empty": b"",
        "random": np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes(),
        "json": json.dumps({"w": [1, 2, 3], "step": 3}).encode(),
        "pickle": pickle.dumps({"w": [1.0, 2.0], "step": 3}),
        "text": b"hello world\n" * 100,
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    return list(files)


def test_corrupt_or_foreign_files_are_value_errors_naming_the_path(tmp_path):
    for name in _corrupt_files(tmp_path):
        with pytest.raises(ValueError, match=name) as info:
            tg.load(tmp_path / name)
        assert str(tmp_path) in str(info.value), name


def test_damaged_metadata_is_a_value_error_naming_the_path(tmp_path):
    path = tmp_path / "badmeta.safetensors"
    safetensors.numpy.save_file({"w": np.ones(2, np.float32)}, str(path), metadata={"tinygrad_gpu": "{not json"})
    with pytest.raises(ValueError, match="badmeta"):
        tg.load(path)
    safetensors.numpy.save_file({"w": np.ones(2, np.float32)}, str(path),
                                metadata={"tinygrad_gpu": json.dumps({"__tensor__": "missing"})})
    with pytest.raises(ValueError, match="badmeta"):
        tg.load(path)


def test_a_directory_is_not_a_checkpoint(tmp_path):
    with pytest.raises((ValueError, IsADirectoryError), match=str(tmp_path.name)):
        tg.load(tmp_path)


@pytest.mark.parametrize("value, what", [
    (object(), "object"), ({1, 2}, "set"), (b"bytes", "bytes"), (1 + 2j, "complex"),
    ({"inner": [lambda: 0]}, "function"),
])
def test_unsupported_values_are_type_errors(tmp_path, value, what):
    with pytest.raises(TypeError, match=what):
        tg.save({"v": value}, tmp_path / "bad.safetensors")
    assert folder_listing(tmp_path) == []


def test_unsupported_dict_keys_are_type_errors(tmp_path):
    with pytest.raises(TypeError, match="key"):
        tg.save({"outer": {(1, 2): tg.tensor([1.0])}}, tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="key"):
        tg.save({1.5: 1}, tmp_path / "bad.safetensors")
    assert folder_listing(tmp_path) == []


def test_object_arrays_are_rejected(tmp_path):
    with pytest.raises((TypeError, ValueError)):
        tg.save({"v": np.array([object()])}, tmp_path / "bad.safetensors")
    assert folder_listing(tmp_path) == []


def test_read_safetensors_gives_numpy_arrays(tmp_path):
    path = tmp_path / "r.safetensors"
    safetensors.numpy.save_file({"a": np.arange(3, dtype=np.float32)}, str(path))
    arrays = checkpoint.read_safetensors(path)
    assert isinstance(arrays["a"], np.ndarray) and np.array_equal(arrays["a"], [0, 1, 2])
