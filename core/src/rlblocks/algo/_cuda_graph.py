"""One off-policy gradient step captured as a CUDA graph and replayed.

A small actor-critic's gradient step is a few hundred tiny kernels, and on a GPU launching them
one by one from Python takes longer than running them. :class:`StepGraph` records one whole step
once (the bootstrap value and TD target, the algorithm's ``learn`` with its optimizer and target
network steps) and then launches all of it with one call per step. The host still computes its
share of the n-step target (the partial return along each sampled episode, the discount and the
bootstrap row), as the eager step does, and the graph adds the bootstrap value. A step whose
shape the host decides (TD3's delayed actor step, every ``policy_delay``-th step) is captured
once per shape, keyed by the policy's :meth:`~rlblocks.algo.OffPolicyPolicy.graph_phase`,
and each step replays the graph of its phase. The sample still comes from the buffer on the
host: its fields are packed into one pinned array and copied to the device asynchronously, so
the host samples the next batch while the device works on this one.

:meth:`rlblocks.algo.OffPolicyPolicy.update` uses it when the algorithm's config has
``cuda_graph = True``, the policy is on a CUDA device and :func:`graph_refusal` finds nothing
that a replay would get wrong; otherwise it takes the eager step, so one config runs on a CPU
and a GPU alike.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo._target import TargetNetwork
from rlblocks.contracts import Batch

__all__ = ["StepGraph", "graph_refusal"]

#: fields a captured step reads, in their packed order: the sample's observations and actions,
#: the host's share of the n-step target (``OffPolicyPolicy.target_parts``: partial return,
#: discount, the bootstrap rows' next observations) and ``weight`` (prioritized samplers only)
_FIELDS = ("obs", "act", "partial", "discount", "obs_next", "weight")


def graph_refusal(policy: Any, buffer: Any) -> str | None:
    """Why a captured step would not be the eager step for this policy and buffer (None: it
    would). Reasons: not CUDA, trajectory views, hindsight relabelling, a learning-rate schedule
    or skipping non-finite steps (both act on the host at every step), optimizers other than
    fused Adam, observations or actions that are not float Boxes."""
    if policy.device.type != "cuda":
        return f"the policy is on {policy.device}, not a CUDA device"
    if getattr(policy, "curiosity", None) is not None:
        return "an intrinsic reward (algo.intrinsic) is computed on the host at each step"
    if policy.view_requirements:
        return "the policy reads trajectory views"
    if policy.buffer_abilities(buffer).relabelling:
        return "the buffer relabels its samples"
    for name, step in policy.optim_steps.items():
        if step.lr_schedule is not None:
            return f"optimizer {name!r} follows a learning-rate schedule"
        if step._watch is not None and step._watch.skip:
            return "trainer.on_nonfinite=skip_update decides on the host whether each step applies"
        if not step._fused_ok:
            return f"optimizer {name!r} is not a fused Adam/AdamW (their step is captured)"
    spaces = ((policy.observation_space, "observations"), (policy.action_space, "actions"))
    for space, what in spaces:
        if not isinstance(space, gym.spaces.Box) or space.dtype.kind != "f":
            return f"{what} are not a float Box"
    return None


class _Recorder:
    """Stands in for a :class:`~rlblocks.algo.FiniteWatch` while the step is captured: keeps
    each optimizer step's loss and gradient norm (graph outputs), which every replay hands to
    the real watch, so a non-finite loss is still reported with its optimizer and step."""

    skip = False

    def __init__(self) -> None:
        self.items: list[tuple[Any, torch.Tensor | None, torch.Tensor | None]] = []

    def record(self, step: Any, loss: torch.Tensor | None, norm: torch.Tensor | None) -> bool:
        self.items.append((step, loss, norm))
        return True


class _Captured:
    """One captured phase of the step: the graph, where its outputs are, and the host counters
    one replay advances."""

    def __init__(self, graph: torch.cuda.CUDAGraph) -> None:
        self.graph = graph
        self.out_keys: list[str] = []
        self.out: torch.Tensor | None = None
        self.host_stats: dict[str, Any] = {}
        self.td: torch.Tensor | None = None
        self.counters: list[tuple[Any, str, int]] = []
        #: each watched optimizer step's (step, position of its loss, of its gradient norm)
        self.watched: list[tuple[Any, int, int]] = []


class StepGraph:
    """One gradient step of ``policy`` on batches of ``batch_size`` rows, captured on first use.

    Call :meth:`step` with each sampled batch. The first ``warmup`` calls, and any further
    calls until every optimizer has taken an eager step (a delayed actor's first step comes
    after ``policy_delay`` calls), run the eager step on a side stream (lazy initialisation:
    optimizer state, the fused-Adam plan, library workspaces). After that each call replays
    the graph of its phase (``policy.graph_phase()``), capturing it at the phase's first call:
    a phase not seen while warming up runs eagerly once first. Counters the eager step advances
    on the host (gradient steps, optimizer steps, target updates) advance by the same amounts.
    """

    #: eager calls after ``warmup`` to wait for every optimizer's first step before giving up
    max_wait = 1000

    def __init__(self, policy: Any, batch_size: int, warmup: int = 3) -> None:
        self.policy = policy
        self.batch_size = batch_size
        self.warmup = warmup
        self.device = torch.device(policy.device)
        self.calls = 0
        self._graphs: dict[Hashable, _Captured] = {}
        self._seen: set[Hashable] = set()  # phases that ran eagerly on the side stream
        self._layout: list[tuple[str, int, int, tuple[int, ...]]] = []
        self._static: torch.Tensor | None = None
        self._pinned: list[torch.Tensor] = []
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._slot = 0
        self._recorder = _Recorder()
        self._plans: list[tuple[Any, Any]] = []
        #: why capturing failed (a network that syncs with the host or reads a CPU tensor
        #: inside its forward cannot be captured); the owner then steps eagerly
        self.failure: str | None = None

    @property
    def captured(self) -> int:
        """How many phases of the step are captured (0 while warming up)."""
        return len(self._graphs)

    # -- packing ------------------------------------------------------------------------------
    def _make_layout(self, batch: Batch) -> None:
        start = 0
        for name in _FIELDS:
            if name not in batch:
                continue
            arr = np.asarray(batch[name])
            shape = tuple(arr.shape[1:])
            width = int(np.prod(shape)) if shape else 1
            self._layout.append((name, start, start + width, shape))
            start += width
        rows = self.batch_size
        self._static = torch.zeros((rows, start), dtype=torch.float32, device=self.device)
        self._pinned = [
            torch.empty((rows, start), dtype=torch.float32, pin_memory=True) for _ in range(2)
        ]

    def fits(self, batch: Batch) -> bool:
        """Whether ``batch`` has the rows and fields the graph was captured with."""
        if len(np.asarray(batch.partial)) != self.batch_size:
            return False
        if not self._layout:
            return True
        names = [name for name, *_ in self._layout]
        return all(n in batch for n in names) and ("weight" in batch) == ("weight" in names)

    def _load(self, batch: Batch) -> None:
        """Pack ``batch`` into a pinned host array and start its copy to the static input."""
        slot = self._slot
        event = self._events[slot]
        if event is not None:  # that array's last copy must be done before it is overwritten
            event.synchronize()
        host = self._pinned[slot].numpy()
        rows = self.batch_size
        for name, lo, hi, _shape in self._layout:
            host[:, lo:hi] = np.asarray(batch[name], dtype=np.float32).reshape(rows, hi - lo)
        assert self._static is not None
        self._static.copy_(self._pinned[slot], non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self._events[slot] = done
        self._slot = 1 - slot

    def _views(self) -> dict[str, torch.Tensor]:
        assert self._static is not None
        rows = self.batch_size
        out = {}
        for name, lo, hi, shape in self._layout:
            col = self._static[:, lo:hi]
            out[name] = col.reshape(rows, *shape) if shape else col[:, 0]
        return out

    # -- the captured step ----------------------------------------------------------------------
    def _captured_step(self, out: _Captured) -> None:
        policy = self.policy
        v = self._views()
        with torch.no_grad():
            value = policy.target_value(v["obs_next"])
        returns = v["partial"] + v["discount"] * value
        batch = Batch(obs=v["obs"], act=v["act"], returns=returns)
        if "weight" in v:
            batch.weight = v["weight"]
        stats = policy.learn(batch)
        tensors = {k: s for k, s in stats.items() if isinstance(s, torch.Tensor)}
        out.host_stats = {k: s for k, s in stats.items() if k not in tensors}
        out.out_keys = list(tensors)
        outs = [t.detach().float().reshape(()) for t in tensors.values()]
        # the finite watch's values: their positions in the packed output (-1: none)
        out.watched = []
        for step, loss, norm in self._recorder.items:
            at = []
            for value in (loss, norm):
                if value is None:
                    at.append(-1)
                else:
                    at.append(len(outs))
                    outs.append(value.detach().float().reshape(()))
            out.watched.append((step, at[0], at[1]))
        out.out = torch.stack(outs) if outs else None
        td = batch.get("td_error", None)
        out.td = td.detach() if isinstance(td, torch.Tensor) else None

    def _side_stream(self) -> torch.cuda.Stream:
        """The policy's one side stream for warm-up and capture: the gradient accumulators that
        autograd keeps per parameter remember the stream they were made on, and a capture on
        another stream than the warm-up's would make them synchronise."""
        stream = getattr(self.policy, "_graph_stream", None)
        if stream is None:
            stream = torch.cuda.Stream(self.device)
            self.policy._graph_stream = stream
        return stream

    def _counter_owners(self) -> list[tuple[Any, str]]:
        policy = self.policy
        owners: list[tuple[Any, str]] = [(policy, "gradient_steps")]
        owners += [(step, "steps") for step in policy.optim_steps.values()]
        owners += [(m, "updates") for m in policy.modules() if isinstance(m, TargetNetwork)]
        return owners

    def ready(self) -> bool:
        """Whether every optimizer has its direct fused-Adam plan (built at its first eager
        step); ``optim.step()`` itself cannot be captured, so without one the owner stays eager."""
        return all(step._fused is not None for step in self.policy.optim_steps.values())

    def _capture(self, phase: Hashable) -> _Captured:
        owners = self._counter_owners()
        before = [int(getattr(o, a)) for o, a in owners]
        steps = list(self.policy.optim_steps.values())
        watches = [step._watch for step in steps]
        self._recorder = _Recorder()
        graph = torch.cuda.CUDAGraph()
        out = _Captured(graph)
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream(self.device))
        try:
            for step in steps:
                step._watch = self._recorder
            with torch.cuda.graph(graph, stream=side):  # captures on (and switches to) ``side``
                self._captured_step(out)
        except BaseException:
            # nothing ran: the host counters the capture advanced go back before the eager step
            for (owner, attr), old in zip(owners, before, strict=True):
                setattr(owner, attr, old)
            raise
        finally:
            for step, watch in zip(steps, watches, strict=True):
                step._watch = watch
        torch.cuda.current_stream(self.device).wait_stream(side)
        # the capture ran no arithmetic: put the host counters back, remember their steps
        for (owner, attr), old in zip(owners, before, strict=True):
            out.counters.append((owner, attr, int(getattr(owner, attr)) - old))
            setattr(owner, attr, old)
        if not self._plans:
            self._plans = [(step, step._fused) for step in steps]
        self._graphs[phase] = out
        return out

    def valid(self) -> bool:
        """False once an optimizer's state was replaced (a checkpoint loaded): the graphs would
        go on updating the old tensors, so the owner drops them and captures anew."""
        if not self._graphs:
            return True
        return all(
            plan is step._fused and plan is not None and not plan.stale()
            for step, plan in self._plans
        )

    def gave_up(self) -> bool:
        """Whether warming up has outlasted :attr:`max_wait` with an optimizer still unplanned
        (one that never steps, or not through a fused Adam): the step stays eager."""
        return self.calls >= self.warmup + self.max_wait and not self._graphs and not self.ready()

    def _eager(self, eager: Any) -> dict[str, Any]:
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            stats = eager()
        torch.cuda.current_stream(self.device).wait_stream(side)
        return stats

    def step(self, batch: Batch, eager: Any) -> tuple[dict[str, Any], torch.Tensor | None, bool]:
        """One gradient step on ``batch``: ``eager()`` (the policy's whole eager step, which
        hands priorities on itself) while warming up, then its phase's graph. Returns the
        step's statistics, its TD errors (``[B]``; None from an eager step) and whether a graph
        ran."""
        self.calls += 1
        if not self._layout:
            self._make_layout(batch)
        phase = self.policy.graph_phase()
        warming = self.calls <= self.warmup or (not self._graphs and not self.ready())
        if warming or (phase not in self._graphs and phase not in self._seen):
            self._seen.add(phase)
            return self._eager(eager), None, False
        captured = self._graphs.get(phase)
        if captured is None:
            try:
                captured = self._capture(phase)
            except Exception as exc:  # e.g. a user's network that cannot be captured
                first = (str(exc).strip().splitlines() or [""])[0]
                self.failure = f"capturing the step failed ({type(exc).__name__}: {first})"
                return self._eager(eager), None, False
        self._load(batch)
        captured.graph.replay()
        stats = dict(captured.host_stats)
        if captured.out is not None:
            values = captured.out.clone()  # the next replay overwrites the graph's outputs
            stats.update({k: values[i] for i, k in enumerate(captured.out_keys)})
            for step, loss_at, norm_at in captured.watched:  # before the step counts advance
                if step._watch is not None:
                    step._watch.record(
                        step,
                        None if loss_at < 0 else values[loss_at],
                        None if norm_at < 0 else values[norm_at],
                    )
        for owner, attr, delta in captured.counters:
            setattr(owner, attr, getattr(owner, attr) + delta)
        td = None if captured.td is None else captured.td.clone()
        return stats, td, True
