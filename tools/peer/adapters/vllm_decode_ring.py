"""vLLM's GDN standard-decode ring (`fused_recurrent_gated_delta_rule_replayssm`: one token per row, a ring of
(d, k, g) records per state slot, the fold into the checkpoint when write_pos == L - 1) as a target:

    replayssm fuzz --preset qwen3.5 --layers 2 --max-T 1 --target exec:'python3 tools/peer/adapters/vllm_decode_ring.py --peer-src DIR'

DIR holds vllm/model_executor/layers/fla/ops/fused_recurrent_replayssm.py at its path in vLLM (README.md here).
The file is loaded on its own (not through vllm/__init__.py) with two import shims, both outside the
arithmetic: `vllm.triton_utils` re-exports the installed triton and triton.language, and
`get_replayssm_config("gdn_decode", L)` returns launch parameters (block_v, num_warps, num_stages, nk), which
choose tile sizes and the number of K tiles, not formulas.

How the protocol maps onto the peer (design decode_ring, max_T 1):
* per layer one checkpoint tensor [2S + 2 blocks, HV, V, K] (layout vk, the kernel's; `stride` apart, so the
  gap after each slot is never addressed): block 0 is vLLM's NULL block (PAD rows are routed there: the kernel
  writes zero outputs and touches no state), block s + 1 is the protocol's slot s, block S + 1 + s the flush
  scratch of slot s, block 2S + 1 the scratch of `committed_state`. The d/k/g rings ([blocks, HV|H, L, V|K],
  g F32) are per layer and block; the cursor write_pos is per block and shared by the layers (the kernel
  takes it per decode row; the adapter gathers it, as vLLM's caller does).
* step (every window is one token): a row whose cursor is below L - 1 runs in place: the kernel appends its
  record at write_pos, beyond the committed cursor, so nothing committed changes until the commit advances
  the cursor. A row at write_pos == L - 1 is a flush: the kernel folds the L - 1 records and the token into
  the checkpoint in place, which vLLM's standard decode never takes back; so the adapter copies the block
  (checkpoint and records) bitwise into the slot's flush scratch and launches the row there.
* commit: n = 1 advances the cursor (write_pos + 1), or, after a flush, copies the scratch checkpoint (the
  kernel's fold) bitwise into the slot and sets write_pos = 0; n = 0 changes nothing (the appended record lies
  beyond the cursor, the flush scratch is dropped). Prefill rows (one token each) are committed in the step;
  a fresh prefill starts from a zeroed checkpoint and write_pos 0 (vLLM zeroes a new request's state).
* committed_state between flushes: the block's checkpoint and its write_pos live records are copied into the
  committed_state scratch block, the records from write_pos to L - 2 zeroed (they add exact zeros to the
  kernel's masked sums), the row's cursor set to L - 1, and the kernel's own flush launched with an identity
  token: q = k = v = 0, a = -inf (softplus 0, g = -0, alpha = exp(-0) = 1) and b = -inf (beta = 0), so
  S_new = 1 * S + 0 * k: the answer is the kernel's fold of the live records, bit for bit what its next flush
  would start from. The adapter moves bytes and sets cursors; every state value is the peer's.

Precision: the reconstruction S = exp(G) S_0 + sum_j exp(G - G_j) d_j k_j^T is a `tl.dot` without
`input_precision`, which Triton lowers to TF32 operands on NVIDIA GPUs for fp32 inputs: tier tf32 with fp32
activations and records. The kernel casts the decayed d records and the k records to the activation dtype
before the dot, stores k in the activation dtype, d in the ring's dtype, and rounds beta to the activation
dtype (`tl.sigmoid(b).to(b.dtype)`): with bf16 activations or records, tier bf16. The flushed checkpoint is
stored in the state dtype.
"""

from __future__ import annotations

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, TargetError, serve  # noqa: E402

ENV = "REPLAYSSM_VLLM_SRC"
PEER_FILE = "vllm/model_executor/layers/fla/ops/fused_recurrent_replayssm.py"


def load_peer(src: str, nk: int):
    import triton
    import triton.language as tl

    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.mamba",
                 "vllm.model_executor.layers.mamba.ops"):
        sys.modules.setdefault(name, types.ModuleType(name))
    tu = types.ModuleType("vllm.triton_utils")
    tu.triton, tu.tl = triton, tl
    sys.modules["vllm.triton_utils"] = tu
    cfg = types.ModuleType("vllm.model_executor.layers.mamba.ops.replayssm_config")

    def get_replayssm_config(kernel: str, **shape):
        """(block_v, num_warps, num_stages, nk) for "gdn_decode": block_v 64, one warp, two stages (the table the
        spec-ring adapter uses) and nk K tiles. Tile sizes only: BKT = next_pow2(K) / nk must stay >= 16."""
        if kernel != "gdn_decode":
            raise ValueError(f"unknown ReplaySSM kernel config key: {kernel}")
        return 64, 1, 2, nk

    cfg.get_replayssm_config = get_replayssm_config
    sys.modules[cfg.__name__] = cfg
    return common.load_peer_file(src, PEER_FILE, "vllm_fused_recurrent_replayssm", "vllm_decode_ring")


