"""Natural-gradient machinery shared by NPG and TRPO: flat parameter vectors, Fisher-vector
products through the Hessian of the KL divergence, and conjugate gradient.

The Fisher matrix ``F`` of the policy is never formed: ``F v`` is the gradient of
``(grad KL(pi_old || pi_theta)) . v`` at ``theta = theta_old`` (Pearlmutter's trick), so one
product costs two backward passes. Conjugate gradient then solves ``F x = g`` in a few such
products, giving the natural gradient direction ``x = F^-1 g``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = [
    "conjugate_gradient",
    "fisher_vector_product",
    "flat_grad",
    "get_flat_params",
    "set_flat_params",
]


def get_flat_params(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """All parameters as one detached vector."""
    return torch.cat([p.detach().reshape(-1) for p in params])


def set_flat_params(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy a vector made by :func:`get_flat_params` back into the parameters."""
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def flat_grad(
    output: torch.Tensor,
    params: Sequence[torch.Tensor],
    retain_graph: bool = False,
    create_graph: bool = False,
) -> torch.Tensor:
    """Gradient of a scalar ``output`` w.r.t. ``params`` as one vector (zeros where unused)."""
    grads = torch.autograd.grad(
        output, list(params), retain_graph=retain_graph or create_graph, create_graph=create_graph,
        allow_unused=True,
    )
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)]
    )


def fisher_vector_product(
    kl: torch.Tensor, params: Sequence[torch.Tensor], damping: float = 0.1
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> (F + damping * I) v`` for the mean KL ``kl`` (a scalar built from the current
    parameters, zero-valued at them). The damping keeps CG stable where ``F`` is near-singular."""
    grad_kl = flat_grad(kl, params, create_graph=True)

    def product(v: torch.Tensor) -> torch.Tensor:
        hv = flat_grad((grad_kl * v).sum(), params, retain_graph=True)
        return hv + damping * v

    return product


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    iters: int = 10,
    tol: float = 1e-10,
) -> torch.Tensor:
    """Approximately solve ``A x = b`` for a symmetric positive-definite ``A`` given as
    ``matvec`` (at most ``iters`` products; stops when the residual's squared norm < ``tol``)."""
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = r.dot(r)
    for _ in range(iters):
        if rr < tol:
            break
        ap = matvec(p)
        alpha = rr / p.dot(ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = r.dot(r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x
