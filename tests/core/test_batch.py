"""Tests for rlblocks.contracts.Batch: the seed's examples, dict and array behaviour,
cat/stack/split, conversions and pickling."""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks.contracts._batch
from rlblocks.contracts import Batch


def assert_batch_equal(a: Batch, b: Batch) -> None:
    """Same keys in the same order, same leaf types, dtypes and values (recursively)."""
    assert type(a) is type(b)
    assert list(a.keys()) == list(b.keys())
    for k in a.keys():  # noqa: SIM118 (iterating a Batch yields rows)
        x, y = a[k], b[k]
        assert type(x) is type(y), k
        if isinstance(x, Batch):
            assert_batch_equal(x, y)
        elif isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype, k
            assert x.device == y.device, k
            assert torch.equal(x, y), k
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, k
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y, k


def make_batch(n: int = 4) -> Batch:
    return Batch(
        obs={"pos": np.arange(n * 2, dtype=np.float32).reshape(n, 2), "id": torch.arange(n)},
        act=torch.arange(n, dtype=torch.float32) * 10,
        rew=np.arange(n, dtype=np.float64),
        done=np.zeros(n, dtype=bool),
        tag="run-1",
        gamma=0.99,
    )


# --- the seed's examples ---------------------------------------------------------------------


def test_seed_example_converts_list_and_prints_in_seed_format():
    data = Batch(a=4, b=[5, 5], c="2312312", d=("a", -2, -3))
    assert isinstance(data.b, np.ndarray)
    assert repr(data.b) == "array([5, 5])"
    data.b = np.array([3, 4, 5])
    assert str(data) == (
        "Batch(\n"
        "    a: 4,\n"
        "    b: array([3, 4, 5]),\n"
        "    c: '2312312',\n"
        "    d: array(['a', '-2', '-3'], dtype=object),\n"
        ")"
    )


def test_seed_example_inplace_add_through_tuple_index_writes_every_leaf():
    data = Batch(obs={"index": np.zeros((2, 3))}, act=torch.zeros((2, 2)))
    data[:, 1] += 6
    assert str(data[-1]) == (
        "Batch(\n"
        "    obs: Batch(\n"
        "             index: array([0., 6., 0.]),\n"
        "         ),\n"
        "    act: tensor([0., 6.]),\n"
        ")"
    )
    np.testing.assert_array_equal(data.obs.index, [[0, 6, 0], [0, 6, 0]])
    assert torch.equal(data.act, torch.tensor([[0.0, 6.0], [0.0, 6.0]]))


def test_module_docstring_examples_pass():
    result = doctest.testmod(rlblocks.contracts._batch, verbose=False)
    assert result.attempted >= 5
    assert result.failed == 0


# --- construction and conversion of values ---------------------------------------------------


