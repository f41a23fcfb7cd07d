"""Conformance check for replay buffers: :func:`check_buffer`.

A buffer plugin calls it from its own tests with a factory for fresh buffers of its type::

    from rlblocks.testing.buffer_checks import check_buffer

    def test_conforms():
        check_buffer(lambda size, num_envs: MyBuffer(size, num_envs=num_envs))

It drives the buffer through scripted adds of several interleaved envs (with terminated,
truncated and unfinished episodes, one-env and many-env steps, enough to overwrite old data) and
compares everything it can observe through the public API with a plain Python record of what was
added. Transitions are identified by a unique id stored as their ``obs``, so the check makes no
assumption about where a buffer puts them: only that each env keeps its newest steps, that
``sample_index(0)`` lists every valid slot once with each env's steps in insertion order (envs may
come one after another or interleaved) and that episode links match the history.

:class:`History` (the record) is public so tests of other buffers can reuse it.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from rlblocks.contracts import Batch

__all__ = ["History", "check_buffer"]


class History:
    """What was added to a buffer, step by step, and what the buffer should therefore show.

    ``record`` takes one ``add`` call (env ids, flags, rewards, the slots ``add`` returned) and
    returns the expected ``(ep_rew, ep_len, ep_start)``; :meth:`verify` compares a buffer's
    valid transitions, links and unfinished episodes with the record. Transition ``k`` (counting
    every added row in order) must carry ``obs`` (or ``obs["uid"]``) equal to ``k``.
    """

    def __init__(self, num_envs: int, time_ordered: bool = False) -> None:
        #: also require ``sample_index(0)`` to interleave envs in insertion order (the base
        #: buffer does; a buffer that lists env by env, like the vector buffer, does not)
        self.time_ordered = time_ordered
        self.env: list[int] = []
        self.done: list[bool] = []
        self.slot: list[int] = []  # where add() said each step went
        self.by_env: list[list[int]] = [[] for _ in range(num_envs)]
        self._ep_rew = [0.0] * num_envs
        self._ep_len = [0] * num_envs
        self._ep_first = [-1] * num_envs  # uid of the running episode's first step

    def __len__(self) -> int:
        return len(self.env)

    def record(
        self, env_ids: Any, done: Any, rew: Any, slots: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record one add of ``len(env_ids)`` rows; return the expected add() statistics."""
        n = len(env_ids)
        ep_rew, ep_len, ep_start = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64)
        for row in range(n):
            e, d = int(env_ids[row]), bool(done[row])
            uid = len(self.env)
            self.env.append(e)
            self.done.append(d)
            self.slot.append(int(slots[row]))
            self.by_env[e].append(uid)
            if self._ep_len[e] == 0:
                self._ep_first[e] = uid
            self._ep_rew[e] += float(rew[row])
            self._ep_len[e] += 1
            ep_start[row] = self.slot[self._ep_first[e]]
            if d:
                ep_rew[row], ep_len[row] = self._ep_rew[e], self._ep_len[e]
                self._ep_rew[e], self._ep_len[e] = 0.0, 0
        return ep_rew, ep_len, ep_start

    def verify(self, buf: Any, uid_of: Callable[[np.ndarray], np.ndarray], where: str = "") -> None:
        """Assert that ``buf`` shows exactly the record (``uid_of(slots)`` reads the ids)."""
        at = f" ({where})" if where else ""
        valid = np.asarray(buf.sample_index(0))
        assert len(valid) == len(buf), (
            f"sample_index(0) gave {len(valid)} slots but len(buf) == {len(buf)}{at}"
        )
        assert len(buf) <= buf.maxsize, f"len(buf) {len(buf)} exceeds maxsize {buf.maxsize}{at}"
        assert len(np.unique(valid)) == len(valid), f"sample_index(0) repeats slots{at}"
        uids = np.asarray(uid_of(valid)).astype(np.int64)
        env_id = np.asarray(buf.env_id)
        for e in range(len(self.by_env)):
            mine = uids[env_id[valid] == e]
            assert np.all(np.diff(mine) > 0), (
                f"sample_index(0) lists env {e}'s steps out of insertion order: ids "
                f"{mine.tolist()}{at}"
            )
        if self.time_ordered:
            assert np.all(np.diff(uids) > 0), (
                f"sample_index(0) is not in insertion order: ids {uids.tolist()}{at}"
            )
        assert len(uids) == 0 or len(self) - 1 in set(uids.tolist()), (
            f"the newest step is missing{at}"
        )
        slot_of = dict(zip(uids.tolist(), valid.tolist()))
        for e, hist in enumerate(self.by_env):
            kept = [u for u in hist if u in slot_of]
            assert kept == hist[len(hist) - len(kept) :], (
                f"env {e} keeps steps {kept}, which are not its newest ones {hist}{at}"
            )
        prev = np.asarray(buf.prev(valid))
        nxt = np.asarray(buf.next(valid))
        for name, got in (("sample_index(0)", valid), ("prev", prev), ("next", nxt)):
            assert got.dtype == np.int64, (
                f"{name} returned {got.dtype} slots; the contract is int64 from every buffer{at}"
            )
        where_in_env = {u: (e, k) for e, hist in enumerate(self.by_env) for k, u in enumerate(hist)}
        for j, (u, i) in enumerate(zip(uids.tolist(), valid.tolist())):
            e, k = where_in_env[u]
            assert env_id[i] == e, f"slot {i} (step {u}) has env_id {env_id[i]}, expected {e}{at}"
            hist = self.by_env[e]
            p = hist[k - 1] if k > 0 else None
            want_prev = slot_of[p] if p is not None and p in slot_of and not self.done[p] else i
            assert prev[j] == want_prev, (
                f"prev({i}) == {prev[j]}, expected {want_prev} (step {u} of env {e}; previous "
                f"step {p}, done={None if p is None else self.done[p]}, stored={p in slot_of}){at}"
            )
            q = hist[k + 1] if k + 1 < len(hist) else None
            want_next = slot_of[q] if q is not None and not self.done[u] else i
            assert nxt[j] == want_next, (
                f"next({i}) == {nxt[j]}, expected {want_next} (step {u} of env {e}, "
                f"done={self.done[u]}, next step {q}){at}"
            )
        want_unfinished = sorted(
            slot_of[h[-1]] for h in self.by_env if h and h[-1] in slot_of and not self.done[h[-1]]
        )
        got = sorted(np.asarray(buf.unfinished_index()).tolist())
        assert got == want_unfinished, (
            f"unfinished_index() == {got}, expected {want_unfinished}{at}"
        )


