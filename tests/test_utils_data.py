"""tg.utils.data: datasets, the DataLoader's batches and orders, default_collate and random_split, against
what torch.utils.data gives for the same inputs (where torch is installed) and against plain expectations."""
import collections
import warnings

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.utils.data import (DataLoader, Dataset, Subset, TensorDataset, default_collate, random_split)


class Squares(Dataset):
    """Sample i is (i, i * i): a dataset whose samples say where they came from."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return i, float(i * i)

    def __len__(self):
        return self.n


def indices_of(loader):
    """The sample indices of each batch a Squares loader gives."""
    return [batch[0].tolist() for batch in loader]


# ----------------------------------------------------------------------------- datasets
def test_tensor_dataset_indexes_every_tensor_by_its_first_dim():
    x, y = tg.arange(12.0).reshape(4, 3), tg.tensor([0, 1, 0, 1])
    ds = TensorDataset(x, y)
    assert len(ds) == 4
    xi, yi = ds[2]
    assert xi.tolist() == [6.0, 7.0, 8.0] and yi.item() == 0


def test_tensor_dataset_refuses_first_dims_that_differ():
    with pytest.raises(ValueError, match=r"TensorDataset.*dim 0.*\(4, 3\).*\(5,\)"):
        TensorDataset(tg.zeros(4, 3), tg.zeros(5))
    with pytest.raises(ValueError, match="first dimension"):
        TensorDataset(tg.zeros(4), tg.tensor(1.0))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()


def test_dataset_base_says_what_to_define():
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]


def test_subset_reads_through_its_indices():
    sub = Subset(Squares(10), [7, 2, 5])
    assert len(sub) == 3 and sub[0] == (7, 49.0) and sub[2] == (5, 25.0)
    assert sub[[1, 2]] == [(2, 4.0), (5, 25.0)]


# ----------------------------------------------------------------------------- batches
@pytest.mark.parametrize("n, batch_size, drop_last", [(10, 3, False), (10, 3, True), (9, 3, False), (9, 3, True),
                                                      (2, 5, False), (2, 5, True), (0, 4, False), (7, 1, False)])
def test_batches_in_order_and_len(n, batch_size, drop_last):
    loader = DataLoader(Squares(n), batch_size=batch_size, drop_last=drop_last)
    batches = indices_of(loader)
    expected = [list(range(s, min(s + batch_size, n))) for s in range(0, n, batch_size)]
    if drop_last:
        expected = [b for b in expected if len(b) == batch_size]
    assert batches == expected
    assert len(loader) == len(expected)


def test_batch_size_must_be_positive():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="DataLoader: batch_size must be a positive int"):
            DataLoader(Squares(3), batch_size=bad)
    with pytest.raises(ValueError, match="drop_last"):
        DataLoader(Squares(3), batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Squares(3), num_workers=2)
    with pytest.raises(TypeError):                 # torch's fourth positional is a sampler: keyword-only here
        DataLoader(Squares(3), 2, False, True)
    with pytest.raises(TypeError, match="__len__"):
        DataLoader(iter(range(3)))


def test_batch_size_none_gives_samples_one_by_one():
    loader = DataLoader([np.arange(2.0), np.arange(2.0) + 1, 3], batch_size=None)
    out = list(loader)
    assert len(loader) == 3
    assert isinstance(out[0], tg.Tensor) and out[0].dtype == tg.float64 and out[1].tolist() == [1.0, 2.0]
    assert out[2] == 3


def test_tensor_dataset_batches_are_stacked_rows():
    x = tg.arange(20.0).reshape(10, 2)
    y = tg.arange(10)
    seen_x, seen_y = [], []
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, generator=3):
        assert xb.shape[1:] == (2,) and xb.shape[0] == yb.shape[0]
        assert xb.dtype == tg.float32 and yb.dtype == tg.int64 and xb.device == x.device
        np.testing.assert_array_equal(xb.numpy(), x.numpy()[yb.numpy()])     # rows stay paired
        seen_x.append(xb.numpy())
        seen_y.extend(yb.tolist())
    assert sorted(seen_y) == list(range(10)) and [len(b) for b in seen_x] == [4, 4, 2]


def test_gradients_flow_through_collated_tensors():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    batch = default_collate([w * 2, w * 3])
    batch.sum().backward()
    assert w.grad.tolist() == [5.0, 5.0]


# ----------------------------------------------------------------------------- shuffling
def test_shuffle_is_a_permutation_new_each_epoch_and_the_same_for_a_seed():
    def epochs(generator, k=3):
        loader = DataLoader(Squares(20), batch_size=6, shuffle=True, generator=generator)
        return [sum(indices_of(loader), []) for _ in range(k)]

    first = epochs(7)
    for order in first:
        assert sorted(order) == list(range(20))
    assert first[0] != first[1] and first[1] != first[2]       # a new order every epoch
    assert epochs(7) == first                                  # one seed, one sequence of epochs
    assert epochs(8) != first
    assert epochs(np.random.default_rng(7)) == first           # an int seed is default_rng(seed)


def test_a_shared_numpy_generator_advances():
    rng = np.random.default_rng(0)
    a = indices_of(DataLoader(Squares(10), batch_size=10, shuffle=True, generator=rng))
    b = indices_of(DataLoader(Squares(10), batch_size=10, shuffle=True, generator=rng))
    assert a != b
    assert a == [np.random.default_rng(0).permutation(10).tolist()]


def test_no_generator_follows_manual_seed():
    def order():
        return indices_of(DataLoader(Squares(30), batch_size=30, shuffle=True))
    tg.manual_seed(123)
    a = order()
    tg.manual_seed(123)
    assert order() == a and sorted(a[0]) == list(range(30))


def test_unshuffled_ignores_the_generator_and_bad_generators_are_named():
    assert indices_of(DataLoader(Squares(5), batch_size=5, generator=4)) == [[0, 1, 2, 3, 4]]
    for bad in ("7", 1.5, True, np.random.RandomState(0)):
        with pytest.raises(TypeError, match="DataLoader: generator must be None.*int seed.*numpy.random.Generator"):
            DataLoader(Squares(5), shuffle=True, generator=bad)


def test_a_torch_generator_is_refused_with_advice():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch.Generator is not ours"):
        DataLoader(Squares(5), shuffle=True, generator=torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------- collation
Point = collections.namedtuple("Point", "x y")

BATCHES = {
    "python floats": [1.5, 2.0, -3.25],
    "python ints": [1, 2, 3],
    "bools": [True, False, True],
    "numpy arrays": [np.arange(3, dtype=np.float32), np.ones(3, np.float32)],
    "numpy float64 arrays": [np.array([1.0, 2.0]), np.array([3.0, 4.0])],
    "0-d arrays": [np.array(1.0), np.array(2.0)],
    "numpy scalars": [np.float32(1.5), np.float32(2.5)],
    "numpy int32 scalars": [np.int32(1), np.int32(7)],
    "tuples": [(1, 2.0), (3, 4.0)],
    "lists": [[1, 2], [3, 4]],
    "dicts": [{"a": 1, "b": np.float32(2)}, {"a": 3, "b": np.float32(5)}],
    "nested": [{"x": (np.arange(2.0), 1), "s": "one"}, {"x": (np.arange(2.0) + 5, 2), "s": "two"}],
    "namedtuples": [Point(1, 2.5), Point(3, 4.5)],
    "strings": ["a", "bc"],
}


def _plain(value, torch=None):
    """A batch as nested Python containers of (kind, dtype name, values), for comparing ours with torch's."""
    if isinstance(value, tg.Tensor):
        return ("tensor", value.dtype.name, value.tolist())
    if torch is not None and isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype).replace("torch.", ""), value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v, torch) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v, torch) for v in value])
    return value