def test_construction_converts_dicts_lists_and_tuples():
    b = Batch(
        nested={"x": 1, "deeper": {"y": [1.0, 2.0]}},
        ints=[1, 2, 3],
        mixed=("a", -2, -3),
        text=["ab", "c"],
        rows=[{"x": 1, "y": [0, 1]}, {"x": 2, "y": [2, 3]}],
        tensors=[torch.zeros(2), torch.ones(2)],
        ragged=[[1, 2], [3]],
    )
    assert isinstance(b.nested, Batch)
    assert isinstance(b.nested.deeper, Batch)
    assert b.nested.deeper.y.dtype == np.float64
    assert b.ints.dtype == np.int64
    assert b.mixed.dtype == object
    assert list(b.mixed) == ["a", "-2", "-3"]
    assert b.text.dtype == object
    assert isinstance(b.rows, Batch)
    np.testing.assert_array_equal(b.rows.x, [1, 2])
    np.testing.assert_array_equal(b.rows.y, [[0, 1], [2, 3]])
    assert torch.equal(b.tensors, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert b.ragged.dtype == object
    assert b.ragged.shape == (2,)
    assert b.ragged[1] == [3]


def test_construction_keeps_arrays_tensors_and_scalars_as_is():
    arr, ten, sub = np.zeros(3), torch.zeros(3), Batch(z=1)
    np_scalar = np.float32(1.5)
    obj = object()
    b = Batch(arr=arr, ten=ten, sub=sub, i=3, f=0.5, s="x", none=None, np_scalar=np_scalar, obj=obj)
    assert b.arr is arr
    assert b.ten is ten
    assert b.sub is sub
    assert b.np_scalar is np_scalar
    assert b.obj is obj
    assert (b.i, b.f, b.s, b.none) == (3, 0.5, "x", None)


def test_construction_from_dict_batch_rows_and_kwargs():
    arr = np.arange(3)
    from_dict = Batch({"a": arr, "b": {"c": 1}}, d=2)
    assert from_dict.a is arr
    assert from_dict.b.c == 1
    assert from_dict.d == 2
    assert Batch({"a": 1}, a=2).a == 2

    rows = Batch([{"a": 1, "b": "x"}, Batch(a=2, b="y")])
    np.testing.assert_array_equal(rows.a, [1, 2])
    assert list(rows.b) == ["x", "y"]

    empty = Batch()
    assert list(empty.keys()) == []
    assert empty.is_empty()


def test_batch_of_batch_is_a_shallow_copy():
    original = make_batch()
    copy = Batch(original)
    assert copy is not original
    copy.extra = 1
    assert "extra" not in original
    assert copy.rew is original.rew
    assert copy.obs is original.obs


def test_construction_rejects_bad_inputs_and_reserved_keys():
    with pytest.raises(TypeError, match="mapping"):
        Batch(3)
    with pytest.raises(TypeError, match="must be str"):
        Batch({1: 2})
    with pytest.raises(ValueError, match="'keys'"):
        Batch(keys=1)
    with pytest.raises(ValueError, match="'split'"):
        Batch({"split": 1})
    b = Batch()
    with pytest.raises(ValueError, match="'shape'"):
        b.shape = 3
    with pytest.raises(ValueError, match="'values'"):
        b["values"] = 3
    with pytest.raises(ValueError, match="'__class__'"):
        b["__class__"] = 3


def test_assignment_converts_values_like_construction():
    b = Batch()
    b.x = [1, 2]
    b["y"] = {"z": [3.0]}
    b.t = ("a", 1)
    assert isinstance(b.x, np.ndarray)
    np.testing.assert_array_equal(b.x, [1, 2])
    assert isinstance(b.y, Batch)
    assert b["y"]["z"].dtype == np.float64
    assert b.t.dtype == object


# --- dict-like access ------------------------------------------------------------------------


def test_dict_methods_act_on_keys():
    b = Batch(a=1, b=np.zeros(2), c={"d": 2})
    assert "a" in b and "d" not in b
    assert list(b.keys()) == ["a", "b", "c"]
    assert list(b.values()) == [1, b.b, b.c]
    assert [k for k, _ in b.items()] == ["a", "b", "c"]
    assert b.get("a") == 1 and b.get("zz", 7) == 7
    assert b.c.d == b["c"]["d"] == 2
    assert b.pop("a") == 1 and "a" not in b
    assert b.pop("a", None) is None
    with pytest.raises(KeyError):
        b.pop("a")
    b.update({"e": [1]}, f={"g": 3})
    assert isinstance(b.e, np.ndarray) and b.f.g == 3
    del b["e"]
    assert "e" not in b
    del b.f
    assert "f" not in b
    with pytest.raises(KeyError):
        b["missing"]
    with pytest.raises(AttributeError):
        _ = b.missing
    assert dict(b).keys() == {"b", "c"}
    assert b.to_dict() == {"b": b.b, "c": {"d": 2}}
    assert type(b.to_dict()["c"]) is dict


def test_iteration_yields_rows_not_keys():
    b = Batch(x=np.array([10, 20, 30]), y=torch.tensor([1, 2, 3]), k="const")
    rows = list(b)
    assert len(rows) == 3
    assert [int(r.x) for r in rows] == [10, 20, 30]
    assert [int(r.y) for r in rows] == [1, 2, 3]
    assert all(r.k == "const" for r in rows)


def test_no_value_equality():
    b = Batch(a=np.zeros(2))
    assert b == b
    assert b != Batch(b)


# --- indexing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        slice(1, 3),
        np.array([3, 0, 0]),
        np.array([True, False, True, True]),
        [2, 1],
        torch.tensor([1, 3]),
    ],
    ids=["int", "negative", "slice", "array", "mask", "list", "tensor"],
)
def test_indexing_applies_to_every_leaf(index):
    b = make_batch(4)
    np_index = index.numpy() if isinstance(index, torch.Tensor) else index
    sub = b[index]
    assert isinstance(sub, Batch)
    np.testing.assert_array_equal(sub.obs.pos, b.obs.pos[np_index])
    assert torch.equal(sub.obs.id, b.obs.id[index])
    assert torch.equal(sub.act, b.act[index])
    np.testing.assert_array_equal(sub.rew, b.rew[np_index])
    np.testing.assert_array_equal(sub.done, b.done[np_index])
    assert sub.tag == "run-1" and sub.gamma == 0.99


