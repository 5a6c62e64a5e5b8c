# SPDX-License-Identifier: Apache-2.0
"""The math of every kernel the planner's programs name (`kareus partitions --program`).

A kernel works on a *piece* of the microbatch: one nanobatch, or the whole microbatch in
sequential execution. A piece carries its tensors by name (activations going forward, gradients
going backward). Forward kernels save what their backward needs per (layer, kernel) and row
range, so a backward can run on other pieces than its forward did (a nanobatched forward and a
sequential backward, say): the saved rows are sliced or joined as the backward asks.

Kernel names and the tensors they read and write:

    forward                           backward (a layer runs last to first)
    input_layernorm   x -> a1         mlp_bda.bwd           dx -> dm, dh
    linear_qkv        a1 -> qkv       linear_fc2.dgrad      dm -> dg
    qkv_post          qkv -> q, k, v  linear_fc2.wgrad      (dm) -> grad fc2
    rotary            q, k -> q, k    activation.bwd        dg -> du
    core_attention    q, k, v -> o    linear_fc1.dgrad      du -> da2   (all-reduced)
    linear_proj       o -> p          linear_fc1.wgrad      (du) -> grad fc1
    self_attn_bda     x, p -> h       pre_mlp_layernorm.bwd da2 -> dhn
    pre_mlp_layernorm h -> a2         mlp_residual_fork.bwd dh + dhn -> dh
    linear_fc1        a2 -> u         self_attn_bda.bwd     dh -> dp, dx
    activation        u -> g          linear_proj.dgrad     dp -> do
    linear_fc2        g -> m          linear_proj.wgrad     (dp) -> grad proj
    mlp_bda           h, m -> x       core_attention.bwd    do -> dq, dk, dv
                                      rotary.bwd            dq, dk -> dq, dk
                                      qkv_post.bwd          dq, dk, dv -> dqkv
                                      linear_qkv.dgrad      dqkv -> da1  (all-reduced)
                                      linear_qkv.wgrad      (dqkv) -> grad qkv
                                      input_layernorm.bwd   da1 -> dxn
                                      attn_residual_fork.bwd dx + dxn -> dx

`p` and `m` are partial sums until their all-reduce (row-parallel outputs), `da2` and `da1`
likewise (column-parallel input gradients). With context parallelism `k`, `v` are this rank's
tokens and `kv_full` the all-gathered sequence; the backward re-gathers them and reduce-scatters
`dkv_full`. Outside the block: embedding (tokens -> x, all-reduced across TP), final_layernorm
(x -> y), output_layer (y -> logits), loss (the vocabulary-parallel cross entropy; its
all-reduces finish it), and their backwards.
"""
import math
import zlib
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import errors
from .model import EMBEDDING, FINAL_NORM, OUTPUT, ModelShape, layer_key

_SDPA = getattr(F, "scaled_dot_product_attention", None)  # PyTorch >= 2.0


class Piece:
    """A nanobatch (index 0 or 1), or the whole microbatch (index None), in flight."""
    __slots__ = ("index", "rows", "t")

    def __init__(self, index: Optional[int], rows: slice):
        self.index, self.rows, self.t = index, rows, {}

    @property
    def size(self) -> int:
        return self.rows.stop - self.rows.start


class Saved:
    """What forward kernels keep for their backward, per (layer, kernel), by row range."""

    def __init__(self):
        self._entries: Dict[Tuple[int, str], list] = {}

    def copy(self) -> "Saved":
        """Another store with the same entries (the tensors shared): what a replay starts from."""
        other = Saved()
        other._entries = {k: list(v) for k, v in self._entries.items()}
        return other

    def put(self, layer: int, key: str, rows: slice, tensors: Tuple[torch.Tensor, ...],
            extra=None) -> None:
        self._entries.setdefault((layer, key), []).append((rows.start, rows.stop, tensors, extra))

    def extra(self, layer: int, key: str, rows: slice):
        """The extra object saved for exactly these rows (e.g. an autograd graph), or None."""
        for start, stop, _, extra in self._entries.get((layer, key), ()):
            if (start, stop) == (rows.start, rows.stop):
                return extra
        return None

    def get(self, layer: int, key: str, rows: slice) -> Tuple[torch.Tensor, ...]:
        """The saved tensors for `rows`: the entry itself, a slice of a larger one, or the
        concatenation of the entries that tile them (batch is dimension 0)."""
        entries = self._entries.get((layer, key))
        if not entries:
            raise RuntimeError(f"nothing saved for layer {layer} {key}: the backward runs a "
                               f"kernel whose forward did not run on this microbatch")
        for start, stop, tensors, _ in entries:
            if start <= rows.start and rows.stop <= stop:
                if (start, stop) == (rows.start, rows.stop):
                    return tensors
                return tuple(t[rows.start - start:rows.stop - start] for t in tensors)
        parts = sorted((e for e in entries if rows.start <= e[0] and e[1] <= rows.stop),
                       key=lambda e: e[0])
        position = rows.start
        for start, stop, _, _ in parts:
            if start != position:
                break
            position = stop
        if position != rows.stop or not parts:
            raise RuntimeError(f"the saved rows of layer {layer} {key} do not cover "
                               f"{rows.start}:{rows.stop}")
        return tuple(torch.cat([p[2][i] for p in parts]) for i in range(len(parts[0][2])))