def _assert_tree_equal(a: Any, b: Any, where: str) -> None:
    if isinstance(a, Batch):
        assert isinstance(b, Batch), f"{where}: Batch vs {type(b).__name__}"
        ka, kb = list(a.keys()), list(b.keys())
        assert ka == kb, f"{where}: keys {ka} vs {kb}"
        for k in ka:
            _assert_tree_equal(a[k], b[k], f"{where}.{k}")
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{where}: shape {a.shape} vs {b.shape}"
    assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} vs {b.dtype}"
    assert np.array_equal(a, b), f"{where}: values differ: {a!r} vs {b!r}"


def _uid(buf: Any, dict_obs: bool) -> Callable[[np.ndarray], np.ndarray]:
    def read(slots: np.ndarray) -> np.ndarray:
        obs = buf.get(slots, "obs", stack_num=1)
        return np.asarray(obs["uid"] if dict_obs else obs)

    return read


# One env step: (env ids, terminated, truncated). Three envs; done steps, truncations, single-env
# and all-env steps, envs that pause; enough rows to overwrite a buffer of 7 several times.
_SCRIPT: list[tuple[list[int], list[bool], list[bool]]] = [
    ([0, 1, 2], [False, False, False], [False, False, False]),
    ([0, 1, 2], [False, True, False], [False, False, False]),
    ([2, 0], [False, False], [True, False]),
    ([1], [False], [False]),
    ([0, 1, 2], [True, False, False], [False, False, False]),
    ([2], [False], [False]),
    ([1, 2], [False, False], [False, True]),
    ([0, 1, 2], [False, False, False], [False, False, False]),
    ([0], [False], [False]),
    ([0, 2], [False, True], [True, False]),
    ([1, 0, 2], [False, False, False], [False, False, False]),
    ([1], [True], [False]),
]


