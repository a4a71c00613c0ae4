"""Datasets and batches under torch.utils.data's names: Dataset, TensorDataset, Subset, DataLoader,
default_collate and random_split.

A dataset is anything with ``len(ds)`` and ``ds[i]``; a DataLoader cuts 0 .. len-1 into batches (in
order, or shuffled once per epoch), fetches each sample and joins them with a collate function, the
default one stacking tensors along a new first dimension as PyTorch's does. Everything runs in the
calling process: there are no worker processes here (torch's num_workers), so loading costs the
training loop its own time; for text, ``tinygrad_gpu.data`` cuts batches straight from one array instead.

Randomness (``generator=``): torch.Generator is not ours, so shuffling and random_split accept
- None: tinygrad_gpu's global cpu generator, which ``tg.manual_seed`` reseeds (as torch's default one);
- an int seed: a fresh ``numpy.random.default_rng(seed)``, made once, so one seed gives one sequence of
  epochs (epoch 1's order, then epoch 2's, ...), the same on every run;
- a ``numpy.random.Generator``: used and advanced as it is (share one to chain several draws).
The orders themselves differ from torch's for the same seed (another random stream).
"""
from __future__ import annotations

import collections.abc
import math
import warnings

import numpy as np

from .. import dtypes
from .. import random as _random
from ..ops.movement import stack
from ..tensor import Tensor