class VllmDecodeRing(Target):
    def __init__(self, peer, dev, act: str, records: str, ring_len: int, nk: int, tier: str | None = None,
                 fault: str | None = None):
        import torch

        self.torch, self.peer, self.dev = torch, peer, dev
        self.act_name, self.rec_name, self.Lr, self.nk = act, records, ring_len, nk
        self.tier, self.fault = tier, fault

    def capabilities(self) -> dict:
        tier = self.tier or ("tf32" if self.act_name == "F32" and self.rec_name == "F32" else "bf16")
        # K: one tile (`NK_global=1`) and BKT = next_pow2(K) / nk >= 16 (the launcher raises otherwise).
        # GDN only; gate softplus(a + dt_bias) with threshold 20; l2norm x * (1 / sqrt(sum + 1e-6)): rsqrt_mul;
        # beta = sigmoid(b) in fp32, then rounded to the activation dtype (exact for F32; BF16 is inside the bf16
        # tier, so configs that keep beta in fp32 are accepted and round_beta_to_act ones are not needed).
        ks = [k for k in (16, 32, 64, 128, 256) if k // self.nk >= 16]
        return {"name": f"vllm-fused_recurrent_replayssm(act {self.act_name}, records {self.rec_name}, "
                        f"L {self.Lr}, nk {self.nk})" + (f"+{self.fault}" if self.fault else ""),
                "design": "decode_ring", "tier": tier, "bit_exact": False, "pad_outputs_zero": True,
                "copy_slot": True, "ops": ["gdn"], "layouts": ["vk"], "act_dtypes": [self.act_name],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["rsqrt_mul"], "round_beta_to_act": False,
                "K": ks, "max_T": 1}

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        common.gdn_geometry(self, setup, "the decode ring kernel is")
        if self.T != 1:
            raise TargetError("setup.max_T", f"is {self.T}: the standard-decode ring takes one token per row (1)")
        rec = common.torch_dtype(self.rec_name)
        P = 2 * self.S + 2
        self.fold_block = 2 * self.S + 1
        self.flat = []
        for _ in range(self.L):
            f = torch.full((P * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
            f[: self.stride] = 0  # the NULL block is never read; zeros keep it tidy
            self.flat.append(f)
        self.d = [torch.zeros(P, self.HV, self.Lr, self.V, dtype=rec, device=self.dev) for _ in range(self.L)]
        self.k = [torch.zeros(P, self.H, self.Lr, self.K, dtype=rec, device=self.dev) for _ in range(self.L)]
        self.g = [torch.zeros(P, self.HV, self.Lr, dtype=torch.float32, device=self.dev) for _ in range(self.L)]
        self.write_pos = torch.zeros(P, dtype=torch.int32, device=self.dev)
        self.A_log = [torch.as_tensor(p[0], dtype=torch.float32).to(self.dev).contiguous() for p in params]
        self.dt_bias = [torch.as_tensor(p[1], dtype=torch.float32).to(self.dev).reshape(self.HV).contiguous()
                        for p in params]
        self.last = None

    # --- storage -------------------------------------------------------------------------------------------
    def tensors(self) -> list:
        return self.flat + self.d + self.k + self.g + [self.write_pos]

    def _ckpt(self, l: int):
        P = self.flat[l].numel() // self.stride
        return self.torch.as_strided(self.flat[l], (P, self.HV, self.V, self.K), (self.stride, self.V * self.K, self.K, 1))

    def _blocks(self, l: int):
        return self.flat[l].view(-1, self.stride)

    def _copy_block(self, src: int, dst: int, records: bool = True) -> None:
        """Bitwise copy of block src's checkpoint (the first E elements; gaps untouched) and records on every
        layer."""
        for l in range(self.L):
            blk = self._blocks(l)
            blk[dst, : self.E] = blk[src, : self.E]
            if records:
                self.d[l][dst] = self.d[l][src]
                self.k[l][dst] = self.k[l][src]
                self.g[l][dst] = self.g[l][src]

    def _scratch(self, block: int) -> int:
        return self.S + block

    def _launch(self, l: int, mixed, a, b, out, idx, wp) -> None:
        self.peer.fused_recurrent_gated_delta_rule_replayssm(
            mixed, a, b, self.A_log[l], self.dt_bias[l], self.scale, self._ckpt(l), self.d[l], self.k[l], self.g[l],
            out, idx, wp, use_qk_l2norm_in_kernel=True)

    # --- the protocol's commands ---------------------------------------------------------------------------
    def allocate(self, slot: int) -> None:
        self.write_pos[slot + 1] = 0

    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N = inputs[0]["q"].shape[0]
        common.check_rows(rows, N, self.S, 1)
        common.check_in_place(rows, "the decode ring")
        wp_all = self.write_pos.tolist()
        idx, wp = [], []
        for r in rows:  # one kernel row per token: rows are packed in order, every window 0 or 1 token
            if r.is_pad:
                idx += [0] * r.T
                wp += [0] * r.T
                continue
            blk = r.slot + 1
            if r.is_prefill and r.fresh:
                for l in range(self.L):
                    self._blocks(l)[blk, : self.E] = 0
                wp_all[blk] = 0
                self.write_pos[blk] = 0
            if wp_all[blk] == self.Lr - 1:  # a flush: run it on the slot's scratch copy
                self._copy_block(blk, self._scratch(blk))
                idx.append(self._scratch(blk))
            else:
                idx.append(blk)
            wp.append(wp_all[blk])
        idx_t = torch.tensor(idx, dtype=torch.int32, device=self.dev)
        wp_t = torch.tensor(wp, dtype=torch.int32, device=self.dev)
        outs = []
        for l, x in enumerate(inputs):
            if N == 0:
                outs.append(torch.zeros(0, self.HV, self.V, dtype=self.act, device=self.dev))
                continue
            t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
            mixed = torch.cat([t("q").reshape(N, -1), t("k").reshape(N, -1), t("v").reshape(N, -1)], dim=1).contiguous()
            a, b = t("a").reshape(N, self.HV).contiguous(), t("b").reshape(N, self.HV).contiguous()
            out = torch.empty(N, self.HV, self.V, dtype=self.act, device=self.dev)
            self._launch(l, mixed, a, b, out, idx_t, wp_t)
            outs.append(out)
        self._advance([r.slot + 1 for r in rows if not r.is_pad and r.is_prefill])
        self.last = rows
        return outs

    def _advance(self, blocks: list) -> None:
        """Commits the stepped token of each block: after a flush (the block's cursor at L - 1) the scratch
        checkpoint, the kernel's fold, becomes the slot's and the ring restarts; otherwise the cursor moves past
        the record the kernel appended."""
        for blk in blocks:
            if int(self.write_pos[blk]) == self.Lr - 1:
                self._copy_block(self._scratch(blk), blk, records=False)
                self.write_pos[blk] = 0
            else:
                self.write_pos[blk] += 1

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: r.accepted - 1) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        self._advance([r.slot + 1 for r in rows
                       if not r.is_pad and not r.is_prefill and r.write_slot != -1 and n(r) > 0])

    def copy_slot(self, src: int, dst: int) -> None:
        self._copy_block(src + 1, dst + 1)
        self.write_pos[dst + 1] = self.write_pos[src + 1]

    def committed_state(self, layer: int, slot: int):
        torch = self.torch
        blk, f = slot + 1, self.fold_block
        w = int(self.write_pos[blk])
        if w == 0:  # nothing since the last flush: the checkpoint is the kernel's last fold (or a fresh zero)
            return self._blocks(layer)[blk, : self.E].reshape(self.HV, self.V, self.K).clone()
        ckpt = self._blocks(layer)
        ckpt[f, : self.E] = ckpt[blk, : self.E]
        for ring in (self.d[layer], self.k[layer], self.g[layer]):
            ring[f] = 0
            ring[f, :, :w] = ring[blk, :, :w]
        dim = 2 * self.H * self.K + self.HV * self.V
        mixed = torch.zeros(1, dim, dtype=self.act, device=self.dev)
        ab = torch.full((1, self.HV), float("-inf"), dtype=self.act, device=self.dev)
        out = torch.zeros(1, self.HV, self.V, dtype=self.act, device=self.dev)
        idx = torch.tensor([f], dtype=torch.int32, device=self.dev)
        wp = torch.tensor([self.Lr - 1], dtype=torch.int32, device=self.dev)
        self._launch(layer, mixed, ab, ab, out, idx, wp)
        return ckpt[f, : self.E].reshape(self.HV, self.V, self.K).clone()

    def pool(self, layer: int):
        return self._blocks(layer)[1: self.S + 1]


def build(argv=None) -> VllmDecodeRing:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    ap.add_argument("--act", choices=("F32", "BF16"), default="F32", help="activation dtype served (one per process: "
                                                                           "it decides the tier)")
    ap.add_argument("--tier", choices=("fp32", "tf32", "bf16"), default=None,
                    help="claim this tier instead of the one the dtypes imply (experiments: TRITON_F32_DEFAULT=ieee "
                         "makes the kernel's fp32 dots IEEE, so it can be judged at fp32)")
    ap.add_argument("--records", choices=("F32", "BF16"), default=None,
                    help="d/k record dtype (default: the activation dtype)")
    ap.add_argument("--ring-len", type=int, default=16,
                    help="L, the records per slot (d_cache.shape[2]); the step at write_pos == L - 1 flushes "
                         "(default 16, the L vLLM's launch-config table defaults to)")
    ap.add_argument("--nk", type=int, choices=(1, 2, 4), default=2,
                    help="K tiles of the launch (the config table's nk; 1 admits K = 16)")
    args = ap.parse_args(argv)
    if args.ring_len < 1:
        ap.error(f"--ring-len must be >= 1, got {args.ring_len}")
    src = common.peer_path(args.peer_src, ENV, "vllm_decode_ring")
    peer = load_peer(src, args.nk)
    return common.wrap(VllmDecodeRing(peer, common.device(args.device), args.act, args.records or args.act,
                                      args.ring_len, args.nk, args.tier, args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
