# SPDX-License-Identifier: Apache-2.0
"""The model the executor runs: its shape (from the workload Kareus planned), its weights as
plain tensors under Megatron-Core's parameter names, and their tensor-parallel shards.

Weights are plain tensors so that a framework's own layer can be bound by a mapping
(`bind_weights`), not a fork. Layouts follow Megatron-Core:
- ``self_attention.linear_qkv.weight`` [(heads + 2 kv_groups) x head_dim, hidden], rows grouped
  per KV group: for each group its heads/kv_groups query heads, then its key, then its value;
  tensor parallelism gives every rank a contiguous run of groups;
- ``mlp.linear_fc1.weight`` [2 x ffn, hidden]: the SwiGLU gate rows, then the up rows; a rank's
  shard is its gate rows followed by its up rows;
- row-parallel ``linear_proj`` / ``linear_fc2`` shard the input columns, the vocabulary-parallel
  embedding and output layer the (padded) vocabulary rows; norms are replicated.
"""
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import torch

from . import errors

LAYER_WEIGHTS = (
    "input_layernorm.weight",
    "self_attention.linear_qkv.weight",
    "self_attention.q_layernorm.weight",  # qk_norm only
    "self_attention.k_layernorm.weight",  # qk_norm only
    "self_attention.linear_proj.weight",
    "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc2.weight",
)
QK_NORM_WEIGHTS = ("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight")
EMBEDDING = "embedding.word_embeddings.weight"
FINAL_NORM = "decoder.final_layernorm.weight"
OUTPUT = "output_layer.weight"


def layer_key(layer: int, name: str) -> str:
    """The model-wide name of a layer's weight (Megatron-Core: decoder.layers.N.<name>)."""
    return f"decoder.layers.{layer}.{name}"


@dataclass(frozen=True)
class ModelShape:
    """Everything about the model and its parallelism that the executor needs, read from the
    workload Kareus planned (a plan's recorded workload, `kareus.partitions(...)["workload"]`).

    `norm_eps`, `rope_base` and `hidden_dropout` are not part of a workload file (they do not
    change a kernel's cost); pick them as the model does.
    """
    hidden: int
    heads: int
    kv_groups: int
    head_dim: int
    ffn: int
    layers: int
    vocab: int
    qk_norm: bool
    tied_embeddings: bool
    sequence_length: int
    microbatch_size: int
    microbatches: int
    tp: int
    cp: int
    pp: int
    dp: int
    layers_per_stage: Tuple[int, ...]
    recompute: str
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    hidden_dropout: float = 0.0

    @classmethod
    def from_workload(cls, workload: Mapping, **overrides) -> "ModelShape":
        m, par = workload["model"], workload["parallelism"]
        if int(par.get("virtual_stages", 1)) > 1:
            raise errors.Unsupported(
                "the executor runs the 1F1B and GPipe schedules; interleaved 1F1B "
                "(parallelism.virtual_stages > 1) is not implemented")
        values = dict(
            hidden=int(m["hidden"]), heads=int(m["heads"]), kv_groups=int(m["kv_groups"]),
            head_dim=int(m["head_dim"]), ffn=int(m["ffn"]), layers=int(m["layers"]),
            vocab=int(m["vocab"]), qk_norm=bool(m.get("qk_norm", False)),
            tied_embeddings=bool(m.get("tied_embeddings", False)),
            sequence_length=int(workload["sequence_length"]),
            microbatch_size=int(workload["microbatch_size"]),
            microbatches=int(workload["microbatches"]),
            tp=int(par["tp"]), cp=int(par.get("cp", 1)), pp=int(par.get("pp", 1)),
            dp=int(par.get("dp", 1)), layers_per_stage=tuple(int(x) for x in par["layers_per_stage"]),
            recompute=str(workload.get("recompute", "full")))
        values.update(overrides)
        return cls(**values)

    # Megatron pads the vocabulary to a multiple of 128 x TP (make-vocab-size-divisible-by).
    @property
    def padded_vocab(self) -> int:
        multiple = 128 * self.tp
        return (self.vocab + multiple - 1) // multiple * multiple

    @property
    def heads_local(self) -> int:
        return self.heads // self.tp

    @property
    def groups_local(self) -> int:
        return self.kv_groups // self.tp

    @property
    def ffn_local(self) -> int:
        return self.ffn // self.tp

    @property
    def vocab_local(self) -> int:
        return self.padded_vocab // self.tp

    @property
    def seq_local(self) -> int:
        return self.sequence_length // self.cp

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def first_layer(self, stage: int) -> int:
        return sum(self.layers_per_stage[:stage])

    def describe(self) -> str:
        return (f"hidden {self.hidden}, heads {self.heads}, kv_groups {self.kv_groups}, "
                f"head_dim {self.head_dim}, ffn {self.ffn}, layers {self.layers}, vocab "
                f"{self.vocab}{', qk_norm' if self.qk_norm else ''}; TP {self.tp} CP {self.cp} "
                f"PP {self.pp} DP {self.dp}; microbatch {self.microbatch_size} x "
                f"{self.sequence_length} tokens, {self.microbatches} microbatches, recompute "
                f"{self.recompute}")