def test_default_collate_by_type():
    assert _plain(default_collate(BATCHES["python floats"])) == ("tensor", "float64", [1.5, 2.0, -3.25])
    assert _plain(default_collate(BATCHES["python ints"])) == ("tensor", "int64", [1, 2, 3])
    assert _plain(default_collate(BATCHES["bools"])) == ("tensor", "bool", [True, False, True])
    assert _plain(default_collate(BATCHES["tuples"])) == ("list", [("tensor", "int64", [1, 3]),
                                                                   ("tensor", "float64", [2.0, 4.0])])
    point = default_collate(BATCHES["namedtuples"])
    assert isinstance(point, Point) and point.x.tolist() == [1, 3]
    assert default_collate(BATCHES["strings"]) == ["a", "bc"]
    assert default_collate(BATCHES["python floats"]).device == "cpu"        # numbers give cpu tensors, as torch


@pytest.mark.parametrize("name", list(BATCHES))
def test_default_collate_matches_torch(name):
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate
    assert _plain(default_collate(BATCHES[name])) == _plain(torch_collate(BATCHES[name]), torch)


def test_default_collate_errors():
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate.*object"):
        default_collate([object()])
    with pytest.raises(TypeError, match="default_collate.*<U1"):
        default_collate([np.array(["a"])])
    with pytest.raises(RuntimeError, match="stack"):
        default_collate([tg.zeros(2), tg.zeros(3)])


