"""tg.load's map_location (torch's spelling of where tensors go) beside the older device=, and tg.save's one
answer to being handed a model instead of its state: no pickling, save model.state_dict()."""
import os

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.checkpoint import load, save


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save({"model": {"w": tg.tensor([1.0, 2.0])}, "step": 3}, path)
    return path


def devices_of(state):
    return state["model"]["w"].device


@pytest.mark.parametrize("where", ["cpu", "emu", "CPU", " emu "])
def test_map_location_and_device_name_the_device(saved, where):
    expected = where.strip().lower()
    assert devices_of(load(saved, map_location=where)) == expected
    assert devices_of(load(saved, where)) == expected                   # positional, as torch.load(f, "cpu")
    assert devices_of(load(saved, device=where)) == expected            # the older keyword keeps working
    assert devices_of(load(saved, map_location=where, device=expected)) == expected
    assert load(saved, map_location=where)["model"]["w"].tolist() == [1.0, 2.0]


def test_default_is_the_cpu(saved):
    assert devices_of(load(saved)) == "cpu" and load(saved)["step"] == 3


def test_cuda_spellings(saved):
    if tg.cuda_available():
        assert devices_of(load(saved, map_location="cuda")) == "cuda:0"
        assert devices_of(load(saved, map_location="cuda:0")) == "cuda:0"
    else:
        for where in ("cuda", "cuda:1"):
            with pytest.raises(RuntimeError, match="CUDA is unavailable"):
                load(saved, map_location=where)


def test_a_torch_device_is_read_by_its_name(saved):
    torch = pytest.importorskip("torch")
    assert devices_of(load(saved, map_location=torch.device("cpu"))) == "cpu"


@pytest.mark.parametrize("remap", [{"cuda:0": "cpu"}, lambda storage, location: storage])
def test_remapping_forms_are_refused_naming_what_is_accepted(saved, remap):
    with pytest.raises(TypeError, match=r"load: map_location must name one device \('cpu', 'cuda', 'cuda:N', "
                                        r"'emu'.*not a (dict|function)"):
        load(saved, map_location=remap)


def test_map_location_and_device_that_disagree_are_an_error(saved):
    with pytest.raises(ValueError, match="load: map_location='emu' and device='cpu' disagree"):
        load(saved, map_location="emu", device="cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        load(saved, map_location="tpu")


# ----------------------------------------------------------------------------- saving objects
@pytest.mark.parametrize("what", ["module", "nested module", "optimizer"])
def test_saving_an_object_says_to_save_its_state_dict(tmp_path, what):
    model = tg.nn.Sequential(tg.nn.Linear(2, 3), tg.nn.ReLU())
    value = {"module": model, "nested module": {"model": model, "step": 1},
             "optimizer": tg.optim.SGD(model.parameters(), lr=0.1)}[what]
    with pytest.raises(TypeError) as info:
        save(value, tmp_path / "m.safetensors")
    message = str(info.value)
    assert "never pickle" in message and "tg.save(model.state_dict(), path)" in message
    assert type(value.get("model", value) if isinstance(value, dict) else value).__name__ in message
    assert ("'model'" if what == "nested module" else "'/'") in message              # where in the nest
    assert os.listdir(tmp_path) == []                                                 # nothing written


def test_the_state_dict_itself_saves_and_loads_back(tmp_path):
    model = tg.nn.Linear(2, 3)
    save(model.state_dict(), tmp_path / "m.safetensors")
    fresh = tg.nn.Linear(2, 3)
    fresh.load_state_dict(load(tmp_path / "m.safetensors", map_location="cpu"))
    np.testing.assert_array_equal(fresh.weight.numpy(), model.weight.numpy())