def _script_obs_next(steps: list[tuple[list[int], list[bool], list[bool]]]) -> list[int]:
    """obs_next id of every scripted row: the id of the env's next step when the episode goes
    on (so a buffer may rebuild it from the next obs), else ``id + 1000``."""
    out: list[int] = []
    open_row: dict[int, int] = {}
    for envs, term, trunc in steps:
        for e, t, u in zip(envs, term, trunc):
            uid = len(out)
            out.append(uid + 1000)
            if e in open_row:
                out[open_row.pop(e)] = uid
            if not (t or u):
                open_row[e] = uid
    return out


_OBS_NEXT = _script_obs_next(_SCRIPT)


def _add_script(
    buf: Any, history: History, steps: list[tuple[list[int], list[bool], list[bool]]],
    dict_obs: bool, check: Callable[[str], None] | None = None,
    obs_next_ids: list[int] | None = None,
) -> None:
    """Add ``steps`` (row ``k`` overall gets obs id ``k``), checking add()'s return values
    against ``history`` and calling ``check`` after each add."""
    table = _OBS_NEXT if obs_next_ids is None else obs_next_ids
    for call, (envs, term, trunc) in enumerate(steps):
        n = len(envs)
        uid = np.arange(len(history), len(history) + n, dtype=np.int64)
        rew = (uid % 5).astype(np.float64) - 1.5
        if dict_obs:
            pos = np.stack([uid, -uid], axis=1).astype(np.float32)
            obs: Any = {"uid": uid, "pos": pos}
            nxt = np.array([table[u] for u in uid], dtype=np.int64)
            obs_next: Any = {"uid": nxt, "pos": np.stack([nxt, -nxt], axis=1).astype(np.float32)}
        else:
            obs, obs_next = uid, np.array([table[u] for u in uid], dtype=np.int64)
        data = {
            "obs": obs, "act": uid % 3, "rew": rew, "terminated": np.array(term),
            "truncated": np.array(trunc), "obs_next": obs_next,
        }
        result = buf.add(Batch(data) if call % 2 else data, env_ids=np.array(envs))
        assert isinstance(result, tuple) and len(result) == 4, (
            f"add() must return (index, ep_rew, ep_len, ep_start), got {result!r}"
        )
        index, ep_rew, ep_len, ep_start = (np.asarray(x) for x in result)
        done = np.array(term) | np.array(trunc)
        want_rew, want_len, want_start = history.record(envs, done, rew, index)
        where = f"add call {call} with env_ids {envs}"
        assert index.shape == (n,), f"{where}: index has shape {index.shape}, expected ({n},)"
        assert np.all((index >= 0) & (index < buf.maxsize)), f"{where}: index {index} out of range"
        assert len(np.unique(index)) == n, f"{where}: rows were written to the same slot {index}"
        assert ep_len.shape == (n,) and np.array_equal(ep_len, want_len), (
            f"{where}: ep_len {ep_len.tolist()}, expected {want_len.tolist()}"
        )
        assert ep_rew.shape == (n,) and np.allclose(ep_rew, want_rew), (
            f"{where}: ep_rew {ep_rew.tolist()}, expected {want_rew.tolist()}"
        )
        assert ep_start.shape == (n,) and np.array_equal(ep_start, want_start), (
            f"{where}: ep_start {ep_start.tolist()}, expected {want_start.tolist()}"
        )
        if check is not None:
            check(where)


