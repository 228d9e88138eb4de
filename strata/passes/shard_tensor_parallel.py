"""shard-tensor-parallel{tp=N}: a model's program of blocks as one rank of N (Megatron-style).

The module level writes the per-rank dims with the generic `Shards` (`q_proj: Linear<H, (Heads /
Shards) * HeadDim, T>`); this pass binds `Shards = N`, divides the dims that the families'
builders leave whole, and stamps on each sub which piece of its weights a rank holds and
where the ranks' results join (as gpt-fast's tp.py marks linears colwise or rowwise and hooks
an all_reduce on attention and feed-forward). `convert-module-to-op` then lowers one SPMD
function for every rank: each `op.param` reads its piece (`split`), and `op.all_reduce` /
`op.all_gather` join the ranks (see `strata.dialects.op.collective`).

The plan, by block kind:

* attention (grouped-query and gated): q, k, v (and the gate, which q_proj holds per head)
  split by heads (`tp_split = "out"`), o by rows (`"in"`) with an all-reduce (`tp_reduce`);
  with fewer KV heads than ranks each rank holds one KV head, replicated (vLLM's rule);
* Gated DeltaNet: split by key heads with their value heads: q|k|v of in_proj_qkv and the
  conv weight part by part (`tp_parts`), z, b, a, dt_bias and A_log by value heads, the conv
  and recurrent state with them; out_proj by rows, all-reduced;
* dense FFN: gate and up by columns, down by rows, all-reduced;
* sparse MoE: each expert split by its intermediate dim, the shared expert as a dense FFN,
  the router and the shared gate replicated; one all-reduce of routed + shared. With expert
  parallelism (`ep=N`, N the ranks) each rank holds whole experts instead, Experts / N of
  them (`tp_experts`: the expert params split by their first dim, `op.mul_mat_id_sharded`
  computes only the slots routed to them), the router replicated and the shared expert still
  a dense FFN, joined by the same all-reduce;
* embedding and lm_head split by vocabulary: a masked lookup summed by an all-reduce, the
  logits' pieces joined by an all-gather;
* norms replicated.

A dim that does not divide is a one-line error naming it. The module interpreter runs one
process's model; a sharded one is executed at the op level (the op interpreter simulates the
ranks), where the pass is checked against the unsharded model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, IntegerAttr, ModuleOp, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from strata.dialects import module as M
from strata.dialects.instances import BlockInstance, InstanceError, find_model, instantiate
from strata.errors import StrataError
from strata.ir.shapes import parse_block_generics, parse_sub_type

ATTENTION = ("std.attn.grouped_query", "std.attn.gated")
DELTA_NET, MLP, MOE = "std.attn.gated_delta_net", "std.nn.mlp", "std.moe.sparse"
LAYER, ROOT = "std.layer.decoder", "std.model.causal_lm"


class ShardError(StrataError):
    """A model that cannot be split over the ranks asked for."""


@dataclass
class Plan:
    """What the patterns share: the ranks, the unsharded dims of each block, and, once the
    types are rewritten, each block's per-rank dims."""

    model: M.ModelOp
    ranks: int
    #: whole experts per rank (expert parallelism) instead of pieces of every expert
    experts_whole: bool = False
    #: block name -> its generics' values in the whole model (the first instance's)
    whole: dict[str, dict[str, int | str]] = field(default_factory=dict)
    #: block name -> the same per rank, after the types are rewritten
    per_rank: dict[str, dict[str, int | str]] = field(default_factory=dict)

    def error(self, message: str) -> ShardError:
        ep = f" ep={self.ranks}" if self.experts_whole else ""
        return ShardError(f"shard-tensor-parallel{{tp={self.ranks}{ep}}}: {message}")

    def check(self, inst: BlockInstance, dim: str, by: int | None = None) -> None:
        """A one-line error unless `dim` of `inst` divides by the ranks (or `by`)."""
        n = by or self.ranks
        value = inst.dim(dim)
        if value % n:
            raise self.error(f"{dim} = {value} ({inst.path or 'the model'}) is not divisible by {n}")

    def block(self, name: str) -> M.BlockOp:
        found = self.model.block(name)
        assert found is not None
        return found

    def child_block(self, sub: M.SubOp, index: int = 0) -> M.BlockOp:
        return self.block(parse_sub_type(sub.type_text).alternatives[index][0])


