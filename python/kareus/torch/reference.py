# SPDX-License-Identifier: Apache-2.0
"""The unsharded model in one process with plain autograd: what the executor's sharded,
partitioned execution must equal. Written independently of kernels.py (its own norm, RoPE,
attention and loss), from the same weights (model.init_weights)."""
import math
from typing import Dict, Mapping

import torch
import torch.nn.functional as F

from .model import EMBEDDING, FINAL_NORM, OUTPUT, ModelShape, layer_key


def _norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, positions, base):
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(positions.to(torch.float64), inv)
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def loss(shape: ModelShape, weights: Mapping[str, torch.Tensor], tokens: torch.Tensor,
         targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of one microbatch (tokens, targets [b, S]) through the whole model."""
    s = shape
    b, n = tokens.shape
    per = s.heads // s.kv_groups
    positions = torch.arange(n)
    x = F.embedding(tokens, weights[EMBEDDING])
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in range(s.layers):
        w = lambda name: weights[layer_key(layer, name)]  # noqa: E731
        a = _norm(x, w("input_layernorm.weight"), s.norm_eps)
        qkv = (a @ w("self_attention.linear_qkv.weight").t()).view(b, n, s.kv_groups, per + 2, s.head_dim)
        q = qkv[:, :, :, :per].reshape(b, n, s.heads, s.head_dim).transpose(1, 2)
        k = qkv[:, :, :, per].transpose(1, 2)
        v = qkv[:, :, :, per + 1].transpose(1, 2)
        if s.qk_norm:
            q = _norm(q, w("self_attention.q_layernorm.weight"), s.norm_eps)
            k = _norm(k, w("self_attention.k_layernorm.weight"), s.norm_eps)
        q, k = _rope(q, positions, s.rope_base), _rope(k, positions, s.rope_base)
        k, v = k.repeat_interleave(per, dim=1), v.repeat_interleave(per, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(s.head_dim)
        attn = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + attn.transpose(1, 2).reshape(b, n, -1) @ w("self_attention.linear_proj.weight").t()
        a = _norm(x, w("pre_mlp_layernorm.weight"), s.norm_eps)
        gate, up = (a @ w("mlp.linear_fc1.weight").t()).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ w("mlp.linear_fc2.weight").t()
    x = _norm(x, weights[FINAL_NORM], s.norm_eps)
    logits = x @ weights[EMBEDDING if s.tied_embeddings else OUTPUT].t()
    return F.cross_entropy(logits.reshape(b * n, -1), targets.reshape(-1))


def gradients(shape: ModelShape, weights: Mapping[str, torch.Tensor], tokens: torch.Tensor,
              targets: torch.Tensor) -> (torch.Tensor, Dict[str, torch.Tensor]):
    """The mean loss over microbatches (tokens, targets [M, b, S]) and every weight's
    gradient of it."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in weights.items()}
    total = sum(loss(shape, leaves, tokens[m], targets[m]) for m in range(tokens.shape[0]))
    total = total / tokens.shape[0]
    total.backward()
    return total.detach(), {k: v.grad for k, v in leaves.items()}