def init_weights(shape: ModelShape, seed: int = 0, std: float = 0.02,
                 dtype: torch.dtype = torch.float32) -> Dict[str, torch.Tensor]:
    """The whole model's weights (unsharded), from a seed: matrices N(0, std); norm weights
    near one (1 + N(0, 0.1), so their gradients are exercised). The same seed gives the same
    model whatever the parallelism."""
    g = torch.Generator().manual_seed(seed)

    def normal(*size, scale=std):
        return (torch.randn(*size, generator=g) * scale).to(dtype)

    def norm(size):
        return (1.0 + torch.randn(size, generator=g) * 0.1).to(dtype)

    h, d = shape.hidden, shape.head_dim
    weights = {EMBEDDING: normal(shape.padded_vocab, h)}
    for layer in range(shape.layers):
        w = {
            "input_layernorm.weight": norm(h),
            "self_attention.linear_qkv.weight": normal((shape.heads + 2 * shape.kv_groups) * d, h),
            "self_attention.linear_proj.weight": normal(h, shape.heads * d),
            "pre_mlp_layernorm.weight": norm(h),
            "mlp.linear_fc1.weight": normal(2 * shape.ffn, h),
            "mlp.linear_fc2.weight": normal(h, shape.ffn),
        }
        if shape.qk_norm:
            w["self_attention.q_layernorm.weight"] = norm(d)
            w["self_attention.k_layernorm.weight"] = norm(d)
        for name, tensor in w.items():
            weights[layer_key(layer, name)] = tensor
    weights[FINAL_NORM] = norm(h)
    if not shape.tied_embeddings:
        weights[OUTPUT] = normal(shape.padded_vocab, h)
    return weights