def _first_instances(root: BlockInstance) -> dict[str, BlockInstance]:
    out: dict[str, BlockInstance] = {}
    for inst in root.walk():
        out.setdefault(inst.block.block_name, inst)
    return out


def check_divisible(plan: Plan, root: BlockInstance) -> None:
    """Every dim the plan splits divides by the ranks; the KV heads divide, or divide the ranks."""
    plan.check(root, "Vocab")
    for inst in root.walk():
        if inst.kind in ATTENTION:
            plan.check(inst, "Heads")
            kv = inst.dim("KvHeads")
            if kv % plan.ranks and plan.ranks % kv:
                raise plan.error(f"KvHeads = {kv} ({inst.name}) neither divides by {plan.ranks} nor divides it "
                                 "(KV heads are replicated only to one per rank)")
        elif inst.kind == DELTA_NET:
            plan.check(inst, "LinKHeads")  # each value head goes with its key head
        elif inst.kind == MOE:
            plan.check(inst, "Experts" if plan.experts_whole else "MoeInner")
        elif inst.kind == MLP:
            plan.check(inst, parse_block_generics([g.data for g in inst.block.generics.data])[1].name)


# ---------------------------------------------------------------------------------------------
# The rewrite of sub types: the dims the builders leave whole become per-rank


def rewrite_args(plan: Plan, sub: M.SubOp, change: dict[str, str]) -> None:
    """Replace the sub's generic arguments named in `change` (the child's generic -> a template
    with `{}` for the argument) unless they are per-rank already (they name Shards)."""
    parsed = parse_sub_type(sub.type_text)
    kinds = []
    for kind, args in parsed.alternatives:
        names = [g.name for g in parse_block_generics([s.data for s in plan.block(kind).generics.data])]
        texts = [str(a) for a in args]
        for i, text in enumerate(texts):
            if i < len(names) and names[i] in change and "Shards" not in text:
                texts[i] = change[names[i]].format(text if text.isidentifier() else f"({text})")
        kinds.append(f"{kind}<{', '.join(texts)}>" if texts else kind)
    body = " | ".join(kinds)
    sub.attributes["type"] = StringAttr(body if parsed.count is None else f"[{body}; {parsed.count}]")


def append_arg(sub: M.SubOp, arg: str) -> None:
    """Pass one more generic argument to the sub's block (its last generic)."""
    text = sub.type_text
    if not text.endswith(">") or text.startswith("["):
        raise ShardError(f"shard-tensor-parallel: cannot pass {arg} to sub @{sub.member_name} : {text}")
    sub.attributes["type"] = StringAttr(f"{text[:-1]}, {arg}>")


@dataclass
class ExpertTypes(RewritePattern):
    """Expert parallelism: the sparse MoE block takes the ranks (a `Shards` generic, which its
    layer passes) and its expert params hold Experts / Shards whole experts; the router keeps
    every expert."""

    plan: Plan

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: M.BlockOp, rewriter: PatternRewriter) -> None:
        if op.kind != MOE or not self.plan.experts_whole or "Shards" in op.generic_names():
            return
        op.attributes["generics"] = ArrayAttr([*op.generics.data, StringAttr("Shards: Dim")])
        for name in ("gate_exps", "up_exps", "down_exps"):
            param = op.member(name)
            assert isinstance(param, M.ParamOp) and param.type_text.startswith("Tensor[Experts,")
            param.attributes["type"] = StringAttr(param.type_text.replace("Tensor[Experts,", "Tensor[Experts / Shards,", 1))
        rewriter.notify_op_modified(op)


@dataclass
class RootTypes(RewritePattern):
    """Bind Shards on the model; the embedding's table per rank (the lm_head's is already)."""

    plan: Plan

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: M.ModelOp, rewriter: PatternRewriter) -> None:
        if "Shards" in op.generics.data:
            return
        op.attributes["generics"] = type(op.generics)({**op.generics.data, "Shards": IntegerAttr(self.plan.ranks, i64)})
        root = self.plan.block(op.root.data)
        embedding = root.member("embedding")
        if isinstance(embedding, M.SubOp):
            rewrite_args(self.plan, embedding, {"Vocab": "{} / Shards"})
        rewriter.notify_op_modified(op)