class KernelContext:
    """What the kernels of one stage share: the shape, the weights, RoPE tables and attention
    mask of this rank's tokens, the microbatch's saved tensors and the gradients being summed.
    """

    def __init__(self, shape: ModelShape, weights: Mapping[str, torch.Tensor], first_layer: int,
                 tp_rank: int, positions: torch.Tensor, gathered_positions: torch.Tensor,
                 rope: Tuple[torch.Tensor, torch.Tensor]):
        self.shape = shape
        self.weights = weights
        self.first_layer = first_layer
        self.tp_rank = tp_rank
        self.cos, self.sin = rope
        self.causal = shape.cp == 1
        # allowed[i, j]: query i (a local token) may attend to key j (of the gathered sequence).
        self.allowed = gathered_positions[None, :] <= positions[:, None]
        self.tokens_per_microbatch = shape.microbatch_size * shape.sequence_length
        # Per instruction, set by the runner.
        self.saved: Optional[Saved] = None
        self.saving = True
        self.grads: Dict[str, torch.Tensor] = {}
        # Keep saved autograd graphs after their backward ran (a measurement replays it).
        self.retain_graphs = False
        self.dropout_seed: Optional[int] = None
        self._masks: Dict[Tuple[int, str], torch.Tensor] = {}

    # -- weights and gradients ----------------------------------------------------------------
    def w(self, layer: int, name: str) -> torch.Tensor:
        return self.weights[layer_key(self.first_layer + layer, name)]

    def add_grad(self, key: str, value: torch.Tensor) -> None:
        if key in self.grads:
            self.grads[key] += value
        else:
            self.grads[key] = value

    def add_layer_grad(self, layer: int, name: str, value: torch.Tensor) -> None:
        self.add_grad(layer_key(self.first_layer + layer, name), value)

    def save(self, layer: int, key: str, piece: Piece, *tensors: torch.Tensor, extra=None) -> None:
        if self.saving:
            self.saved.put(layer, key, piece.rows, tensors, extra)

    def load(self, layer: int, key: str, piece: Piece) -> Tuple[torch.Tensor, ...]:
        return self.saved.get(layer, key, piece.rows)

    # -- dropout --------------------------------------------------------------------------------
    def begin_microbatch(self, dropout_seed: Optional[int]) -> None:
        self.dropout_seed, self._masks = dropout_seed, {}

    def dropout_mask(self, layer: int, site: str, piece: Piece, like: torch.Tensor) -> Optional[torch.Tensor]:
        """The keep-mask of a hidden dropout, drawn once for the whole microbatch from a seed of
        (step, microbatch, layer, site), so nanobatched and sequential execution, and a
        recompute, drop the same elements; scaled by 1 / (1 - p)."""
        p = self.shape.hidden_dropout
        if p == 0.0:
            return None
        key = (layer, site)
        if key not in self._masks:
            seed = zlib.crc32(f"{self.dropout_seed}/{self.first_layer + layer}/{site}".encode())
            g = torch.Generator(device=like.device).manual_seed(seed)
            full = (self.shape.microbatch_size,) + tuple(like.shape[1:])
            keep = torch.rand(full, generator=g, device=like.device) >= p
            self._masks[key] = keep.to(like.dtype) / (1.0 - p)
        return self._masks[key][piece.rows]


