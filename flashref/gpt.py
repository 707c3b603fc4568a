"""A compact GPT-2 whose attention is pluggable, and a copy task it can learn: the end-to-end test bed.

The model is GPT-2 (Radford et al. 2019) as most re-implementations write it: token and learned
position embeddings; ``n_layer`` pre-LayerNorm blocks, each ``x + attn(ln(x))`` then
``x + mlp(ln(x))``; a final LayerNorm; an output layer that shares its weight with the token
embedding. The MLP widens to ``4·n_embd`` with GELU (tanh form, as GPT-2). Weights start as
N(0, 0.02²), the two projections that write into the residual stream (attention output, MLP
output) at 0.02/√(2·n_layer) so the residual's variance does not grow with depth (GPT-2 §2.3).
No dropout: it would make backends differ by their random numbers, not their arithmetic.

Only the core of attention changes between backends, ``softmax(q kᵀ/√d + causal mask) v`` on
``(B, H, N, d)`` tensors (:data:`BACKENDS`):

* ``eager``: standard attention as plain PyTorch ops (the HuggingFace GPT-2 of FlashAttention's
  comparison): S = q kᵀ·scale, masked, softmax (fp32 under autocast), then P v; S and P live in HBM;
* ``sdpa_flash``, ``sdpa_cudnn``, ``sdpa_math``: ``F.scaled_dot_product_attention`` pinned to one
  PyTorch backend with ``torch.nn.attention.sdpa_kernel`` (FlashAttention-2 inside PyTorch, cuDNN's
  fused attention, PyTorch's own unfused math path);
* ``flashref``: flashref's Triton FlashAttention-2 (:func:`flashref.gpu.attention`); on a CPU it runs
  in Triton's interpreter (``TRITON_INTERPRET=1``), slowly, on tiny shapes;
* ``numpy``: flashref's numpy reference algorithms through the torch front
  (:func:`flashref.functional.scaled_dot_product_attention`): CPU only, tiny shapes.

Data (:func:`copy_batch`): each sequence is a block of ``period`` random tokens, repeated. The
first block cannot be predicted (loss ln V per token, V the data vocabulary); every later token
can be copied from ``period`` positions back once the model learns to look there (an induction
head: find the previous occurrence of the current token, predict what followed it). The loss
starts at ln(vocab_size) (uniform logits), falls to ln V when the model learns which tokens occur,
and towards :func:`loss_floor` ((period − 1)/N · ln V) as it learns to copy. So the curve's fall
measures learning, and every backend sees the same batches.

Example::

    from flashref.gpt import GPT, GPTConfig, copy_batch
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, vocab_size=128), attention="eager")
    x, y = copy_batch(4, 64, 16, torch.Generator().manual_seed(0), period=8)
    loss = model(x, y)           # scalar cross-entropy
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from .problem import _bool, positive_int

__all__ = ["GPTConfig", "GPT", "BACKENDS", "attend", "copy_batch", "loss_floor", "GPT2_SMALL"]

BACKENDS = ("eager", "sdpa_flash", "sdpa_cudnn", "sdpa_math", "flashref", "numpy")


@dataclass
class GPTConfig:
    """GPT-2 small by default (124M parameters at block_size 1024)."""

    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024  # longest sequence: rows of the position embedding
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 (tensor-core friendly)

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            # stored as a Python int: a numpy integer would make as_dict() unwritable as JSON (train's record)
            setattr(self, name, positive_int(getattr(self, name), name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def as_dict(self) -> dict:
        return asdict(self)


GPT2_SMALL = GPTConfig()


# --------------------------------------------------------------------------- attention backends

_CAUSAL_MASKS: dict = {}


def _eager(q, k, v):
    """Standard attention, one PyTorch op per line of Algorithm 0: S and P are written to HBM."""
    N = q.shape[-2]
    key = (N, q.device)
    if key not in _CAUSAL_MASKS:  # (N, N) bool, True = may attend (j <= i); kept like GPT-2's "bias" buffer
        _CAUSAL_MASKS.clear()
        _CAUSAL_MASKS[key] = torch.ones(N, N, dtype=torch.bool, device=q.device).tril()
    S = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, N, N)
    S = S.masked_fill(~_CAUSAL_MASKS[key], float("-inf"))
    P = torch.softmax(S, dim=-1)  # fp32 under autocast (softmax autocasts up)
    return P.to(v.dtype) @ v  # (B, H, N, d)


def _sdpa(which):
    def run(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if which == "cudnn" and q.device.type != "cuda":  # else PyTorch's "No viable backend ... was found"
            raise ValueError(f"attention 'sdpa_cudnn' is cuDNN's kernel and needs a CUDA GPU, got tensors on "
                             f"{q.device.type}; on a CPU use 'eager', 'sdpa_math', 'sdpa_flash' or 'numpy'")
        backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                   "math": SDPBackend.MATH}[which]
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return run


def _flashref(q, k, v):
    from . import gpu

    return gpu.attention(q, k, v, causal=True)


def _numpy(q, k, v):
    from .functional import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v, is_causal=True)


_ATTEND = {"eager": _eager, "sdpa_flash": _sdpa("flash"), "sdpa_cudnn": _sdpa("cudnn"),
           "sdpa_math": _sdpa("math"), "flashref": _flashref, "numpy": _numpy}


def _check_backend(backend) -> str:
    # isinstance first: an unhashable name (a list) would otherwise fail the dict lookup with "unhashable type"
    if not isinstance(backend, str) or backend not in _ATTEND:
        raise ValueError(f"attention: expected one of {BACKENDS}, got {backend!r}")
    return backend


def attend(q, k, v, backend: str):
    """Causal ``softmax(q kᵀ/√d) v`` for ``(B, H, N, d)`` tensors by the named backend."""
    return _ATTEND[_check_backend(backend)](q, k, v)


# --------------------------------------------------------------------------- profiler marks

class _Mark(torch.autograd.Function):
    """Identity forward; in the backward it opens (``"open"``) or closes (``"close"``) a profiler range.

    Placed on attention's output (its gradient arrives first: open) and on q, k, v (their gradients
    are the last thing attention's backward produces: close), so the range covers exactly the
    backward of the attention core, whatever ops the backend runs there."""

    @staticmethod
    def forward(ctx, state, what, *xs):
        ctx.state, ctx.what = state, what
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *grads):
        if ctx.what == "open":
            ctx.state["range"] = torch.profiler.record_function("attention_bwd")
            ctx.state["range"].__enter__()
        elif "range" in ctx.state:
            ctx.state.pop("range").__exit__(None, None, None)
        return (None, None) + grads


# --------------------------------------------------------------------------- the model

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, attention: str):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd={cfg.n_embd} must be a multiple of n_head={cfg.n_head}")
        self.n_head, self.attention = cfg.n_head, attention
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.profiling = False

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 × (B, N, C)
        q, k, v = (t.view(B, N, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, N, d)
        if not self.profiling:
            y = attend(q, k, v, self.attention)
        else:  # mark the attention core's forward and backward for the profiler (train.attention_share)
            state = {}
            q, k, v = _Mark.apply(state, "close", q, k, v)
            with torch.profiler.record_function("attention_fwd"):
                y = attend(q, k, v, self.attention)
            (y,) = _Mark.apply(state, "open", y)
        y = y.transpose(1, 2).reshape(B, N, C)  # (B, N, C): heads side by side again
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, attention: str):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg, attention)
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.fc_out = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 with attention core ``attention`` (one of :data:`BACKENDS`).

    ``model(idx)`` returns logits ``(B, N, vocab)``; ``model(idx, targets)`` the mean cross-entropy
    (computed in fp32)."""

    def __init__(self, cfg: GPTConfig = GPT2_SMALL, attention: str = "sdpa_flash"):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg: expected a GPTConfig, got {type(cfg).__name__} (GPTConfig(**d) builds one "
                            "from a dict)")
        _check_backend(attention)
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, attention) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.apply(self._init)
        for b in self.blocks:  # residual-stream writers: std 0.02 / sqrt(2 · n_layer)
            for w in (b.attn.proj.weight, b.fc_out.weight):
                nn.init.normal_(w, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def set_attention(self, attention: str):
        _check_backend(attention)
        for b in self.blocks:
            b.attn.attention = attention

    def set_profiling(self, on: bool):
        on = _bool(on, "on")  # numpy's bool too, as everywhere else
        for b in self.blocks:
            b.attn.profiling = on

    def num_params(self, matmul_only: bool = False) -> int:
        """All parameters; with ``matmul_only``, without the position embedding (a lookup: no FLOPs).

        The token embedding stays in: its weight is also the output layer's matmul."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if matmul_only else n

    def forward(self, idx, targets=None):
        self._check_ids(idx, "idx")
        if targets is not None:
            self._check_ids(targets, "targets")
            if targets.shape != idx.shape or idx.numel() == 0:  # the mean over no tokens: a NaN
                raise ValueError(f"targets: expected the shape of idx {tuple(idx.shape)} with at least one token, "
                                 f"got {tuple(targets.shape)}")
        B, N = idx.shape
        if N > self.cfg.block_size:
            raise ValueError(f"sequence length {N} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(N, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, N, C)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, N, vocab): weight tied to wte
        if targets is None:
            return logits
        # targets.long(): cross_entropy takes int64 class indices only (idx may be int32, so may targets)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1).long())

    def _check_ids(self, t, name):
        """A (B, N) tensor of int64/int32 token ids in 0..vocab_size-1 (the range checked on a CPU only)."""
        if not isinstance(t, torch.Tensor) or t.ndim != 2 or t.dtype not in (torch.int64, torch.int32):
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: expected a (B, N) torch tensor of int64 token ids, got {got}")
        # ids out of range: an IndexError deep in the embedding or the loss on a CPU, a device-side assert on a
        # GPU; and a target of -100 (cross_entropy's ignore_index) would be skipped silently, all of them a NaN
        # loss. Checked on the CPU only: on a GPU the check would cost a synchronisation on every step.
        if t.device.type == "cpu" and t.numel() and not 0 <= int(t.min()) <= int(t.max()) < self.cfg.vocab_size:
            raise ValueError(f"{name}: token ids must be in 0..{self.cfg.vocab_size - 1} (vocab_size), "
                             f"got {int(t.min())}..{int(t.max())}")


# --------------------------------------------------------------------------- data

def copy_batch(B: int, N: int, vocab: int, generator: torch.Generator, period: int | None = None):
    """``(inputs, targets)``, each ``(B, N)`` int64 on the generator's device: a block of ``period``
    random tokens (default N // 2) repeated until the sequence has N + 1 tokens.

    Inputs are the sequence's first N tokens, targets its last N. Targets 0..period-2 are random;
    every later target repeats the token ``period`` positions earlier."""
    B, N, vocab = positive_int(B, "B"), positive_int(N, "N"), positive_int(vocab, "vocab")
    h = _period(N, period)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator, got {type(generator).__name__}")
    r = torch.randint(0, vocab, (B, h), generator=generator, device=generator.device)
    seq = r.repeat(1, (N + h) // h)[:, : N + 1]  # (B, N + 1)
    return seq[:, :N].contiguous(), seq[:, 1:].contiguous()


def loss_floor(N: int, vocab: int, period: int | None = None) -> float:
    """Mean cross-entropy of a model that copies perfectly: the period - 1 random targets cost ln V each."""
    N, vocab = positive_int(N, "N"), positive_int(vocab, "vocab")
    h = _period(N, period)  # copy_batch's rule: the floor of a batch it cannot make means nothing
    return (h - 1) / N * math.log(vocab)


def _period(N: int, period: int | None) -> int:
    """The copy task's period for sequences of N tokens (None: N // 2): a sequence must hold two of them."""
    if N < 2:  # the default period N // 2 would be 0: N is what is wrong, not a period nobody passed
        raise ValueError(f"N: the copy task needs a sequence of at least 2 tokens (two periods), got {N}")
    h = N // 2 if period is None else positive_int(period, "period")
    if not 1 <= h <= N // 2:
        raise ValueError(f"period must be in 1..N//2 = {N // 2}, got {h}")
    return h