@dataclass
class LayerTypes(RewritePattern):
    """A layer's mixer and FFN get their per-rank dims: Gated DeltaNet's heads, the FFN's and
    the experts' intermediate dims; KV heads fewer than the ranks count as one per rank."""

    plan: Plan

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: M.BlockOp, rewriter: PatternRewriter) -> None:
        if op.kind != LAYER or op.attributes.get("tp_types") is not None:
            return
        for sub in op.members():
            if not isinstance(sub, M.SubOp):
                continue
            kind = self.plan.child_block(sub).kind
            whole = self.plan.whole.get(self.plan.child_block(sub).block_name, {})
            if kind == DELTA_NET:
                rewrite_args(self.plan, sub, {"LinKHeads": "{} / Shards", "LinVHeads": "{} / Shards"})
            elif kind in ATTENTION and int(whole.get("KvHeads", self.plan.ranks)) < self.plan.ranks:
                rewrite_args(self.plan, sub, {"KvHeads": "Shards"})
            elif kind == MOE and self.plan.experts_whole:
                rewrite_args(self.plan, sub, {"SharedInner": "{} / Shards"})
                append_arg(sub, "Shards")  # the experts' block counts its own (ExpertTypes)
            elif kind == MOE:
                rewrite_args(self.plan, sub, {"MoeInner": "{} / Shards", "SharedInner": "{} / Shards"})
            elif kind == MLP:
                inner = parse_block_generics([g.data for g in self.plan.child_block(sub).generics.data])[1].name
                rewrite_args(self.plan, sub, {inner: "{} / Shards"})
        op.attributes["tp_types"] = UnitAttr()
        rewriter.notify_op_modified(op)


# ---------------------------------------------------------------------------------------------
# The plan stamped on the subs and params


def knobs(sub: M.MemberOp | None, **values: Attribute) -> None:
    if sub is not None:
        sub.attributes.update(values)


def split(how: str, pieces: int | None = None, parts: tuple[int, ...] = ()) -> dict[str, Attribute]:
    out: dict[str, Attribute] = {"tp_split": StringAttr(how)}
    if pieces is not None:
        out["tp_pieces"] = IntegerAttr(pieces, i64)
    if parts:
        out["tp_parts"] = DenseArrayBase.from_list(i64, parts)
    return out


def param_split(axis: int, pieces: int, parts: tuple[int, ...] = ()) -> dict[str, Attribute]:
    return {"tp_split": DenseArrayBase.from_list(i64, (axis, pieces, *parts))}


class StampPattern(RewritePattern):
    """Stamps the plan on the blocks of one kind, once each."""

    kinds: tuple[str, ...] = ()

    def __init__(self, plan: Plan):
        self.plan = plan

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: M.BlockOp, rewriter: PatternRewriter) -> None:
        if op.kind not in self.kinds or op.attributes.get("tp_plan") is not None:
            return
        self.stamp(op, self.plan.per_rank.get(op.block_name, {}))
        op.attributes["tp_plan"] = UnitAttr()
        rewriter.notify_op_modified(op)

    def stamp(self, op: M.BlockOp, env: dict[str, int | str]) -> None:
        raise NotImplementedError


class ShardRoot(StampPattern):
    kinds = (ROOT,)

    def stamp(self, op, env):
        knobs(op.member("embedding"), **split("vocab"))
        knobs(op.member("lm_head"), **split("out"), tp_gather=UnitAttr())


class ShardAttention(StampPattern):
    kinds = ATTENTION

    def stamp(self, op, env):
        kv = int(self.plan.whole.get(op.block_name, {}).get("KvHeads", self.plan.ranks))
        knobs(op.member("q_proj"), **split("out"))
        for name in ("k_proj", "v_proj"):  # fewer KV heads than ranks: kv pieces, each on ranks/kv ranks
            knobs(op.member(name), **split("out", min(kv, self.plan.ranks)))
        knobs(op.member("o_proj"), **split("in"), tp_reduce=UnitAttr())


class ShardDeltaNet(StampPattern):
    kinds = (DELTA_NET,)

    def stamp(self, op, env):
        hk, hv, dk, dv = (int(env[n]) for n in ("LinKHeads", "LinVHeads", "LinKDim", "LinVDim"))
        conv_parts = (hk * dk, hk * dk, hv * dv)  # the rank's q | k | v channels
        knobs(op.member("in_proj_qkv"), **split("out", parts=conv_parts))
        for name in ("in_proj_z", "in_proj_b", "in_proj_a", "in_proj_qkvz", "in_proj_ba"):
            knobs(op.member(name), **split("out"))  # by value heads (grouped: by key-head groups)
        knobs(op.member("conv1d"), **param_split(0, self.plan.ranks, conv_parts))
        for name in ("dt_bias", "A_log"):
            knobs(op.member(name), **param_split(0, self.plan.ranks))
        knobs(op.member("out_proj"), **split("in"), tp_reduce=UnitAttr())