# ----------------------------------------------------------------------------- datasets
class Dataset:
    """The base of map-style datasets: subclasses define ``__getitem__(i)`` and ``__len__()``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__(index) (and __len__)")


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor t): inputs and targets that share their first dimension."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor, e.g. TensorDataset(inputs, targets)")
        shapes = [tuple(getattr(t, "shape", ())) for t in tensors]
        if any(len(s) == 0 for s in shapes):
            raise ValueError(f"TensorDataset: every tensor needs a first dimension to index samples by; got shapes "
                             f"{shapes}")
        if len({s[0] for s in shapes}) != 1:
            raise ValueError(f"TensorDataset: every tensor must have the same size in dim 0 (one row per sample); "
                             f"got shapes {shapes}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


# ----------------------------------------------------------------------------- randomness
def _rng(generator, who: str):
    """The numpy Generator that `generator=` names (module docstring); None: the global one, looked up at each
    use, since tg.manual_seed replaces it."""
    if generator is None:
        return None
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"{who}: generator must be None (tinygrad_gpu's global generator, seeded by tg.manual_seed), "
                    f"an int seed or a numpy.random.Generator; got a {type(generator).__name__} "
                    "(a torch.Generator is not ours: pass its seed as an int instead)")


def _permutation(rng, n: int) -> list:
    rng = _random.generator("cpu") if rng is None else rng
    return rng.permutation(n).tolist()


def random_split(dataset, lengths, generator=None) -> list:
    """Split `dataset` into non-overlapping Subsets of the given lengths, in random order.

    lengths are counts that add up to len(dataset), or fractions that add up to 1: each subset then gets
    floor(fraction * len) samples, and what is left over is handed out one at a time to the subsets in
    turn from the first, as torch does (10 samples at [0.25] * 4 give 3, 3, 2, 2)."""
    n = len(dataset)
    lengths = list(lengths)
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:           # fractions (torch's test: [1, 0] counts as fractions too)
        for i, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError(f"random_split: fraction {fraction} at index {i} is not between 0 and 1")
        counts = [int(math.floor(n * fraction)) for fraction in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, k in enumerate(counts):
            if k == 0:
                warnings.warn(f"random_split: the split at index {i} gets 0 of the {n} samples (an empty subset)",
                              stacklevel=2)
        lengths = counts
    if any(not isinstance(k, (int, np.integer)) or k < 0 for k in lengths):
        raise ValueError(f"random_split: lengths must be non-negative ints or fractions that add up to 1, got "
                         f"{lengths}")
    if sum(lengths) != n:
        raise ValueError(f"random_split: lengths {lengths} add up to {sum(lengths)}, but the dataset has {n} "
                         "samples; give counts that add up to len(dataset) or fractions that add up to 1")
    order = _permutation(_rng(generator, "random_split"), n)
    subsets, start = [], 0
    for k in lengths:
        subsets.append(Subset(dataset, order[start:start + k]))
        start += k
    return subsets


# ----------------------------------------------------------------------------- collation
_COLLATABLE = "tensors, numpy arrays, numbers, strings, dicts or lists/tuples of them"


def _numeric(dtype) -> bool:
    """bool, integer or floating (bfloat16 included): what a tensor can hold; not strings, objects, complex."""
    return dtypes.category(dtype) <= 2


def default_collate(batch):
    """Join a list of samples into a batch, by the first sample's type, recursively (torch's rules):
    tensors -> stacked along a new dim 0 (on their device); numpy arrays and numpy scalars -> one cpu tensor of
    their dtype; Python floats -> float64, ints -> int64, bools -> bool (cpu tensors, as torch makes them);
    strings -> the list as it is; dicts -> a dict of batches per key; a tuple -> a list of batches, one per
    position (a namedtuple stays one); lists alike, each sample of the same length."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch, 0)
    if isinstance(elem, (np.ndarray, np.generic)):
        if not _numeric(np.asarray(elem).dtype):
            raise TypeError(f"default_collate: cannot batch numpy arrays of {np.asarray(elem).dtype}; a batch must "
                            f"hold {_COLLATABLE}")
        return Tensor(np.stack([np.asarray(b) for b in batch]), device="cpu")
    if isinstance(elem, bool):
        return Tensor(batch, dtype=dtypes.bool_, device="cpu")
    if isinstance(elem, float):
        return Tensor(batch, dtype=dtypes.float64, device="cpu")
    if isinstance(elem, int):
        return Tensor(batch, device="cpu")
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        joined = {key: default_collate([sample[key] for sample in batch]) for key in elem}
        try:
            return joined if type(elem) is dict else type(elem)(joined)
        except TypeError:                                 # a mapping type that cannot be built from a dict
            return joined
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):       # a namedtuple keeps its type
        return type(elem)(*(default_collate(list(column)) for column in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError(f"default_collate: each element in list of batch should be of equal size; got "
                               f"lengths {[len(sample) for sample in batch]}")
        columns = [default_collate(list(column)) for column in zip(*batch)]
        if isinstance(elem, tuple) or type(elem) is list:
            return columns                                # torch gives a list for tuples too
        try:
            return type(elem)(columns)
        except TypeError:
            return columns
    raise TypeError(f"default_collate: a batch must hold {_COLLATABLE}; found a {type(elem).__name__} "
                    "(pass collate_fn= to join such samples yourself)")


def default_convert(sample):
    """batch_size=None's conversion of one sample (torch's): numpy arrays become cpu tensors, in dicts and
    sequences too; everything else stays as it is."""
    if isinstance(sample, np.ndarray) and _numeric(sample.dtype):
        return Tensor(sample, device="cpu")
    if isinstance(sample, collections.abc.Mapping):
        return {key: default_convert(value) for key, value in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return type(sample)(*(default_convert(v) for v in sample))
    if isinstance(sample, (list, tuple)):
        return type(sample)(default_convert(v) for v in sample)
    return sample


# ----------------------------------------------------------------------------- the loader
class DataLoader:
    """Batches of `dataset`: ``for x, y in DataLoader(TensorDataset(X, Y), batch_size=32, shuffle=True)``.

    batch_size=None turns batching off (each sample as it is, numpy arrays made tensors), as in torch.
    shuffle=True draws a new order for every epoch (each ``iter(loader)``) from `generator` (module
    docstring: None, an int seed or a numpy.random.Generator). drop_last=True leaves out a last batch
    smaller than batch_size. collate_fn joins a list of samples into a batch (default_collate).
    The options after shuffle are keyword-only: torch's fourth positional argument is a sampler, which a
    positional call here would silently take for drop_last.
    """

    def __init__(self, dataset, batch_size=1, shuffle: bool = False, *, drop_last: bool = False, generator=None,
                 collate_fn=None, num_workers: int = 0):
        if num_workers != 0:
            raise ValueError(f"DataLoader: num_workers={num_workers}, but samples are loaded in the calling process "
                             "here (no worker processes); pass num_workers=0 or leave it out")
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool)
                                       or batch_size <= 0):
            raise ValueError(f"DataLoader: batch_size must be a positive int (or None for no batching), got "
                             f"batch_size={batch_size!r}")
        if batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None turns batching off, so drop_last=True has nothing to "
                             "drop; pass one or the other")
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader: the dataset (a {type(dataset).__name__}) needs __len__ and __getitem__ "
                            "(a map-style dataset); iterable-style datasets are not supported")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.generator = generator
        self._rng = _rng(generator, "DataLoader")     # made once: one seed gives one sequence of epochs
        self.collate_fn = collate_fn if collate_fn is not None else \
            default_collate if batch_size is not None else default_convert

    def _order(self) -> list:
        n = len(self.dataset)
        return _permutation(self._rng, n) if self.shuffle else list(range(n))

    def __iter__(self):
        order = self._order()
        if self.batch_size is None:
            for i in order:
                yield self.collate_fn(self.dataset[i])
            return
        stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
        for start in range(0, stop, self.batch_size):
            yield self.collate_fn([self.dataset[i] for i in order[start:start + self.batch_size]])

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