def test_collate_fn_replaces_the_default():
    loader = DataLoader(Squares(5), batch_size=2, collate_fn=lambda samples: [i for i, _ in samples])
    assert list(loader) == [[0, 1], [2, 3], [4]]


# ----------------------------------------------------------------------------- random_split
@pytest.mark.filterwarnings("ignore:random_split. the split at index")
@pytest.mark.parametrize("n, lengths", [(10, [3, 7]), (10, [0.3, 0.3, 0.4]), (11, [0.25] * 4), (7, [0.1, 0.1, 0.8]),
                                        (10, [1.0]), (5, [5, 0]), (1, [1, 0]), (3, [0.5, 0.5])])
def test_random_split_lengths_and_partition(n, lengths):
    parts = random_split(Squares(n), lengths, generator=0)
    expected = {(10, (3, 7)): [3, 7], (10, (0.3, 0.3, 0.4)): [3, 3, 4], (11, (0.25,) * 4): [3, 3, 3, 2],
                (7, (0.1, 0.1, 0.8)): [1, 1, 5], (10, (1.0,)): [10], (5, (5, 0)): [5, 0], (1, (1, 0)): [1, 0],
                (3, (0.5, 0.5)): [2, 1]}[n, tuple(lengths)]
    assert [len(p) for p in parts] == expected
    assert all(isinstance(p, Subset) for p in parts)
    taken = sorted(i for p in parts for i in p.indices)
    assert taken == list(range(n))
    assert [p[0][0] for p in parts if len(p)] == [p.indices[0] for p in parts if len(p)]


@pytest.mark.parametrize("n, lengths", [(10, [3, 7]), (10, [0.3, 0.3, 0.4]), (11, [0.25] * 4), (7, [0.1, 0.1, 0.8]),
                                        (13, [0.5, 0.2, 0.2, 0.1]), (1, [1, 0]), (3, [0.5, 0.5])])
@pytest.mark.filterwarnings("ignore:random_split. the split at index", "ignore:Length of split at index")
def test_random_split_lengths_match_torch(n, lengths):
    torch = pytest.importorskip("torch")
    theirs = torch.utils.data.random_split(range(n), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(p) for p in random_split(Squares(n), lengths, generator=0)] == [len(p) for p in theirs]


def test_random_split_warns_of_an_empty_split_from_fractions_only():
    with pytest.warns(UserWarning, match="split at index 2 gets 0 of the 3 samples"):
        random_split(Squares(3), [0.5, 0.4, 0.1], generator=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        random_split(Squares(3), [3, 0], generator=0)          # counts: an empty split is what was asked for


def test_random_split_is_reproducible():
    def split(generator):
        return [p.indices for p in random_split(Squares(12), [4, 8], generator=generator)]
    assert split(5) == split(5) != split(6)
    tg.manual_seed(1)
    a = split(None)
    tg.manual_seed(1)
    assert split(None) == a


def test_random_split_errors():
    with pytest.raises(ValueError, match=r"random_split: lengths \[3, 3\] add up to 6, but the dataset has 10"):
        random_split(Squares(10), [3, 3])
    with pytest.raises(ValueError, match="fraction 1.5 at index 0"):
        random_split(Squares(10), [1.5, -0.5])
    with pytest.raises(ValueError, match="non-negative ints"):
        random_split(Squares(10), [2.5, 7.5])
    with pytest.raises(TypeError, match="random_split: generator"):
        random_split(Squares(10), [5, 5], generator="seed")
