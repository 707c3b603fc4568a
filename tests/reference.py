"""The oracle: plain float64 attention written independently of flashref, and torch autograd.

Tests of every algorithm compare against these, never against each other alone.
"""

from __future__ import annotations

import numpy as np
import torch

from flashref import dropout as _dropout


def attend_mask(Nq, Nk, causal=False, mask=None, lead=(), window=None):
    """Boolean (lead..., Nq, Nk), True = attend, combining causal (top-left), a window and a boolean mask."""
    m = np.ones(tuple(lead) + (Nq, Nk), dtype=bool)
    i, j = np.arange(Nq)[:, None], np.arange(Nk)[None, :]
    if causal:
        m &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            m &= j >= i - left
        if right >= 0:
            m &= j <= i + right
    if mask is not None:
        m &= np.broadcast_to(mask, m.shape)
    return m


def attention_ref(Q, K, V, *, scale=None, causal=False, mask=None, dropout_p=0.0, seed=0):
    """float64 ``dropout(softmax(masked(scale QKᵀ))) V``; fully masked rows give 0. Returns (O, P, lse).

    The plain case of :func:`variant_ref` (no GQA, window, softcap, ALiBi or bias)."""
    return variant_ref(Q, K, V, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p, seed=seed)


def torch_grads(Q, K, V, dO, *, scale=None, causal=False, mask=None):
    """dQ, dK, dV of float64 attention by torch autograd, with upstream gradient dO."""
    Nq, Nk = Q.shape[-2], K.shape[-2]
    q, k, v = (torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in (Q, K, V))
    allowed = torch.tensor(attend_mask(Nq, Nk, causal, mask, Q.shape[:-2]))
    scale = 1.0 / np.sqrt(Q.shape[-1]) if scale is None else scale
    S = scale * q @ k.transpose(-1, -2)
    S = S.masked_fill(~allowed, float("-inf"))
    # fully masked rows: softmax would give NaN; PyTorch's SDPA returns zeros (and zero gradients)
    row_any = allowed.any(dim=-1, keepdim=True)
    P = torch.softmax(S.masked_fill(~row_any, 0.0), dim=-1) * row_any
    O = P @ v
    O.backward(torch.tensor(np.asarray(dO, dtype=np.float64)))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _variant_inputs(Q, K, V, enable_gqa):
    if enable_gqa and K.shape[-3] != Q.shape[-3]:
        g = Q.shape[-3] // K.shape[-3]
        K, V = (np.repeat(x, g, axis=-3) if isinstance(x, np.ndarray) else x.repeat_interleave(g, dim=-3)
                for x in (K, V))
    return K, V


def variant_scores(S, lead, *, softcap=None, alibi_slopes=None, bias=None, xp=np):
    """scale → softcap → ALiBi → bias on the scaled scores S (numpy or torch), written plainly."""
    Nq, Nk = S.shape[-2:]
    if softcap is not None:
        S = softcap * xp.tanh(S / softcap)
    if alibi_slopes is not None:
        dist = np.abs(np.arange(Nq)[:, None] - np.arange(Nk)[None, :]).astype(np.float64)
        slopes = np.broadcast_to(np.asarray(alibi_slopes, dtype=np.float64), tuple(lead))[..., None, None]
        A = -slopes * dist
        S = S + (A if xp is np else torch.tensor(A))
    if bias is not None:
        B = np.broadcast_to(np.asarray(bias, dtype=np.float64), S.shape)
        S = S + (B if xp is np else torch.tensor(np.ascontiguousarray(B)))
    return S


def variant_ref(Q, K, V, *, scale=None, causal=False, mask=None, window=None, enable_gqa=False,
                softcap=None, alibi_slopes=None, bias=None, dropout_p=0.0, seed=0, **_):
    """float64 oracle of every variant: (O, P, lse), fully masked rows (or -inf biases) give 0."""
    Q, K, V = (np.asarray(x, dtype=np.float64) for x in (Q, K, V))
    K, V = _variant_inputs(Q, K, V, enable_gqa)
    Nq, Nk, d = Q.shape[-2], K.shape[-2], Q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    S = variant_scores(scale * np.einsum("...id,...jd->...ij", Q, K), Q.shape[:-2], softcap=softcap,
                       alibi_slopes=alibi_slopes, bias=bias)
    allowed = attend_mask(Nq, Nk, causal, mask, Q.shape[:-2], window) & np.isfinite(S)
    S = np.where(allowed, S, -np.inf)
    row_any = allowed.any(axis=-1, keepdims=True)
    m = np.where(row_any, S.max(axis=-1, keepdims=True), 0.0)
    E = np.where(allowed, np.exp(S - m), 0.0)
    l = E.sum(axis=-1, keepdims=True)
    P = np.where(row_any, E / np.where(l == 0, 1, l), 0.0)
    lse = np.where(row_any[..., 0], (m + np.log(np.where(l == 0, 1, l)))[..., 0], -np.inf)
    Pd = P
    if dropout_p > 0:
        Pd = P * _dropout.scale_mask(seed, dropout_p, Q.shape[:-2], (0, Nq), (0, Nk))
    return Pd @ V, P, lse


def variant_grads(Q, K, V, dO, *, scale=None, causal=False, mask=None, window=None, enable_gqa=False,
                  softcap=None, alibi_slopes=None, bias=None, dropout_p=0.0, seed=0, **_):
    """dQ, dK, dV of every variant by torch autograd in float64 (GQA: K, V repeated, grads summed by autograd)."""
    Nq, Nk = Q.shape[-2], K.shape[-2]
    q, k, v = (torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in (Q, K, V))
    k2, v2 = _variant_inputs(q, k, v, enable_gqa)
    scale = 1.0 / np.sqrt(Q.shape[-1]) if scale is None else scale
    S = variant_scores(scale * q @ k2.transpose(-1, -2), Q.shape[:-2], softcap=softcap,
                       alibi_slopes=alibi_slopes, bias=bias, xp=torch)
    allowed = torch.tensor(attend_mask(Nq, Nk, causal, mask, Q.shape[:-2], window)) & torch.isfinite(S)
    S = S.masked_fill(~allowed, float("-inf"))
    row_any = allowed.any(dim=-1, keepdim=True)
    P = torch.softmax(S.masked_fill(~row_any, 0.0), dim=-1) * row_any
    if dropout_p > 0:
        P = P * torch.tensor(_dropout.scale_mask(seed, dropout_p, Q.shape[:-2], (0, Nq), (0, Nk)))
    O = P @ v2
    O.backward(torch.tensor(np.asarray(dO, dtype=np.float64)))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def gpu_inputs(B, Hq, Hkv, Nq, Nk, d, dtype, device, seed=0):
    """Random q (B, Hq, Nq, d), k and v (B, Hkv, Nk, d) and the gradient do flowing back into the output, drawn in
    float32 on the CPU (the same numbers on every device) and then moved to ``device`` and ``dtype``: the GPU
    kernels' tests' inputs."""
    gen = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(B, Hq, Nq, d, generator=gen) for _ in range(2))
    k, v = (torch.randn(B, Hkv, Nk, d, generator=gen) for _ in range(2))
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, do)]