class ShardMoe(StampPattern):
    kinds = (MOE,)

    def stamp(self, op, env):
        if self.plan.experts_whole:  # [Experts, ...]: each rank its own experts
            for name in ("gate_exps", "up_exps", "down_exps"):
                knobs(op.member(name), **param_split(0, self.plan.ranks))
            return
        knobs(op.member("gate_exps"), **param_split(1, self.plan.ranks))
        knobs(op.member("up_exps"), **param_split(1, self.plan.ranks))
        knobs(op.member("down_exps"), **param_split(2, self.plan.ranks))


class ShardLayer(StampPattern):
    """The layer's sparse FFN sums its ranks once (routed + shared)."""

    kinds = (LAYER,)

    def stamp(self, op, env):
        mlp = op.member("mlp")
        if isinstance(mlp, M.SubOp) and self.plan.child_block(mlp).kind == MOE:
            knobs(mlp, tp_reduce=UnitAttr(), **({"tp_experts": UnitAttr()} if self.plan.experts_whole else {}))


class ShardMlp(StampPattern):
    kinds = (MLP,)

    def stamp(self, op, env):
        shared = {self.plan.child_block(s).block_name for b in self.plan.model.blocks() if b.kind == MOE
                  for s in b.members() if isinstance(s, M.SubOp) and s.member_name == "shared_expert"}
        _stamp_mlp(op, reduce=op.block_name not in shared)  # a shared expert's sum is its MoE's


def _stamp_mlp(op: M.BlockOp, reduce: bool) -> None:
    knobs(op.member("gate"), **split("out"))
    knobs(op.member("up"), **split("out"))
    knobs(op.member("down"), **split("in"), **({"tp_reduce": UnitAttr()} if reduce else {}))


def _walk(patterns: list[RewritePattern], module: ModuleOp) -> None:
    PatternRewriteWalker(GreedyRewritePatternApplier(patterns), apply_recursively=False).rewrite_module(module)


@dataclass(frozen=True)
class ShardTensorParallelPass(ModulePass):
    """Make the model one rank of `tp` (see the module docstring); tp=1 leaves it as it is.
    `ep`: 1 (each expert split over the ranks) or `tp` (whole experts per rank)."""

    name = "shard-tensor-parallel"

    tp: int = 2
    ep: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.tp < 1:
            raise ShardError(f"shard-tensor-parallel: tp must be a number of ranks >= 1, got {self.tp}")
        if self.ep not in (1, self.tp):
            raise ShardError(f"shard-tensor-parallel{{tp={self.tp} ep={self.ep}}}: ep is 1 (experts split by their "
                             f"intermediate dim) or the ranks, {self.tp} (whole experts per rank)")
        try:
            model = find_model(op)
            plan = Plan(model, self.tp, experts_whole=self.ep > 1)
            whole = instantiate(model)
            if "Shards" not in whole.env:
                raise plan.error("the model's root block has no Shards generic")
            if int(whole.env["Shards"]) != 1 or "Shards" in model.generics.data:
                raise plan.error(f"the model is sharded already (Shards = {whole.env['Shards']})")
            if self.tp == 1:
                return
            check_divisible(plan, whole)
            plan.whole = {k: v.env for k, v in _first_instances(whole).items()}
            _walk([RootTypes(plan), LayerTypes(plan), ExpertTypes(plan)], op)
            plan.per_rank = {k: v.env for k, v in _first_instances(instantiate(model)).items()}
            _walk([ShardRoot(plan), ShardLayer(plan), ShardAttention(plan), ShardDeltaNet(plan), ShardMoe(plan),
                   ShardMlp(plan)], op)
        except InstanceError as e:
            raise ShardError(f"shard-tensor-parallel: {e}") from None
        for block in model.blocks():  # the walkers' bookkeeping
            for mark in ("tp_types", "tp_plan"):
                block.attributes.pop(mark, None)
