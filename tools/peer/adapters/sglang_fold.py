"""SGLang's GDN ReplaySSM spec fold (`fused_sigmoid_gating_delta_rule_update` with `cache_ring=True` for the
verify window, `commit_gdn_replayssm_fold_all_layers` for the accepted prefix) as a target:

    replayssm fuzz --preset tiny-gdn --l2norm div_sqrt --target exec:'python3 tools/peer/adapters/sglang_fold.py --peer-src DIR'

DIR holds python/sglang/kernels/ops/attention/fla/gdn_replayssm_spec_fold.py and fused_sigmoid_gating_recurrent.py
at their paths in SGLang (README.md here). Both files import only torch and triton; they are loaded on their own
with importlib, without shims (one interpreter-only loop-counter shim, see load_peer; the fold file's `..._after_verify` wrapper, which imports an SGLang conv helper,
is never called).

How the protocol maps onto the peer (design replay):
* one checkpoint tensor for all layers, [L, S] slots `stride` apart (layer pitch S * stride), addressed [V, K]
  per value head (layout vk: SGLang labels it [slots, HV, K, V] and addresses it K-contiguous). The fold takes
  the slot and layer strides itself, so the gap after each slot is never formed as an address.
* per layer and slot the raw-payload ring SGLang keeps beside the checkpoint: raw v and raw pre-norm k in the
  activation dtype ([S, HV, RL, V], [S, H, RL, K]), fp32 g and beta ([S, HV, RL]), RL = max_T.
* step: one verify launch per layer over the packed batch (`cu_seqlens`), `disable_state_update=True`,
  `cache_ring=True`: the kernel reads the row's slot (-1 for PAD rows: zero state, no ring write), computes the
  outputs and writes the window's raw k, v and its own fp32 g and beta into the slot's ring. A fresh prefill's
  slot is zeroed first (SGLang zeroes a slot on allocation). Prefill rows are then committed by the fold with
  accepted = T.
* commit: one `commit_gdn_replayssm_fold_all_layers` launch (all layers) with accept_lens = n; PAD rows and rows
  with write_slot -1 pass slot -1 (SGLang's null block id -1: no read, no write); n = 0 is a no-op in the kernel.
* committed_state / pool: the checkpoint itself; every stored state is written by the peer's fold.
* the verify kernel addresses its pool as contiguous [P, HV, V, K] (index * HV*K*V); when the slot stride is not
  E it reads a bitwise compact copy of the pool (slot s at s * E), so the ring slot (the same index) stays s.

Precision: neither kernel has a `tl.dot`; every product is an fp32 multiply with `tl.sum` reductions (the fold
is written as a bitwise clone of the verify kernel's GDN branch, num_warps 1): tier fp32. beta = sigmoid(b)
in fp32 (stored fp32 in the ring); k and q divided by sqrt(sum(x^2) + 1e-6) (l2norm div_sqrt).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, serve  # noqa: E402

ENV = "REPLAYSSM_SGLANG_SRC"
FLA_DIR = "python/sglang/kernels/ops/attention/fla"
PEER_FILES = {"fold": f"{FLA_DIR}/gdn_replayssm_spec_fold.py", "verify": f"{FLA_DIR}/fused_sigmoid_gating_recurrent.py"}


def load_peer(src: str) -> dict:
    mods = {}
    for key, rel in PEER_FILES.items():
        mods[key] = common.load_peer_file(src, rel, f"sglang_{key}", "sglang_fold")
    if os.environ.get("TRITON_INTERPRET") == "1":
        # Triton's CPU interpreter runs a `for t in range(...)` loop with Python ints, which lack the `.to`
        # that the fold calls on its loop counter (`t.to(tl.int64)`, an index widening). Only under the
        # interpreter, the fold module's `range` yields ints that answer `.to` with themselves.
        mods["fold"].range = common.interpreter_range
    return mods


class SglangFold(Target):
    def __init__(self, peer: dict, dev, fault: str | None = None):
        import torch

        self.torch, self.dev, self.fault = torch, dev, fault
        self.verify = peer["verify"].fused_sigmoid_gating_delta_rule_update
        self.fold = peer["fold"].commit_gdn_replayssm_fold_all_layers

    def capabilities(self) -> dict:
        # GDN only (`cache_ring supports GDN only`); checkpoint addressed [V, K]; l2norm x / sqrt(sum + 1e-6);
        # beta = sigmoid(b) in fp32, stored fp32; K one tile (NK == 1 for every K). PAD rows' outputs are
        # computed from a zero state (index -1): not claimed zero.
        return {"name": "sglang-gdn_replayssm_spec_fold" + (f"+{self.fault}" if self.fault else ""),
                "design": "replay", "tier": "fp32", "bit_exact": False, "pad_outputs_zero": False,
                "copy_slot": True, "ops": ["gdn"], "layouts": ["vk"], "act_dtypes": ["F32", "BF16"],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["div_sqrt"], "round_beta_to_act": False}

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        common.gdn_geometry(self, setup, "SGLang's ReplaySSM ring and fold are")
        cfg = setup["config"]
        L, S, H, HV, K, V, RL = self.L, self.S, self.H, self.HV, self.K, self.V, self.T
        self.flat = torch.full((L * S * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
        self.rawv = torch.zeros(L, S, HV, RL, V, dtype=self.act, device=self.dev)
        self.rawk = torch.zeros(L, S, H, RL, K, dtype=self.act, device=self.dev)
        self.g = torch.zeros(L, S, HV, RL, dtype=torch.float32, device=self.dev)
        self.beta = torch.zeros(L, S, HV, RL, dtype=torch.float32, device=self.dev)
        self.A_log = [torch.as_tensor(p[0], dtype=torch.float32).to(self.dev).reshape(HV).contiguous() for p in params]
        self.dt_bias = [torch.as_tensor(p[1], dtype=torch.float32).to(self.dev).reshape(HV).contiguous() for p in params]
        self.last = None

    # --- storage -------------------------------------------------------------------------------------------
    def tensors(self) -> list:
        return [self.flat, self.rawv, self.rawk, self.g, self.beta]

    def _ckpt(self):
        """[L, S, HV, V, K] view with the layer and slot strides the fold reads (stride(0), stride(1))."""
        L, S, HV, V, K = self.L, self.S, self.HV, self.V, self.K
        return self.torch.as_strided(self.flat, (L, S, HV, V, K), (S * self.stride, self.stride, V * K, K, 1))

    def _blocks(self, l: int):
        return self.flat.view(self.L, self.S, self.stride)[l]

    def _fold(self, slots: list, accepted: list) -> None:
        if not any(s >= 0 and n > 0 for s, n in zip(slots, accepted)):
            return
        torch = self.torch
        idx = torch.tensor(slots, dtype=torch.int32, device=self.dev)
        n = torch.tensor(accepted, dtype=torch.int32, device=self.dev)
        self.fold(self._ckpt(), self.rawv, self.rawk, self.g, self.beta, idx, n, max_cache_len=self.T,
                  num_k_heads=self.H, use_qk_l2norm_in_kernel=True, null_block_id=-1)

    # --- the protocol's commands ---------------------------------------------------------------------------
    def allocate(self, slot: int) -> None:
        pass

    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N = inputs[0]["q"].shape[0]
        common.check_rows(rows, N, self.S, self.T)
        common.check_in_place(rows, "the fold")
        for r in rows:
            if not r.is_pad and r.is_prefill and r.fresh:
                for l in range(self.L):
                    self._blocks(l)[r.slot, : self.E] = 0
        idx = torch.tensor([-1 if r.is_pad else r.slot for r in rows], dtype=torch.int32, device=self.dev)
        cu = torch.tensor([0] + [r.token_offset + r.T for r in rows], dtype=torch.int32, device=self.dev)
        outs = []
        for l, x in enumerate(inputs):
            t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
            blk = self._blocks(l)
            pool = blk[:, : self.E].contiguous() if self.stride != self.E else blk  # bitwise compact copy
            o = self.verify(self.A_log[l], t("a").reshape(N, self.HV).contiguous(), self.dt_bias[l], 1.0, 20.0,
                            t("q").reshape(1, N, self.H, self.K).contiguous(),
                            t("k").reshape(1, N, self.H, self.K).contiguous(),
                            t("v").reshape(1, N, self.HV, self.V).contiguous(), t("b").reshape(N, self.HV).contiguous(),
                            pool, idx, scale=self.scale, use_qk_l2norm_in_kernel=True, cu_seqlens=cu,
                            disable_state_update=True, cache_ring=True, replayssm_rawv=self.rawv[l],
                            replayssm_rawk=self.rawk[l], replayssm_g=self.g[l], replayssm_beta=self.beta[l])
            outs.append(o.reshape(N, self.HV, self.V))
        pre = [not r.is_pad and r.is_prefill for r in rows]
        self._fold([r.slot if p else -1 for r, p in zip(rows, pre)], [r.T if p else 0 for r, p in zip(rows, pre)])
        self.last = rows
        return outs

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: max(r.accepted - 1, 0)) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        ver = [not r.is_pad and not r.is_prefill and r.write_slot != -1 for r in rows]
        self._fold([r.slot if v else -1 for r, v in zip(rows, ver)], [n(r) if v else 0 for r, v in zip(rows, ver)])

    def copy_slot(self, src: int, dst: int) -> None:
        for l in range(self.L):
            blk = self._blocks(l)
            blk[dst, : self.E] = blk[src, : self.E]
        for ring in (self.rawv, self.rawk, self.g, self.beta):
            ring[:, dst] = ring[:, src]

    def committed_state(self, layer: int, slot: int):
        return self._ckpt()[layer, slot].clone()

    def pool(self, layer: int):
        return self._blocks(layer)


def build(argv=None) -> SglangFold:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    args = ap.parse_args(argv)
    src = common.peer_path(args.peer_src, ENV, "sglang_fold")
    return common.wrap(SglangFold(load_peer(src), common.device(args.device), args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
