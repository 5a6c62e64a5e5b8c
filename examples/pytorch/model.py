# SPDX-License-Identifier: Apache-2.0
"""A small decoder-only transformer, split into pipeline stages.

The blocks are Llama's (what Kareus's workload model describes, docs/ARCHITECTURE.md §3):
RMSNorm, rotary position embeddings, grouped-query causal attention, a SwiGLU MLP, untied
input embedding and output layer. Tokens are bytes (vocabulary 256).

Where a tensor-parallel job launches its collectives, the model calls `comm.partition_begins`
with the Kareus partition type that starts there (forward: ``fwd_attn``, ``fwd_mlp``,
``fwd_trail``; backward: ``bwd_mlp``, ``bwd_attn``, ``bwd_trail``). That is the place where a
job reads the plan's knobs for the collective that overlaps the partition (how many SMs the
all-reduce kernel gets, and at which compute kernel it starts) and configures it. This CPU
example runs each stage in one process (no tensor parallelism, so no all-reduce): `comm` logs
and records the knobs instead.
"""
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ModelConfig:
    """The shape in the workload file's inline `model:` mapping (workload.yaml)."""
    hidden: int = 128
    heads: int = 4
    kv_groups: int = 2
    head_dim: int = 32
    ffn: int = 344
    layers: int = 4
    vocab: int = 256
    sequence_length: int = 64


class NoComm:
    """Stand-in for a job without a plan: the collectives keep their defaults."""

    def partition_begins(self, partition_type):
        pass


class _PartitionMark(torch.autograd.Function):
    """Identity whose forward announces a forward partition and whose backward announces a
    backward one (the backward of what follows the mark begins when its gradient arrives)."""

    @staticmethod
    def forward(ctx, x, comm, fwd_type, bwd_type):
        ctx.comm, ctx.bwd_type = comm, bwd_type
        if fwd_type:
            comm.partition_begins(fwd_type)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.bwd_type:
            ctx.comm.partition_begins(ctx.bwd_type)
        return grad, None, None, None


def mark(x, comm, fwd=None, bwd=None):
    return _PartitionMark.apply(x, comm, fwd, bwd)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(head_dim, length, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()  # [length, head_dim / 2]


def apply_rotary(x, cos, sin):
    """x: [batch, heads, length, head_dim]; rotates pairs (x[2i], x[2i+1])."""
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.kv_groups, self.head_dim = cfg.heads, cfg.kv_groups, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_groups) * cfg.head_dim,
                             bias=False)
        self.proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)

    def forward(self, x, cos, sin, causal_mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.heads * self.head_dim, self.kv_groups * self.head_dim,
             self.kv_groups * self.head_dim], dim=-1)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_groups, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_groups, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos[:t], sin[:t]), apply_rotary(k, cos[:t], sin[:t])
        repeat = self.heads // self.kv_groups  # grouped-query attention
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(causal_mask[:t, :t], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)  # gate and up
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(cfg.hidden), Attention(cfg)
        self.mlp_norm, self.mlp = RMSNorm(cfg.hidden), SwiGLU(cfg)

    def forward(self, x, comm, cos, sin, causal_mask):
        # Megatron launches the attention's output all-reduce after `proj` and the MLP's after
        # `fc2`; with nanobatch overlap each runs next to the other nanobatch's compute, in the
        # partition that starts here. The backward's all-reduces follow the dgrads of fc1 and
        # qkv, in the partitions that start where the gradient enters the MLP and the attention.
        x = mark(x, comm, fwd="fwd_attn")
        h = x + self.attn(self.attn_norm(x), cos, sin, causal_mask)
        h = mark(h, comm, fwd="fwd_mlp", bwd="bwd_attn")
        out = h + self.mlp(self.mlp_norm(h))
        return mark(out, comm, bwd="bwd_mlp")


def layers_of_stage(layers, stages, stage):
    """Kareus's even split (workload.cc): the first stages take the remainder."""
    counts = [layers // stages + (s < layers % stages) for s in range(stages)]
    first = sum(counts[:stage])
    return range(first, first + counts[stage])


class Stage(nn.Module):
    """One pipeline stage: the embedding on the first, the loss on the last, layers between.

    Every stage is built from the same seed as the whole model would be, so the pipeline trains
    exactly the model a single process would.
    """

    def __init__(self, cfg, stage, stages, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        embedding = nn.Embedding(cfg.vocab, cfg.hidden)
        blocks = [Block(cfg) for _ in range(cfg.layers)]
        norm, output = RMSNorm(cfg.hidden), nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.first, self.last = stage == 0, stage == stages - 1
        self.embedding = embedding if self.first else None
        self.blocks = nn.ModuleList(blocks[i] for i in layers_of_stage(cfg.layers, stages, stage))
        self.norm, self.output = (norm, output) if self.last else (None, None)
        cos, sin = rotary_tables(cfg.head_dim, cfg.sequence_length)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.ones(cfg.sequence_length, cfg.sequence_length, dtype=torch.bool).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x, comm, targets=None):
        """First stage: x = tokens [batch, length]; others: x = activations from the previous
        stage. Last stage: returns the mean cross-entropy against `targets`."""
        if self.first:
            x = self.embedding(x)
        x = mark(x, comm, bwd="bwd_trail")
        for block in self.blocks:
            x = block(x, comm, self.cos, self.sin, self.causal_mask)
        x = mark(x, comm, fwd="fwd_trail")
        if not self.last:
            return x
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