def _check_reads(buf: Any, dict_obs: bool) -> None:
    """``__getitem__`` / ``sample`` / ``get`` agree with each other and with what was added."""
    valid = buf.sample_index(0)
    full = buf[:]
    _assert_tree_equal(full, buf[valid], "buf[:] vs buf[buf.sample_index(0)]")
    for key in ("obs", "act", "rew", "terminated", "truncated", "done", "obs_next"):
        assert key in full, f"buf[...] has no {key!r}; it must return every key plus done"
    assert np.array_equal(full.done, full.terminated | full.truncated), "done != term | trunc"
    obs = buf.get(valid, "obs", stack_num=1)
    obs_next = buf.get(valid, "obs_next", stack_num=1)
    uid = np.asarray(obs["uid"] if dict_obs else obs)
    got_next = np.asarray(obs_next["uid"] if dict_obs else obs_next)
    want_next = np.array([_OBS_NEXT[u] for u in uid], dtype=np.int64)
    # a buffer that rebuilds obs_next from the next obs cannot know it at episode ends
    known = np.ones(len(uid), bool) if not getattr(buf, "ignore_obs_next", False) else (
        np.asarray(buf.next(valid)) != valid
    )
    assert np.array_equal(got_next[known], want_next[known]), (
        f"get(..., 'obs_next') gives ids {got_next[known].tolist()}, expected "
        f"{want_next[known].tolist()}"
    )
    if dict_obs:
        assert obs.pos.dtype == np.float32, "nested obs lost its dtype"
        assert np.array_equal(obs.pos[:, 0], uid), "nested obs values differ"
    stack = getattr(buf, "stack_num", 1)
    if stack == 1:
        full_uid = np.asarray(full.obs["uid"] if dict_obs else full.obs)
        assert np.array_equal(full_uid, uid), "buf[:].obs differs from get(..., 'obs')"
    one = buf[int(valid[-1])]
    want = () if stack == 1 else (stack,)
    assert np.asarray(one.obs["uid"] if dict_obs else one.obs).shape == want, (
        f"buf[int] must return one transition without a batch axis (obs shape {want})"
    )
    batch, idx = buf.sample(5)
    assert len(idx) == 5 and set(np.asarray(idx).tolist()) <= set(valid.tolist()), (
        f"sample(5) returned indices {idx} that are not all valid ({valid})"
    )
    _assert_tree_equal(batch, buf[idx], "sample() batch vs buf[indices]")
    assert len(buf.sample_index(-1)) == 0, "sample_index(<0) must be empty"


def _check_roundtrips(buf: Any, dict_obs: bool) -> None:
    cls = type(buf)

    def same(other: Any, what: str) -> None:
        probe = buf.sample_index(0)
        assert type(other) is cls, f"{what} gave a {type(other).__name__}"
        assert len(other) == len(buf), f"{what}: len {len(other)} vs {len(buf)}"
        assert np.array_equal(other.sample_index(0), probe), f"{what}: time order differs"
        assert np.array_equal(other.prev(probe), buf.prev(probe)), f"{what}: prev links differ"
        assert np.array_equal(other.next(probe), buf.next(probe)), f"{what}: next links differ"
        assert np.array_equal(
            np.sort(other.unfinished_index()), np.sort(buf.unfinished_index())
        ), f"{what}: unfinished_index differs"
        _assert_tree_equal(other[:], buf[:], f"{what}: buf[:]")

    same(pickle.loads(pickle.dumps(buf)), "pickle round trip")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "buf.h5")
        buf.save_hdf5(path)
        loaded = cls.load_hdf5(path)
        same(loaded, "hdf5 round trip" + (" (Dict obs)" if dict_obs else ""))
        leftovers = sorted(set(os.listdir(tmp)) - {"buf.h5"})
        assert not leftovers, f"save_hdf5 left files behind: {leftovers}"
        # the loaded buffer keeps working: one more step continues the same episodes
        uid = len(buf) + 10_000
        obs: Any = {"uid": np.array([uid]), "pos": np.zeros((1, 2), np.float32)} if dict_obs else (
            np.array([uid])
        )
        obs_next: Any = {"uid": np.array([uid + 1000]), "pos": np.zeros((1, 2), np.float32)} if (
            dict_obs
        ) else np.array([uid + 1000])
        step = {"obs": obs, "act": np.array([0]), "rew": np.array([1.0]),
                "terminated": np.array([False]), "truncated": np.array([False]),
                "obs_next": obs_next}
        a, b = buf.add(step, env_ids=np.array([0])), loaded.add(step, env_ids=np.array([0]))
        for x, y, name in zip(a, b, ("index", "ep_rew", "ep_len", "ep_start")):
            assert np.array_equal(np.asarray(x), np.asarray(y)), (
                f"after an hdf5 round trip add() returns {name} {y}, the original {x}"
            )
        same(loaded, "add after hdf5 round trip")