def test_tuple_index_reaches_second_axis():
    b = Batch(a=np.arange(6).reshape(2, 3), t=torch.arange(6).reshape(2, 3))
    sub = b[:, 2]
    np.testing.assert_array_equal(sub.a, [2, 5])
    assert torch.equal(sub.t, torch.tensor([2, 5]))


def test_basic_slice_returns_views_that_write_through():
    b = make_batch(4)
    view = b[1:3]
    view.rew[:] = -1
    view.act[:] = -1
    view.obs.pos[:] = -1
    np.testing.assert_array_equal(b.rew, [0, -1, -1, 3])
    assert torch.equal(b.act, torch.tensor([0.0, -1.0, -1.0, 30.0]))
    assert (b.obs.pos[1:3] == -1).all() and (b.obs.pos[0] != -1).all()


def test_indexing_error_names_the_key():
    b = Batch(a=np.zeros(4), b=np.zeros(2))
    with pytest.raises(IndexError) as info:
        b[3]
    assert any("'b'" in note for note in info.value.__notes__)


def test_indexing_keeps_zero_dim_leaves():
    b = Batch(a=np.arange(3), loss=torch.tensor(0.5), s=np.array(2.0))
    sub = b[1]
    assert sub.loss is b.loss and sub.s is b.s
    assert sub.a == 1


# --- index assignment ------------------------------------------------------------------------


def test_index_assignment_writes_every_leaf():
    b = make_batch(4)
    row = Batch(
        obs={"pos": np.array([7.0, 8.0]), "id": torch.tensor(9)},
        act=torch.tensor(5.0),
        rew=1.5,
        done=True,
        tag="other",
        gamma=0.5,
    )
    b[2] = row
    np.testing.assert_array_equal(b.obs.pos[2], [7, 8])
    assert int(b.obs.id[2]) == 9
    assert float(b.act[2]) == 5.0
    assert b.rew[2] == 1.5 and bool(b.done[2])
    # scalar leaves are per-batch constants: index assignment leaves them alone
    assert b.tag == "run-1" and b.gamma == 0.99
    # other rows untouched
    assert int(b.obs.id[1]) == 1 and b.rew[1] == 1.0


def test_index_assignment_of_scalar_broadcasts_to_every_leaf():
    b = make_batch(4)
    b[np.array([0, 3])] = 0
    assert (b.obs.pos[[0, 3]] == 0).all()
    assert torch.equal(b.obs.id, torch.tensor([0, 1, 2, 0]))
    assert torch.equal(b.act, torch.tensor([0.0, 10.0, 20.0, 0.0]))
    np.testing.assert_array_equal(b.rew, [0, 1, 2, 0])


