"""tg.save / tg.load: checkpoints as safetensors files, never pickle.

A checkpoint is any nest of dicts and lists whose leaves are tensors or plain values, e.g.
``{"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1200, "config": {...}}``.
Tensors go into the safetensors body, each under its path in the nest (``model/lm_head.weight``);
everything else goes, as JSON, into the file's metadata header, with each tensor replaced by a
reference to its key.  Loading a safetensors file runs no code, unlike unpickling.

Writes are atomic: the bytes go to a temporary file in the same folder, are flushed to disk
(fsync), and only then renamed over the target. A crash or an exception mid-save leaves the
previous checkpoint untouched.
"""
from __future__ import annotations

import json
import os
import uuid

import numpy as np

from . import device as devices
from .tensor import Tensor

_METADATA_KEY = "tinygrad_gpu"
_TENSOR_REF = "__tensor__"


def _device_of(array) -> str:
    return "cpu" if isinstance(array, np.ndarray) else f"cuda:{array.device.id}"


def _split(value, path: str, tensors: dict):
    """The JSON-able structure of `value`, moving each tensor (or array) into `tensors`."""
    if isinstance(value, (Tensor, np.ndarray)) or hasattr(value, "__cuda_array_interface__"):
        array = value.numpy() if isinstance(value, Tensor) else Tensor._wrap(value, _device_of(value)).numpy()
        if array.dtype.kind in "OUS":
            raise TypeError(f"save: cannot store an array of {array.dtype} ({array.dtype.kind!r}: object or "
                            f"string) at '{path}'; only numeric and bool arrays")
        key = path
        while key in tensors:          # {"a/b": x, "a": {"b": y}}: two tensors, one path; keep both
            key += "~"
        # reshape: np.ascontiguousarray makes 0-d arrays 1-d, and a 0-d tensor must load as 0-d
        tensors[key] = np.ascontiguousarray(array).reshape(array.shape)
        return {_TENSOR_REF: key}
    if isinstance(value, dict):
        if any(not isinstance(k, (str, int)) for k in value):
            raise TypeError(f"save: dict keys must be str or int (at '{path or '/'}')")
        return {"__dict__": [[k, _split(v, f"{path}/{k}" if path else str(k), tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"__tuple__" if isinstance(value, tuple) else "__list__":
                [_split(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    # A Module or an optimizer (anything with a state_dict) is the common case: say what to save instead.
    what = "its" if hasattr(value, "state_dict") else "an object's"
    raise TypeError(f"save: cannot store a {type(value).__name__} at '{path or '/'}': checkpoints are safetensors "
                    "files and never pickle objects, so they hold tensors, arrays, numbers, strings, None, and "
                    f"dicts/lists/tuples of them only. Save {what} state instead: tg.save(model.state_dict(), path) "
                    "(an optimizer's alike), and restore it with load_state_dict(tg.load(path)) on a new one")


def _join(structure, tensors: dict, device: str):
    """Rebuild what `_split` took apart."""
    if isinstance(structure, dict):
        if _TENSOR_REF in structure:
            return Tensor(tensors[structure[_TENSOR_REF]], device=device)
        if "__dict__" in structure:
            return {k: _join(v, tensors, device) for k, v in structure["__dict__"]}
        if "__tuple__" in structure:
            return tuple(_join(v, tensors, device) for v in structure["__tuple__"])
        if "__list__" in structure:
            return [_join(v, tensors, device) for v in structure["__list__"]]
    return structure


def save(state, path) -> None:
    """Write `state` to `path` as a safetensors file, atomically."""
    from safetensors.numpy import save as to_bytes
    tensors = {}
    structure = _split(state, "", tensors)
    write_atomically(path, to_bytes(tensors, metadata={_METADATA_KEY: json.dumps(structure)}))


def write_atomically(path, payload: bytes) -> None:
    """Write `payload` to `path` so that it is either all there or the previous file is untouched."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # os.open with mode 0o666 rather than tempfile.mkstemp: the umask then applies as for any file the
    # user writes, where mkstemp's private 0600 would be renamed into place as the checkpoint's mode.
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    try:                                   # make the rename itself durable
        folder_handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder_handle)
        finally:
            os.close(folder_handle)
    except OSError:
        pass


def _read(path):
    """(tensors as NumPy arrays, metadata dict) of a safetensors file, with clear errors."""
    from safetensors import SafetensorError, safe_open
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no checkpoint at {path}")
    try:
        with safe_open(path, framework="numpy") as f:
            return {name: f.get_tensor(name) for name in f.keys()}, (f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"load: {path} is not a readable safetensors file (truncated, or another format): {e}") \
            from None


def read_safetensors(path) -> dict:
    """The tensors of any safetensors file (a Hugging Face checkpoint, say) as NumPy arrays."""
    return _read(path)[0]


def _target_device(map_location, device) -> str:
    """The one device a load puts every tensor on, from torch's `map_location` or our older `device=`.

    A file records no devices (safetensors holds bytes, and `save` stores every tensor from the host), so
    torch's remapping forms, a dict {saved device: new device} or a callable (storage, location) -> storage,
    have nothing to remap here: they are refused rather than half-honoured."""
    if map_location is not None and (callable(map_location) or isinstance(map_location, dict)):
        raise TypeError(f"load: map_location must name one device ('cpu', 'cuda', 'cuda:N', 'emu', or a "
                        f"torch.device of those), not a {type(map_location).__name__}: a checkpoint here records "
                        "no devices to remap, so every tensor loads onto the device named")
    if map_location is not None and device is not None and \
            devices.canonical(str(map_location)) != devices.canonical(device):
        raise ValueError(f"load: map_location={str(map_location)!r} and device={device!r} disagree; pass one of them")
    chosen = map_location if map_location is not None else device if device is not None else "cpu"
    return devices.canonical(str(chosen))          # str(): a torch.device prints as its name


def load(path, map_location=None, device: str = None):
    """Read a checkpoint written by `save`; its tensors are placed on one device: `map_location` (torch's
    name: "cpu", "cuda", "cuda:1", "emu" or a torch.device) or `device` (the same, our older name), cpu when
    neither is given.

    A plain safetensors file (not written by `save`) loads as a dict of name -> tensor.
    """
    device = _target_device(map_location, device)
    tensors, metadata = _read(path)
    if _METADATA_KEY not in metadata:
        return {name: Tensor(array, device=device) for name, array in tensors.items()}
    try:
        return _join(json.loads(metadata[_METADATA_KEY]), tensors, device)
    except (ValueError, KeyError, TypeError) as e:    # bad JSON, or a reference to a tensor that is not there
        raise ValueError(f"load: {os.fspath(path)} has damaged {_METADATA_KEY} metadata: {e!r}") from None