def check_buffer(make_buffer: Callable[[int, int], Any], time_ordered: bool = False) -> None:
    """Assert that buffers made by ``make_buffer(size, num_envs)`` follow rlblocks' buffer contract.

    Checked: ``len``; ``add`` return values (insert slots, finished episodes' returns and
    lengths, episode start slots) for one-env and many-env steps; ``prev`` / ``next`` at every
    episode boundary, across envs and after old data is overwritten; ``sample_index(0)`` with
    each env's steps in insertion order (with ``time_ordered``, all steps in insertion order);
    ``unfinished_index``; ``__getitem__`` / ``sample`` / ``get`` (including
    ``obs_next`` and slices in time order); hdf5 and pickle round trips with plain and ``Dict``
    observations; ``reset``.
    Raises AssertionError with a message naming the first difference.
    """
    for dict_obs in (False, True):
        kind = "Dict obs" if dict_obs else "array obs"
        buf = make_buffer(7, 3)
        assert len(buf) == 0, f"a new buffer has len {len(buf)}"
        assert len(buf.sample_index(0)) == 0, "a new buffer's sample_index(0) is not empty"
        history = History(3, time_ordered)
        uid_of = _uid(buf, dict_obs)

        def check(where: str, buf: Any = buf, history: History = history, uid_of: Any = uid_of,
                  kind: str = kind) -> None:
            history.verify(buf, uid_of, f"{kind}, after {where}")

        # first without overwriting (3 steps per env at most), then far past maxsize
        _add_script(buf, history, _SCRIPT[:2], dict_obs, check)
        assert len(buf) == 6, f"{kind}: len {len(buf)} after 6 transitions into size 7"
        _add_script(buf, history, _SCRIPT[2:], dict_obs, check)
        assert len(buf) <= 7, f"{kind}: len {len(buf)} exceeds maxsize 7"
        _check_reads(buf, dict_obs)
        _check_roundtrips(buf, dict_obs)

        # a single step of one env (rew is 0-d, no env axis) works too
        single = make_buffer(5, 1)
        first: Any = {"uid": 0, "pos": np.zeros(2, np.float32)} if dict_obs else 0
        second: Any = {"uid": 1, "pos": np.ones(2, np.float32)} if dict_obs else 1
        out = single.add({"obs": first, "act": 0, "rew": 1.0, "terminated": True,
                          "truncated": False, "obs_next": second})
        assert [np.asarray(x).tolist() for x in out] == [[0], [1.0], [1], [0]], (
            f"{kind}: a single terminated first step returned {out}, expected ([0], [1.], [1], [0])"
        )
        assert len(single) == 1 and single.next(0) == 0 and single.prev(0) == 0

        buf.reset()
        assert len(buf) == 0 and len(buf.sample_index(0)) == 0, f"{kind}: reset() left data"
        assert len(buf.unfinished_index()) == 0, f"{kind}: reset() left unfinished episodes"