def test_index_assignment_from_dict_with_numpy_into_tensor_leaves():
    b = Batch(t=torch.zeros(3, 2), a=np.zeros((3, 2)))
    b[1:] = {"t": np.ones((2, 2)), "a": torch.full((2, 2), 2.0)}
    assert torch.equal(b.t, torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
    np.testing.assert_array_equal(b.a, [[0, 0], [2, 2], [2, 2]])


def test_index_assignment_with_partial_keys_leaves_other_keys():
    b = Batch(a=np.zeros(3), c=np.zeros(3))
    b[0] = Batch(a=5)
    np.testing.assert_array_equal(b.a, [5, 0, 0])
    np.testing.assert_array_equal(b.c, [0, 0, 0])
    with pytest.raises(ValueError, match="'zz'"):
        b[0] = {"zz": 1}


def test_fancy_index_inplace_add_writes_back():
    b = Batch(a=np.zeros(4), t=torch.zeros(4))
    b[np.array([0, 2])] += 3
    np.testing.assert_array_equal(b.a, [3, 0, 3, 0])
    assert torch.equal(b.t, torch.tensor([3.0, 0.0, 3.0, 0.0]))


# --- arithmetic ------------------------------------------------------------------------------


def test_arithmetic_with_scalar_applies_leafwise_and_returns_new_batch():
    b = Batch(a=np.array([1.0, 2.0]), t=torch.tensor([2.0, 4.0]), n=3, s="keep", sub={"x": [4.0]})
    for result, expected in [
        (b + 1, [2.0, 3.0]),
        (b - 1, [0.0, 1.0]),
        (b * 2, [2.0, 4.0]),
        (b / 2, [0.5, 1.0]),
        (1 + b, [2.0, 3.0]),
        (1 - b, [0.0, -1.0]),
        (2 * b, [2.0, 4.0]),
        (2 / b, [2.0, 1.0]),
    ]:
        np.testing.assert_allclose(result.a, expected)
        assert result.s == "keep"
    assert torch.equal((b - 1).t, torch.tensor([1.0, 3.0]))
    assert torch.equal((8 / b).t, torch.tensor([4.0, 2.0]))
    assert (b * 2).n == 6
    np.testing.assert_array_equal((b * 2).sub.x, [8.0])
    np.testing.assert_array_equal(b.a, [1.0, 2.0])  # unchanged


def test_arithmetic_with_array_and_batch_operands():
    b = Batch(a=np.array([[1.0, 2.0]]), t=torch.tensor([[1.0, 1.0]]))
    by_array = b * np.array([2.0, 3.0])
    np.testing.assert_array_equal(by_array.a, [[2.0, 6.0]])
    by_rarray = np.array([2.0, 3.0]) + b
    np.testing.assert_array_equal(by_rarray.a, [[3.0, 5.0]])
    by_batch = b - Batch(a=np.array([[1.0, 1.0]]), t=torch.tensor([[0.5, 0.5]]))
    np.testing.assert_array_equal(by_batch.a, [[0.0, 1.0]])
    assert torch.equal(by_batch.t, torch.tensor([[0.5, 0.5]]))
    by_dict = b + {"a": 1.0, "t": 2.0}
    np.testing.assert_array_equal(by_dict.a, [[2.0, 3.0]])
    with pytest.raises(ValueError, match="'t'"):
        b + Batch(a=1.0)


def test_arithmetic_mixing_numpy_and_torch_leaves():
    arr, ten = np.array([1.0, 2.0]), torch.tensor([1.0, 2.0])
    b = Batch(a=arr, t=ten)
    mixed = b + Batch(a=torch.tensor([1.0, 1.0]), t=np.array([2.0, 2.0]))
    assert torch.equal(mixed.a, torch.tensor([2.0, 3.0], dtype=torch.float64))
    assert torch.equal(mixed.t, torch.tensor([3.0, 4.0]))
    b += Batch(a=torch.tensor([1.0, 1.0]), t=np.array([1.0, 1.0]))
    assert b.a is arr and b.t is ten  # in place keeps each leaf's kind
    np.testing.assert_array_equal(arr, [2.0, 3.0])
    assert torch.equal(ten, torch.tensor([2.0, 3.0]))


def test_inplace_arithmetic_modifies_leaves_in_place():
    arr, ten = np.array([1.0, 2.0]), torch.tensor([1.0, 2.0])
    b = Batch(a=arr, t=ten, n=1)
    b += 1
    b *= 2
    b -= Batch(a=1.0, t=1.0, n=1)
    b /= 2
    assert b.a is arr and b.t is ten
    np.testing.assert_array_equal(arr, [1.5, 2.5])
    assert torch.equal(ten, torch.tensor([1.5, 2.5]))
    assert b.n == 1.5


def test_arithmetic_error_names_the_key():
    b = Batch(ok=np.zeros(2), bad=np.array(["x", "y"], dtype=object))
    with pytest.raises(TypeError) as info:
        b + 1
    assert any("'bad'" in note for note in info.value.__notes__)


# --- len, shape, emptiness -------------------------------------------------------------------


def test_len_is_the_shared_first_dimension():
    assert len(make_batch(5)) == 5
    assert len(Batch(a=1, b=np.zeros((3, 2)), c={"d": torch.zeros(3)})) == 3
    assert len(Batch(a=np.zeros(2), loss=np.array(1.0))) == 2
    assert len(Batch()) == 0
    assert len(Batch(info={})) == 0


def test_len_errors_when_undefined_or_inconsistent():
    with pytest.raises(TypeError, match="no length"):
        len(Batch(a=1, b="x"))
    with pytest.raises(ValueError, match=r"'a' has 3, 'b' has 2"):
        len(Batch(a=np.zeros(3), b=np.zeros(2)))
    with pytest.raises(ValueError, match="disagree"):
        len(Batch(a=np.zeros(3), sub={"b": torch.zeros(4)}))


def test_shape_is_common_prefix_of_leaf_shapes():
    assert Batch(a=np.zeros((3, 4, 5)), b=torch.zeros(3, 4, 2)).shape == (3, 4)
    assert Batch(a=np.zeros((3, 4)), sub={"b": np.zeros((3, 4))}).shape == (3, 4)
    assert Batch(a=np.zeros((3, 4)), b=np.zeros((2, 4))).shape == ()
    assert Batch(a=1).shape == ()
    assert Batch().shape == ()


def test_is_empty_and_truthiness():
    assert Batch().is_empty() and not Batch()
    assert Batch(info={}, more={"x": {}}).is_empty()
    assert not Batch(info={})
    assert not Batch(a=None).is_empty()
    assert Batch(a=np.zeros(0))
    assert Batch(info={}, a=1)


# --- cat, stack, split -----------------------------------------------------------------------


def test_cat_concatenates_numpy_torch_and_nested_leaves():
    a, b = make_batch(2), make_batch(3)
    del a["tag"], a["gamma"], b["tag"], b["gamma"]
    c = Batch.cat([a, Batch(), b])
    assert len(c) == 5
    np.testing.assert_array_equal(c.rew, [0, 1, 0, 1, 2])
    assert torch.equal(c.obs.id, torch.tensor([0, 1, 0, 1, 2]))
    assert c.obs.pos.shape == (5, 2) and c.obs.pos.dtype == np.float32
    assert c.act.dtype == torch.float32
    assert Batch.cat([]).is_empty()
    assert_batch_equal(Batch.cat([{"x": [1]}, {"x": [2]}]), Batch(x=np.array([1, 2])))


def test_cat_keeps_all_empty_nested_batches():
    c = Batch.cat([Batch(a=np.zeros(1), info={}), Batch(a=np.ones(2), info={})])
    assert isinstance(c.info, Batch) and c.info.is_empty()
    assert len(c) == 3


def test_cat_and_stack_name_the_mismatched_key():
    with pytest.raises(ValueError, match="'b' is in batch 0 but not in batch 1"):
        Batch.cat([Batch(a=np.zeros(1), b=np.zeros(1)), Batch(a=np.zeros(1))])
    with pytest.raises(ValueError, match="'c' is in batch 1 but not in batch 0"):
        Batch.stack([Batch(a=1), Batch(a=1, c=2)])
    with pytest.raises(ValueError, match=r"'obs\.x' is in batch 0 but not in batch 1"):
        Batch.cat([Batch(obs={"x": np.zeros(1)}), Batch(obs={"y": np.zeros(1)})])
    with pytest.raises(ValueError, match="'obs'"):
        Batch.stack([Batch(obs={"x": 1}), Batch(obs=np.zeros(1))])


def test_cat_refuses_scalar_leaves():
    with pytest.raises(ValueError, match="'n' holds a scalar"):
        Batch.cat([Batch(a=np.zeros(1), n=1), Batch(a=np.zeros(1), n=1)])


def test_cat_error_from_shapes_names_the_key():
    with pytest.raises(ValueError) as info:
        Batch.cat([Batch(a=np.zeros((1, 2))), Batch(a=np.zeros((1, 3)))])
    assert any("'a'" in note for note in info.value.__notes__)


def test_stack_adds_a_new_axis():
    rows = [
        Batch(o=np.array([1.0, 2.0]), t=torch.tensor([1, 2]), r=float(i), s=f"s{i}", sub={"k": i})
        for i in range(3)
    ]
    s = Batch.stack(rows)
    assert s.o.shape == (3, 2) and s.t.shape == (3, 2)
    np.testing.assert_array_equal(s.r, [0.0, 1.0, 2.0])
    assert s.s.dtype == object and list(s.s) == ["s0", "s1", "s2"]
    np.testing.assert_array_equal(s.sub.k, [0, 1, 2])
    s1 = Batch.stack([Batch(o=np.zeros((2, 4)), t=torch.zeros(2, 4))] * 3, axis=1)
    assert s1.o.shape == (2, 3, 4) and s1.t.shape == (2, 3, 4)
    with pytest.raises(ValueError, match="axis 0"):
        Batch.stack([Batch(r=1.0), Batch(r=2.0)], axis=1)


def test_split_yields_chunks_in_order():
    b = Batch(x=np.arange(10), t=torch.arange(10))
    chunks = list(b.split(4))
    assert [len(c) for c in chunks] == [4, 4, 2]
    np.testing.assert_array_equal(chunks[2].x, [8, 9])
    assert torch.equal(chunks[1].t, torch.arange(4, 8))
    assert [len(c) for c in b.split(4, merge_last=True)] == [4, 6]
    assert [len(c) for c in b.split(5, merge_last=True)] == [5, 5]
    assert [len(c) for c in b.split(20, merge_last=True)] == [10]
    with pytest.raises(ValueError, match="at least 1"):
        list(b.split(0))


def test_split_shuffle_covers_every_row_once():
    b = Batch(x=np.arange(10), t=torch.arange(10))
    chunks = list(b.split(3, shuffle=True, rng=np.random.default_rng(0)))
    xs = np.concatenate([c.x for c in chunks])
    assert sorted(xs.tolist()) == list(range(10))
    assert xs.tolist() != list(range(10))
    ts = torch.cat([c.t for c in chunks])
    assert ts.tolist() == xs.tolist()  # rows stay aligned across leaves


# --- conversions -----------------------------------------------------------------------------


def test_to_torch_converts_arrays_and_keeps_the_rest():
    arr = np.arange(3, dtype=np.float32)
    b = Batch(
        f=arr,
        i=np.arange(3),
        m=np.array([True, False, True]),
        obj=np.array(["a", "b", "c"], dtype=object),
        n=1,
        s="x",
        sub={"d": np.zeros(3, dtype=np.float64)},
        rev=np.arange(4.0)[::-1],
    )
    t = b.to_torch()
    assert t is not b and isinstance(b.f, np.ndarray)  # new Batch, original untouched
    assert t.f.dtype == torch.float32 and t.f.device.type == "cpu"
    assert t.i.dtype == torch.int64
    assert t.m.dtype == torch.bool
    assert t.obj is b.obj
    assert t.n == 1 and t.s == "x"
    assert t.sub.d.dtype == torch.float64
    assert t.rev.tolist() == [3.0, 2.0, 1.0, 0.0]
    t.f[0] = 9  # CPU conversion shares memory
    assert arr[0] == 9

    t32 = b.to_torch(dtype=torch.float32, device=torch.device("cpu"))
    assert t32.i.dtype == torch.float32 and t32.m.dtype == torch.float32
    assert t32.sub.d.dtype == torch.float32
    assert t32.obj is b.obj


def test_to_torch_moves_and_casts_existing_tensors():
    ten = torch.arange(3)
    b = Batch(t=ten)
    assert b.to_torch().t is ten
    assert b.to_torch(dtype=torch.float64).t.dtype == torch.float64


def test_to_numpy_converts_tensors():
    ten = torch.arange(3.0, requires_grad=True)
    b = Batch(t=ten * 2, a=np.zeros(2), s="x", sub={"u": torch.tensor([1, 2], dtype=torch.int32)})
    n = b.to_numpy()
    assert isinstance(n.t, np.ndarray) and n.t.dtype == np.float32
    np.testing.assert_array_equal(n.t, [0.0, 2.0, 4.0])
    assert n.a is b.a and n.s == "x"
    assert n.sub.u.dtype == np.int32
    assert isinstance(b.t, torch.Tensor)  # original untouched
    assert n.to_torch().t.dtype == torch.float32


def test_pickle_round_trip_keeps_structure_and_values():
    b = make_batch(3)
    b.obj = np.array(["a", None, 3], dtype=object)
    b.none = None
    restored = pickle.loads(pickle.dumps(b))
    assert restored is not b
    assert_batch_equal(restored, b)
    assert repr(restored) == repr(b)


def test_repr_uses_subclass_name_and_indents_multiline_leaves():
    class Transitions(Batch):
        pass

    assert repr(Transitions(a=1)) == "Transitions(\n    a: 1,\n)"
    assert repr(Batch()) == "Batch()"
    text = repr(Batch(m=np.zeros((2, 2)), e={}))
    assert text == (
        "Batch(\n    m: array([[0., 0.],\n              [0., 0.]]),\n    e: Batch(),\n)"
    )


def test_subclass_key_namespace_and_derived_batches():
    class Named(Batch):
        def describe(self) -> str:
            return "named"

    with pytest.raises(ValueError, match="'describe'"):
        Named(describe=1)
    with pytest.raises(ValueError, match="'describe'"):
        Named(Batch(describe=1))
    with pytest.raises(ValueError, match="'describe'"):
        Named().update({"describe": 1})
    n = Named(x=np.arange(3))
    assert type(n[1:]) is Batch
    assert Batch(describe=1).describe == 1


# --- properties ------------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    n = draw(st.integers(1, 12))
    width = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    return Batch(
        obs=rng.normal(size=(n, width)).astype(np.float32),
        act=torch.from_numpy(rng.integers(0, 5, size=n)),
        info={"ok": rng.random(n) > 0.5, "t": torch.from_numpy(rng.normal(size=(n, 2)))},
    )


@settings(max_examples=60, deadline=None)
@given(b=batches(), size=st.integers(1, 14), merge_last=st.booleans())
def test_cat_of_split_reproduces_the_batch(b: Batch, size: int, merge_last: bool):
    chunks = list(b.split(size, merge_last=merge_last))
    assert sum(len(c) for c in chunks) == len(b)
    assert all(len(c) == size for c in chunks[:-1])
    if merge_last and len(chunks) > 1:
        assert size <= len(chunks[-1]) < 2 * size
    assert_batch_equal(Batch.cat(chunks), b)


@settings(max_examples=60, deadline=None)
@given(b=batches(), data=st.data())
def test_indexing_then_stacking_rows_reproduces_the_selection(b: Batch, data: st.DataObject):
    idx = np.array(data.draw(st.lists(st.integers(0, len(b) - 1), min_size=1, max_size=8)))
    rows = Batch.stack([b[int(i)] for i in idx])
    assert_batch_equal(rows, b[idx])
