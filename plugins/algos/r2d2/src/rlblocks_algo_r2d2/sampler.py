"""Prioritized replay over sequences (R2D2, section 2 and 3): a buffer sampler
(``sampler="prioritized-sequence"``) that draws fixed-length windows of consecutive steps
with probability proportional to each window's priority**alpha.

**Windows.** Every valid slot ``s`` keys one window: ``s`` and the ``burn_in + length - 1``
steps after it along the buffer's ``next`` links, the last stored step of the episode repeating
once the episode (or what is stored of it) ends. A window is read as ``[B, burn_in + length]``
slots; every batch read with such an index carries

* ``mask [B, W]``: True up to the window's last real step;
* ``learn_mask [B, W]``: the steps to learn on: the real steps after the first ``burn_in``
  (the burn-in only warms the recurrent state up from the stored one), and every real step of a
  window that starts at its episode's first stored step, whose stored state needs no warming
  up (it is the zero state the collector starts episodes with), so the first steps of every
  episode are learned too;
* ``weight [B]``: the window's normalised importance weight.

Keying windows by their first slot makes the window a function of its key and back
(``index[:, 0]``), so ``update_priority(index, priority)`` needs nothing remembered from the
draw. (The core ``sequence`` sampler instead draws the first *learned* step and walks back
``burn_in`` steps.)

**Priorities.** ``P(s) = p_s**alpha / sum_k p_k**alpha`` over the keys. A window enters once
it is complete (its last step is stored, or its episode ended; R2D2 stores whole
fixed-length sequences), with the largest priority reported so far, so every
window is replayed about once before its priority is known. A window with no step to learn on
(all of its real steps are burn-in) never enters: it would only waste a row of the batch, and
its zero priority would shrink every other window's importance weight. Until any window is
complete (the first updates of a run) keys are drawn uniformly. The learner reports one priority per
window, R2D2's mixture ``eta * max_t |td_t| + (1 - eta) * mean_t |td_t|`` over the window's
learned steps (:func:`window_priority`); it is set (plus ``eps``) on the window's key slot.
Importance weights ``w_s = (N P(s))**-beta / max_k (N P(k))**-beta = (p_s**alpha / min_k
p_k**alpha)**-beta``, with ``beta`` fixed or annealed linearly over env steps.

**Cost.** Sampling is a cumulative sum over the priorities of every slot and a binary search
per draw (stratified: one draw from each of ``B`` equal slices), and the importance weights
take the smallest priority: O(N) numpy work per batch, a few tenths of a millisecond for
N = 100 000, small beside a recurrent update on windows. A sum tree (as in
``rlblocks-buffer-prioritized``) would make it O(B log N) for much larger buffers. Each write
walks back ``burn_in + length - 1`` links per env to find the windows it completes.

The priorities travel in buffer files and checkpoints (``state``/``load``), so a resumed run
draws exactly the windows an uninterrupted one does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlblocks.replay import SequenceSampler

if TYPE_CHECKING:
    from rlblocks.replay import ReplayBuffer

__all__ = ["PrioritizedSequenceSampler", "window_priority"]


def window_priority(abs_td: Any, learn_mask: Any, eta: float = 0.9) -> Any:
    """R2D2's priority of each window: ``eta * max |td| + (1 - eta) * mean |td|`` over the
    steps ``learn_mask [B, W]`` marks (0 for a window with none). Works on numpy arrays and
    torch tensors alike; ``abs_td [B, W]`` must already be absolute values."""
    masked = abs_td * learn_mask
    count = learn_mask.sum(1)
    if isinstance(masked, np.ndarray):
        mean = masked.sum(1) / np.maximum(count, 1)
        peak = masked.max(axis=1)
    else:
        mean = masked.sum(1) / count.clamp(min=1)
        peak = masked.amax(dim=1)
    return eta * peak + (1.0 - eta) * mean


class PrioritizedSequenceSampler(SequenceSampler):
    """Windows of ``burn_in + length`` steps drawn with probability proportional to the
    window's priority**alpha (see the module docstring).

    Args:
        length: learned steps per window (after the burn-in).
        burn_in: steps at the start of each window that only warm the recurrent state up.
        alpha: prioritisation exponent (0 = uniform over windows).
        beta: importance-sampling exponent at the start (0 = no correction, 1 = full).
        beta_final: value ``beta`` reaches after ``beta_anneal_steps`` env steps.
        beta_anneal_steps: env steps of the linear annealing (0 keeps ``beta`` fixed).
        eps: added to every reported priority so that no window gets priority 0.
    """

    name = "prioritized-sequence"

    def __init__(
        self,
        length: int = 16,
        burn_in: int = 0,
        alpha: float = 0.9,
        beta: float = 0.6,
        beta_final: float = 0.6,
        beta_anneal_steps: int = 0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(length=length, start="any", burn_in=burn_in)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if beta < 0 or beta_final < 0:
            raise ValueError(f"beta and beta_final must be >= 0, got {beta} and {beta_final}")
        if beta_anneal_steps < 0:
            raise ValueError(f"beta_anneal_steps must be >= 0, got {beta_anneal_steps}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 so that every window can be sampled, got {eps}")
        self.alpha = float(alpha)
        self.beta_start = float(beta)
        self.beta_final = float(beta_final)
        self.beta_anneal_steps = int(beta_anneal_steps)
        self.eps = float(eps)
        self.beta = self.beta_start
        self.env_step = 0
        #: priority**alpha of the window each slot keys (0: no valid slot there)
        self.powered: np.ndarray = np.zeros(0, dtype=np.float64)
        self.max_priority = 1.0  # the largest priority reported so far: new windows get it
        self._cumsum: np.ndarray | None = None  # of ``powered``, until it changes

    @property
    def window(self) -> int:
        """Slots per window: ``burn_in + length``."""
        return self.burn_in + self.length

    def options(self) -> dict[str, Any]:
        return {"length": self.length, "burn_in": self.burn_in, "alpha": self.alpha,
                "beta": self.beta_start, "beta_final": self.beta_final,
                "beta_anneal_steps": self.beta_anneal_steps, "eps": self.eps}  # fmt: skip

    def bind(self, buffer: ReplayBuffer) -> None:
        super().bind(buffer)
        self.powered = np.zeros(int(buffer.maxsize), dtype=np.float64)
        self._cumsum = None

    # --- progress -------------------------------------------------------------------------------
    def set_env_step(self, env_step: int) -> None:
        """Told the env steps collected so far; anneals ``beta`` linearly to ``beta_final``
        over ``beta_anneal_steps``."""
        self.env_step = int(env_step)
        if self.beta_anneal_steps == 0:
            return
        frac = min(1.0, self.env_step / self.beta_anneal_steps)
        self.beta = self.beta_start + frac * (self.beta_final - self.beta_start)

    # --- the buffer's notices -------------------------------------------------------------------
    def on_write(self, slots: np.ndarray) -> None:
        """A window enters once it is complete: when its last step is written (``burn_in +
        length - 1`` steps after its key), or when its episode ends. It enters with the
        largest priority so far, unless it has no step to learn on (it starts within
        ``burn_in`` steps of its episode's end, after the episode's first step): such a window
        is never drawn. Windows keyed by the slots just written wait with priority 0."""
        if not len(slots):
            return
        slots = np.asarray(slots, dtype=np.int64)
        buf = self.buffer
        assert buf is not None
        new = self.max_priority**self.alpha
        powered = self.powered
        self._cumsum = None
        powered[slots] = 0.0
        done = np.asarray(buf.get(slots, "done"), dtype=bool).reshape(len(slots))
        # walk back along each episode: the key window - 1 steps back completes now, and so
        # does every key on the way when this step ended the episode
        last = self.window - 1
        cur, alive = slots, np.ones(len(slots), dtype=bool)
        for back in range(self.window):
            prev = np.asarray(buf.prev(cur), dtype=np.int64)
            first = prev == cur
            complete = alive & done if back < last else alive
            enter = complete & (first | (back >= self.burn_in))
            if enter.any():
                powered[cur[enter]] = new
            alive &= ~first
            if back == last or not alive.any():
                return
            cur = prev

    def on_reset(self) -> None:
        self.powered[:] = 0.0
        self.max_priority = 1.0
        self._cumsum = None

    def update_priority(self, index: Any, priority: Any) -> None:
        """Give windows new priorities: ``index`` is the sampled ``[B, W]`` window index (or
        the ``[B]`` key slots), ``priority [B]`` one value per window (R2D2's
        :func:`window_priority`; a tensor is moved to the CPU; its absolute value is used).
        Windows that have not entered the draw (see :meth:`on_write`) keep priority 0."""
        if hasattr(priority, "detach"):
            priority = priority.detach().cpu().numpy()
        prio = np.abs(np.asarray(priority, dtype=np.float64)).reshape(-1)
        keys = np.asarray(index, dtype=np.int64)
        keys = keys[:, 0] if keys.ndim == 2 else keys.reshape(-1)
        if prio.shape != keys.shape:
            raise ValueError(
                f"update_priority got {prio.size} priorities for {len(keys)} windows; pass one "
                "per sampled window (reduce per-step errors with window_priority)"
            )
        if not np.all(np.isfinite(prio)):
            raise ValueError("update_priority got a priority that is not finite")
        prio += self.eps
        # only windows that entered take priorities (not those still waiting for their
        # steps, drawn while no window was complete, nor those with nothing to learn)
        entered = self.powered[keys] > 0
        keys, prio = keys[entered], prio[entered]
        self.max_priority = max(self.max_priority, float(prio.max(initial=0.0)))
        self.powered[keys] = prio**self.alpha
        self._cumsum = None

    # --- sampling -------------------------------------------------------------------------------
    def probabilities(self) -> np.ndarray:
        """The probability of drawing each slot's window (``[maxsize]``, summing to 1)."""
        total = self.powered.sum()
        return self.powered / total if total > 0 else self.powered.copy()

    def sample_keys(self, batch_size: int) -> np.ndarray:
        """``batch_size`` key slots drawn proportionally to priority**alpha, stratified: one
        draw from each of ``batch_size`` equal slices of the total."""
        buf = self.buffer
        assert buf is not None
        if self._cumsum is None:
            self._cumsum = np.cumsum(self.powered)
        cumsum = self._cumsum
        total = float(cumsum[-1]) if len(cumsum) else 0.0
        if total <= 0.0:  # no complete window yet (the first updates): uniform keys
            return buf.layout.uniform(buf.rng, batch_size)
        targets = (np.arange(batch_size) + buf.rng.random(batch_size)) * (total / batch_size)
        keys = np.searchsorted(cumsum, targets, side="right")
        # rounding may put a draw at the very end: take the last slot with a priority
        last = int(np.flatnonzero(self.powered)[-1]) if keys.max() >= len(cumsum) else -1
        if last >= 0:
            np.minimum(keys, last, out=keys)
        return keys.astype(np.int64, copy=False)

    def windows(self, keys: np.ndarray) -> np.ndarray:
        """``[B, burn_in + length]`` slots: each key and the steps after it along ``next``
        (the last stored step of the episode repeating)."""
        buf = self.buffer
        assert buf is not None
        out = np.empty((len(keys), self.window), dtype=np.int64)
        cur = np.asarray(keys, dtype=np.int64)
        out[:, 0] = cur
        for t in range(1, self.window):
            cur = np.asarray(buf.next(cur), dtype=np.int64)
            out[:, t] = cur
        return out

    def sample_index(self, batch_size: int) -> np.ndarray:
        return self.windows(self.sample_keys(batch_size))

    def weight(self, keys: Any) -> np.ndarray:
        """Normalised importance weights ``(p_s**alpha / min_k p_k**alpha)**-beta`` of the
        windows keyed by ``keys`` (float32, at most 1)."""
        powered = self.powered
        positive = powered[powered > 0]
        if not len(positive):
            return np.ones(np.shape(keys), dtype=np.float32)
        p = powered[np.asarray(keys, dtype=np.int64)]
        with np.errstate(divide="ignore"):
            w = np.power(p / positive.min(), -self.beta)
        return np.minimum(w, 1.0).astype(np.float32)

    def columns(self, index: Any) -> dict[str, np.ndarray]:
        """For window indices ``[B, W]``: ``mask``, ``learn_mask`` and ``weight`` (see the
        module docstring); nothing for other reads."""
        idx = np.asarray(index)
        if idx.ndim != 2:
            return {}
        buf = self.buffer
        assert buf is not None
        mask = np.ones(idx.shape, dtype=bool)
        mask[:, 1:] = idx[:, 1:] != idx[:, :-1]
        mask = np.logical_and.accumulate(mask, axis=1)
        learn = mask.copy()
        if self.burn_in:
            first = np.asarray(buf.prev(idx[:, 0])) == idx[:, 0]
            learn[~first, : self.burn_in] = False
        return {"mask": mask, "learn_mask": learn, "weight": self.weight(idx[:, 0])}

    # --- files ----------------------------------------------------------------------------------
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return ({"max_priority": self.max_priority, "env_step": self.env_step},
                {"priority": self.powered})  # fmt: skip

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        super().load(state, arrays)
        powered = np.asarray(arrays["priority"], dtype=np.float64)
        if powered.shape != self.powered.shape:
            raise ValueError(
                f"saved priorities have shape {powered.shape}, expected {self.powered.shape}"
            )
        self.powered[:] = powered
        self._cumsum = None
        self.max_priority = float(state["max_priority"])
        self.set_env_step(int(state["env_step"]))