# -- building blocks ----------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _rotate_half_transposed(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([x[..., half:], -x[..., :half]], dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, heads, s, d]: the rotate-half RoPE with this rank's positions."""
    return x * cos + _rotate_half(x) * sin


def rope_backward(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # y = x cos + R x sin with R the rotate-half matrix: dx = dy cos + R^T (dy sin).
    return dy * cos + _rotate_half_transposed(dy * sin)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
              causal: bool) -> torch.Tensor:
    """Causal grouped-query attention: q [b, heads, s, d], k, v [b, groups, S, d]. Flash
    attention through scaled_dot_product_attention where PyTorch has it (>= 2.0), else the
    explicit softmax."""
    repeat = q.shape[1] // k.shape[1]
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    if _SDPA is not None:
        if causal:
            return _SDPA(q, k, v, is_causal=True)
        return _SDPA(q, k, v, attn_mask=allowed)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def vjp(fn: Callable, inputs: Sequence[torch.Tensor], grad: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """Gradients of fn(*inputs) against `grad`, from a recomputation of fn (cheap kernels:
    norms, SwiGLU, qk-norm; attention when its forward graph was not kept)."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        return torch.autograd.grad(fn(*leaves), leaves, grad)


def _wgrad(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dW of y = x W^T over every token: dy^T x."""
    return dy.reshape(-1, dy.shape[-1]).t() @ x.reshape(-1, x.shape[-1])


# -- linears: y = x W^T, and its backward as two kernels: dgrad dx = dy W, wgrad dW = dy^T x ----

def _linear(weight: str, source: str, target: str, key: str) -> Callable:
    def kernel(c: KernelContext, pc: Piece, l: int) -> None:
        x = pc.t.pop(source)
        c.save(l, key, pc, x)
        pc.t[target] = F.linear(x, c.w(l, weight))
    return kernel


def _dgrad(weight: str, grad: str, target: str) -> Callable:
    def kernel(c: KernelContext, pc: Piece, l: int) -> None:
        pc.t[target] = pc.t[grad] @ c.w(l, weight)  # the wgrad after it takes `grad`
    return kernel


def _wgrad_kernel(weight: str, grad: str, key: str) -> Callable:
    def kernel(c: KernelContext, pc: Piece, l: int) -> None:
        (x,) = c.load(l, key, pc)
        c.add_layer_grad(l, weight, _wgrad(pc.t.pop(grad), x))
    return kernel


LINEARS = {  # module -> (weight, input, output, input gradient, output gradient)
    "linear_qkv": ("self_attention.linear_qkv.weight", "a1", "qkv", "da1", "dqkv"),
    "linear_proj": ("self_attention.linear_proj.weight", "o", "p", "do", "dp"),
    "linear_fc1": ("mlp.linear_fc1.weight", "a2", "u", "da2", "du"),
    "linear_fc2": ("mlp.linear_fc2.weight", "g", "m", "dg", "dm"),
}


# -- forward kernels ----------------------------------------------------------------------------

def _input_layernorm(c: KernelContext, pc: Piece, l: int) -> None:
    x = pc.t["x"]
    c.save(l, "input_layernorm", pc, x)
    pc.t["a1"] = rms_norm(x, c.w(l, "input_layernorm.weight"), c.shape.norm_eps)


def _split_qkv(c: KernelContext, qkv: torch.Tensor):
    s = c.shape
    per = s.heads // s.kv_groups
    b, n = qkv.shape[0], qkv.shape[1]
    grouped = qkv.view(b, n, s.groups_local, per + 2, s.head_dim)
    q = grouped[:, :, :, :per].reshape(b, n, s.heads_local, s.head_dim).transpose(1, 2)
    k = grouped[:, :, :, per].transpose(1, 2)
    v = grouped[:, :, :, per + 1].transpose(1, 2)
    return q, k, v  # [b, heads, n, d], [b, groups, n, d] x 2


def _qk_norm(c: KernelContext, l: int, q: torch.Tensor, k: torch.Tensor):
    eps = c.shape.norm_eps
    return (rms_norm(q, c.w(l, "self_attention.q_layernorm.weight"), eps),
            rms_norm(k, c.w(l, "self_attention.k_layernorm.weight"), eps))


def _qkv_post(c: KernelContext, pc: Piece, l: int) -> None:
    q, k, v = _split_qkv(c, pc.t.pop("qkv"))
    if c.shape.qk_norm:
        c.save(l, "qkv_post", pc, q, k)
        q, k = _qk_norm(c, l, q, k)
    pc.t["q"], pc.t["k"], pc.t["v"] = q, k, v


def _rotary(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["q"] = rope(pc.t["q"], c.cos, c.sin)
    pc.t["k"] = rope(pc.t["k"], c.cos, c.sin).contiguous()
    pc.t["v"] = pc.t["v"].contiguous()


def _core_attention(c: KernelContext, pc: Piece, l: int) -> None:
    q, k, v = pc.t.pop("q"), pc.t.pop("k"), pc.t.pop("v")
    k_all, v_all = pc.t.pop("kv_full") if c.shape.cp > 1 else (k, v)
    graph = None
    if c.saving and c.shape.cp == 1:
        # Keep the forward's graph: the backward then runs the fused attention backward on it
        # (FlashAttention on CUDA) when it asks for the same rows.
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            o = attention(*leaves, c.allowed, c.causal)
        graph = (o, leaves)
        q, k, v = (t.detach() for t in leaves)
        o = o.detach()
    else:
        o = attention(q, k_all, v_all, c.allowed, c.causal)
    # With CP the local K/V are saved; the backward re-gathers the sequence, as planned.
    c.save(l, "core_attention", pc, q, k, v, extra=graph)
    b, heads, n, d = o.shape
    pc.t["o"] = o.transpose(1, 2).reshape(b, n, heads * d)


def _dropout(c: KernelContext, l: int, site: str, pc: Piece, x: torch.Tensor) -> torch.Tensor:
    mask = c.dropout_mask(l, site, pc, x)
    return x if mask is None else x * mask


def _self_attn_bda(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["h"] = pc.t.pop("x") + _dropout(c, l, "attn", pc, pc.t.pop("p"))


def _pre_mlp_layernorm(c: KernelContext, pc: Piece, l: int) -> None:
    h = pc.t["h"]
    c.save(l, "pre_mlp_layernorm", pc, h)
    pc.t["a2"] = rms_norm(h, c.w(l, "pre_mlp_layernorm.weight"), c.shape.norm_eps)


def swiglu(u: torch.Tensor) -> torch.Tensor:
    gate, up = u.chunk(2, dim=-1)
    return F.silu(gate) * up


def _activation(c: KernelContext, pc: Piece, l: int) -> None:
    u = pc.t.pop("u")
    c.save(l, "activation", pc, u)
    pc.t["g"] = swiglu(u)


def _mlp_bda(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["x"] = pc.t.pop("h") + _dropout(c, l, "mlp", pc, pc.t.pop("m"))


# -- backward kernels ---------------------------------------------------------------------------

def _mlp_bda_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    dx = pc.t.pop("dx")
    pc.t["dm"] = _dropout(c, l, "mlp", pc, dx)
    pc.t["dh"] = dx


def _activation_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    (u,) = c.load(l, "activation", pc)
    (pc.t["du"],) = vjp(swiglu, (u,), pc.t.pop("dg"))


def _norm_backward(c: KernelContext, pc: Piece, l: int, key: str, weight: str, grad: torch.Tensor):
    (x,) = c.load(l, key, pc)
    eps = c.shape.norm_eps
    dx, dw = vjp(lambda x_, w_: rms_norm(x_, w_, eps), (x, c.w(l, weight)), grad)
    c.add_layer_grad(l, weight, dw)
    return dx


def _pre_mlp_layernorm_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dhn"] = _norm_backward(c, pc, l, "pre_mlp_layernorm", "pre_mlp_layernorm.weight",
                                 pc.t.pop("da2"))


def _mlp_residual_fork_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dh"] = pc.t.pop("dh") + pc.t.pop("dhn")


def _self_attn_bda_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    dh = pc.t.pop("dh")
    pc.t["dp"] = _dropout(c, l, "attn", pc, dh)
    pc.t["dx"] = dh


def _core_attention_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    s = c.shape
    do = pc.t.pop("do")
    b, n = do.shape[0], do.shape[1]
    do = do.view(b, n, s.heads_local, s.head_dim).transpose(1, 2)
    graph = c.saved.extra(l, "core_attention", pc.rows) if s.cp == 1 else None
    if graph is not None:
        o, leaves = graph
        dq, dk, dv = torch.autograd.grad(o, leaves, do, retain_graph=c.retain_graphs)
    else:
        q, k, v = c.load(l, "core_attention", pc)
        if s.cp > 1:
            k, v = pc.t.pop("kv_full")
        dq, dk, dv = vjp(lambda q_, k_, v_: attention(q_, k_, v_, c.allowed, c.causal), (q, k, v), do)
    pc.t["dq"] = dq
    if s.cp > 1:
        pc.t["dkv_full"] = (dk, dv)
    else:
        pc.t["dk"], pc.t["dv"] = dk, dv


def _rotary_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dq"] = rope_backward(pc.t["dq"], c.cos, c.sin)
    pc.t["dk"] = rope_backward(pc.t["dk"], c.cos, c.sin)


def _qkv_post_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    s = c.shape
    dq, dk, dv = pc.t.pop("dq"), pc.t.pop("dk"), pc.t.pop("dv")
    if s.qk_norm:
        q, k = c.load(l, "qkv_post", pc)
        eps = s.norm_eps
        qw, kw = "self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"
        dq, dqw = vjp(lambda x, w: rms_norm(x, w, eps), (q, c.w(l, qw)), dq)
        dk, dkw = vjp(lambda x, w: rms_norm(x, w, eps), (k, c.w(l, kw)), dk)
        c.add_layer_grad(l, qw, dqw)
        c.add_layer_grad(l, kw, dkw)
    b, n = dq.shape[0], dq.shape[2]
    per = s.heads // s.kv_groups
    dq = dq.transpose(1, 2).reshape(b, n, s.groups_local, per, s.head_dim)
    dk = dk.transpose(1, 2).unsqueeze(3)
    dv = dv.transpose(1, 2).unsqueeze(3)
    pc.t["dqkv"] = torch.cat([dq, dk, dv], dim=3).reshape(b, n, -1)


def _input_layernorm_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dxn"] = _norm_backward(c, pc, l, "input_layernorm", "input_layernorm.weight",
                                 pc.t.pop("da1"))


def _attn_residual_fork_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dx"] = pc.t.pop("dx") + pc.t.pop("dxn")


# -- the work outside the block (full microbatch) ------------------------------------------------

def _vocab_range(c: KernelContext) -> Tuple[int, int]:
    start = c.tp_rank * c.shape.vocab_local
    return start, start + c.shape.vocab_local


def _local_ids(c: KernelContext, ids: torch.Tensor):
    start, stop = _vocab_range(c)
    inside = (ids >= start) & (ids < stop)
    return (ids - start).clamp(0, c.shape.vocab_local - 1), inside


def _output_weight(c: KernelContext) -> str:
    return EMBEDDING if c.shape.tied_embeddings else OUTPUT


def _embedding(c: KernelContext, pc: Piece, l: int) -> None:
    # Vocabulary-parallel lookup: this rank's rows, zero elsewhere; the all-reduce sums them.
    ids, inside = _local_ids(c, pc.t["tokens"])
    c.save(-1, "embedding", pc, ids, inside)
    x = F.embedding(ids, c.weights[EMBEDDING])
    pc.t["x"] = x * inside.unsqueeze(-1).to(x.dtype)


def _embedding_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    ids, inside = c.load(-1, "embedding", pc)
    dx = pc.t.pop("dx")
    weight = c.weights[EMBEDDING]
    grad = torch.zeros_like(weight)
    grad.index_add_(0, ids[inside], dx[inside].to(weight.dtype))
    c.add_grad(EMBEDDING, grad)


def _final_layernorm(c: KernelContext, pc: Piece, l: int) -> None:
    x = pc.t.pop("x")
    c.save(-1, "final_layernorm", pc, x)
    pc.t["y"] = rms_norm(x, c.weights[FINAL_NORM], c.shape.norm_eps)


def _final_layernorm_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    (x,) = c.load(-1, "final_layernorm", pc)
    eps = c.shape.norm_eps
    dx, dw = vjp(lambda x_, w_: rms_norm(x_, w_, eps), (x, c.weights[FINAL_NORM]), pc.t.pop("dy"))
    c.add_grad(FINAL_NORM, dw)
    pc.t["dx"] = dx


def _output_layer(c: KernelContext, pc: Piece, l: int) -> None:
    y = pc.t.pop("y")
    c.save(-1, "output_layer", pc, y)
    pc.t["logits"] = F.linear(y, c.weights[_output_weight(c)])


def _output_layer_dgrad(c: KernelContext, pc: Piece, l: int) -> None:
    pc.t["dy"] = pc.t["dlogits"] @ c.weights[_output_weight(c)]


def _output_layer_wgrad(c: KernelContext, pc: Piece, l: int) -> None:
    (y,) = c.load(-1, "output_layer", pc)
    c.add_grad(_output_weight(c), _wgrad(pc.t.pop("dlogits"), y).to(y.dtype))


def _loss(c: KernelContext, pc: Piece, l: int) -> None:
    # This rank's part of the cross entropy over its vocabulary shard: log-sum-exp of its
    # logits and the target's logit where the target is one of its words.
    logits = pc.t.pop("logits").float()
    ids, inside = _local_ids(c, pc.t["targets"])
    target = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) * inside
    c.save(-1, "loss", pc, logits, ids, inside)
    lse = torch.logsumexp(logits, dim=-1)
    if c.shape.tp == 1:
        finish_loss(c, pc, lse, target)
    else:
        pc.t["loss_parts"] = (lse, target)  # loss_all_reduce finishes it


def finish_loss(c: KernelContext, pc: Piece, lse: torch.Tensor, target: torch.Tensor) -> None:
    # Mean over the microbatch's tokens (all CP ranks'): each rank sums its own.
    pc.t["loss"] = (lse - target).sum() / c.tokens_per_microbatch
    c.save(-1, "loss_lse", pc, lse)


def _loss_bwd(c: KernelContext, pc: Piece, l: int) -> None:
    logits, ids, inside = c.load(-1, "loss", pc)
    (lse,) = c.load(-1, "loss_lse", pc)
    dloss = pc.t.pop("dloss")
    softmax = torch.exp(logits - lse.unsqueeze(-1))
    onehot = torch.zeros_like(softmax).scatter_(-1, ids.unsqueeze(-1), inside.unsqueeze(-1).to(softmax.dtype))
    dtype = c.weights[_output_weight(c)].dtype
    pc.t["dlogits"] = ((softmax - onehot) * (dloss / c.tokens_per_microbatch)).to(dtype)


FORWARD: Dict[str, Callable] = {
    "input_layernorm": _input_layernorm, "qkv_post": _qkv_post, "rotary": _rotary,
    "core_attention": _core_attention, "self_attn_bda": _self_attn_bda,
    "pre_mlp_layernorm": _pre_mlp_layernorm, "activation": _activation, "mlp_bda": _mlp_bda,
    "embedding": _embedding, "final_layernorm": _final_layernorm, "output_layer": _output_layer,
    "loss": _loss,
}
BACKWARD: Dict[str, Callable] = {
    "mlp_bda.bwd": _mlp_bda_bwd, "activation.bwd": _activation_bwd,
    "pre_mlp_layernorm.bwd": _pre_mlp_layernorm_bwd,
    "mlp_residual_fork.bwd": _mlp_residual_fork_bwd, "self_attn_bda.bwd": _self_attn_bda_bwd,
    "core_attention.bwd": _core_attention_bwd, "rotary.bwd": _rotary_bwd,
    "qkv_post.bwd": _qkv_post_bwd, "input_layernorm.bwd": _input_layernorm_bwd,
    "attn_residual_fork.bwd": _attn_residual_fork_bwd,
    "loss.bwd": _loss_bwd, "output_layer.dgrad": _output_layer_dgrad,
    "output_layer.wgrad": _output_layer_wgrad, "final_layernorm.bwd": _final_layernorm_bwd,
    "embedding.bwd": _embedding_bwd,
}
for _module, (_weight, _x, _y, _dx, _dy) in LINEARS.items():
    FORWARD[_module] = _linear(_weight, _x, _y, _module)
    BACKWARD[_module + ".dgrad"] = _dgrad(_weight, _dy, _dx)
    BACKWARD[_module + ".wgrad"] = _wgrad_kernel(_weight, _dy, _module)
COMPUTE: Dict[str, Callable] = {**FORWARD, **BACKWARD}


def check_kernels(names) -> None:
    """Refuses a program with a compute kernel this executor has no implementation of (a
    planner that grew a kernel the executor has not): named, before anything runs."""
    missing = sorted(n for n in names if n not in COMPUTE)
    if missing:
        raise errors.Unsupported(
            f"the planner's program has kernels the executor does not implement: "
            f"{', '.join(missing)} (kareus/torch/kernels.py)")