def shard(name: str, full: torch.Tensor, shape: ModelShape, tp_rank: int) -> torch.Tensor:
    """One tensor-parallel rank's shard of a whole-model weight."""
    tp, r = shape.tp, tp_rank
    if name.endswith("linear_qkv.weight"):
        rows_per_group = (shape.heads // shape.kv_groups + 2) * shape.head_dim
        per_rank = shape.groups_local * rows_per_group
        return full[r * per_rank:(r + 1) * per_rank].clone()
    if name.endswith("linear_proj.weight"):
        cols = shape.heads_local * shape.head_dim
        return full[:, r * cols:(r + 1) * cols].clone()
    if name.endswith("linear_fc1.weight"):
        f = shape.ffn_local
        gate, up = full[:shape.ffn], full[shape.ffn:]
        return torch.cat([gate[r * f:(r + 1) * f], up[r * f:(r + 1) * f]]).clone()
    if name.endswith("linear_fc2.weight"):
        f = shape.ffn_local
        return full[:, r * f:(r + 1) * f].clone()
    if name in (EMBEDDING, OUTPUT):
        v = shape.vocab_local
        return full[r * v:(r + 1) * v].clone()
    return full.clone()  # norms: replicated


def unshard(name: str, shards: List[torch.Tensor], shape: ModelShape) -> torch.Tensor:
    """The inverse of `shard`: the whole tensor from every TP rank's shard (in rank order)."""
    if name.endswith("linear_qkv.weight") or name in (EMBEDDING, OUTPUT):
        return torch.cat(shards)
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return torch.cat(shards, dim=1)
    if name.endswith("linear_fc1.weight"):
        f = shape.ffn_local
        return torch.cat([s[:f] for s in shards] + [s[f:] for s in shards])
    return shards[0]


def stage_weight_names(shape: ModelShape, stage: int) -> List[str]:
    """The model-wide names of the weights one pipeline stage holds, in a fixed order."""
    names = []
    if stage == 0:
        names.append(EMBEDDING)
    first = shape.first_layer(stage)
    for layer in range(first, first + shape.layers_per_stage[stage]):
        names += [layer_key(layer, name) for name in LAYER_WEIGHTS
                  if shape.qk_norm or name not in QK_NORM_WEIGHTS]
    if stage == shape.pp - 1:
        names.append(FINAL_NORM)
        # Tied embeddings: the output layer is the embedding; with several stages the last
        # holds its own copy (Megatron-LM), kept equal to the first stage's by summing their
        # gradients at every step.
        if not shape.tied_embeddings:
            names.append(OUTPUT)
        elif shape.pp > 1:
            names.append(EMBEDDING)
    return names


class StageWeights(torch.nn.Module):
    """The parameters of one pipeline stage on one tensor-parallel rank, under their
    model-wide names (`named_weights()`); `nn.Module.parameters()` gives them to an optimizer."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        # A framework's own Parameters (bind_weights) are kept, not wrapped: their .grad is
        # where the executor's gradients arrive and where the framework's optimizer looks.
        super().__init__()
        self._names = list(tensors)
        self._params = torch.nn.ParameterList(
            [t if isinstance(t, torch.nn.Parameter) else torch.nn.Parameter(t)
             for t in tensors.values()])

    def named_weights(self) -> Dict[str, torch.nn.Parameter]:
        return dict(zip(self._names, self._params))

    def __getitem__(self, name: str) -> torch.nn.Parameter:
        return self._params[self._names.index(name)]

    def __contains__(self, name: str) -> bool:
        return name in self._names

    @property
    def names(self) -> List[str]:
        return list(self._names)


def stage_weights(shape: ModelShape, stage: int, tp_rank: int, seed: int = 0,
                  full: Optional[Mapping[str, torch.Tensor]] = None,
                  device: Optional[torch.device] = None,
                  dtype: torch.dtype = torch.float32) -> StageWeights:
    """A stage's shard of the model made by `init_weights(shape, seed)` (or of `full`): the
    pipeline then trains exactly the model one process would."""
    if full is None:
        full = init_weights(shape, seed)
    tensors = {name: shard(name, full[name], shape, tp_rank).to(device=device, dtype=dtype)
               for name in stage_weight_names(shape, stage)}
    return StageWeights(tensors)


def bind_weights(mapping: Mapping[str, str], state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A framework's parameters under Kareus's names: `mapping` maps each Kareus name
    (`stage_weight_names`) to the framework's own key in `state` (e.g. a module's
    state_dict(); a TP shard in the layouts of this module's docstring). The tensors are
    shared, not copied."""
    missing = [k for k, v in mapping.items() if v not in state]
    if missing:
        raise errors.PlanMismatch(f"bind_weights: {len(missing)} mapped names are not in the "
                                  f"state: {', '.join(missing[:5])}")
    return {k: state[v] for k, v in mapping.items()}


def fuse_qkv(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, heads: int, kv_groups: int,
             head_dim: int) -> torch.Tensor:
    """Megatron's grouped linear_qkv layout from separate q, k, v projections ([out, in] each,
    as TorchTitan and Hugging Face keep them): per KV group its query heads, key, value."""
    per = heads // kv_groups
    q = wq.view(kv_groups, per * head_dim, -1)
    k = wk.view(kv_groups, head_dim, -1)
    v = wv.view(kv_groups, head_dim, -1)
    return torch.cat([q, k, v], dim=1).reshape(-1, wq.shape[-1])


def load_balanced_positions(sequence_length: int, cp: int, cp_rank: int) -> torch.Tensor:
    """The token positions a context-parallel rank holds (Megatron-Core's load balancing for
    causal attention): chunks r and 2CP-1-r of 2CP equal chunks; all of them without CP."""
    if cp == 1:
        return torch.arange(sequence_length)
    chunk = sequence_length // (2 * cp)
    first = torch.arange(cp_rank * chunk, (cp_rank + 1) * chunk)
    second = torch.arange((2 * cp - 1 - cp_rank) * chunk, (2 * cp - cp_rank) * chunk)
    return torch.cat([first, second])


def rotary_tables(positions: torch.Tensor, head_dim: int, base: float,
                  dtype: torch.dtype = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [len(positions), head_dim] for the rotate-half RoPE (Megatron, Hugging Face)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(positions.to(torch.float64), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)
