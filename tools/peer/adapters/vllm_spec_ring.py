"""vLLM's GDN spec ring (`gdn_replayssm_spec_decode`: verify and flush launches over a circular d/k/g record
cache, `commit_gdn_replayssm_spec` cursor commit, `reset_gdn_replayssm_spec_cursors`) as a target:

    replayssm fuzz --preset qwen3.5 --layers 2 --target exec:'python3 tools/peer/adapters/vllm_spec_ring.py --peer-src DIR'

DIR holds vllm/model_executor/layers/fla/ops/gdn_replayssm_spec_decode.py at its path in vLLM (README.md here).
The file is loaded on its own (not through vllm/__init__.py) with two import shims, both outside the
arithmetic: `vllm.triton_utils` re-exports the installed triton and triton.language, and
`get_replayssm_config` returns launch parameters (block_v, num_warps, nk, num_stages), which choose tile
sizes, not formulas.

How the protocol maps onto the peer (design spec_ring):
* per layer one checkpoint tensor [S + 2 blocks, HV, V, K] (layout vk, the kernel's) whose block s + 1 is the
  protocol's slot s, block 0 vLLM's NULL block (PAD rows are routed there: the kernel writes zero outputs and
  touches no state, the convention of its caller) and block S + 1 a scratch block; the blocks are `stride`
  apart, so the gap after each slot is never addressed. The d/k/g record rings are per layer and block; the
  cursors (write_pos, cache_base, is_flush) are per block and shared by the layers, as vLLM keeps them.
* ring geometry: flush threshold L = ring_B + max_T (the caller's L = B + max_spec_len), physical ring
  next_pow2(L), max_spec_len = max_T.
* step: both launches ("both": flush rows fold their history into the checkpoint, then verify); prefill rows
  go through the same launch from a zeroed checkpoint and reset cursors (fresh) and are committed at once with
  num_accepted = T (the adapter's use of the ring for prompt chunks; vLLM's own prefill runs a chunk kernel).
* commit: the cursor commit kernel with num_accepted = n for every verify row.
* committed_state between flushes: the block's checkpoint, records and cursors are copied into the scratch
  block, its is_flush flag set, and the peer's flush launch run on it with an empty window; the folded
  checkpoint it stores is the answer. The adapter moves bytes and sets a flag; every state value is the peer's.

Precision: every product in the kernel is a `tl.dot` without `input_precision`, which Triton lowers to TF32
operands on NVIDIA GPUs for fp32 inputs: tier tf32 with fp32 activations and records. The kernel casts the
checkpoint, q, k and the decayed records to the activation dtype before its dots, stores the flushed checkpoint
in the activation dtype and the records in the ring's dtype: with bf16 activations or records, tier bf16.
"""

from __future__ import annotations

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, serve  # noqa: E402

ENV = "REPLAYSSM_VLLM_SRC"
PEER_FILE = "vllm/model_executor/layers/fla/ops/gdn_replayssm_spec_decode.py"


def launch_config(kind: str, max_spec_len: int):
    """(block_v, num_warps, nk, num_stages): a later vLLM-lineage table (block_v 64, one warp, the K range in
    nk = 2 tiles, 4 from a window of 6). Tile sizes only; BKT = next_pow2(K) / nk must stay >= 16."""
    return 64, 1, 4 if max_spec_len >= 6 else 2, 2


def load_peer(src: str):
    import triton
    import triton.language as tl

    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.mamba",
                 "vllm.model_executor.layers.mamba.ops"):
        sys.modules.setdefault(name, types.ModuleType(name))
    tu = types.ModuleType("vllm.triton_utils")
    tu.triton, tu.tl = triton, tl
    sys.modules["vllm.triton_utils"] = tu
    cfg = types.ModuleType("vllm.model_executor.layers.mamba.ops.replayssm_config")
    cfg.get_replayssm_config = launch_config
    sys.modules[cfg.__name__] = cfg
    return common.load_peer_file(src, PEER_FILE, "vllm_gdn_replayssm_spec_decode", "vllm_spec_ring")


class VllmSpecRing(Target):
    def __init__(self, peer, dev, act: str, records: str, tier: str | None = None, fault: str | None = None):
        import torch

        self.torch, self.peer, self.dev = torch, peer, dev
        self.act_name, self.rec_name, self.tier, self.fault = act, records, tier, fault

    def capabilities(self) -> dict:
        tier = self.tier or ("tf32" if self.act_name == "F32" and self.rec_name == "F32" else "bf16")
        # K: the launch needs next_pow2(K) / nk >= 16 with nk = 2 (4 from max_T 6): K >= 32, power of two
        # (`only NK_global=1`, BKT checks in _launch_gdn_spec). GDN only; in-kernel beta = sigmoid(b) in fp32;
        # l2norm x * (1 / sqrt(sum + 1e-6)) (USE_QK_L2NORM_IN_KERNEL): rsqrt_mul. State layout [V, K].
        return {"name": f"vllm-gdn_replayssm_spec_decode(act {self.act_name}, records {self.rec_name})"
                        + (f"+{self.fault}" if self.fault else ""),
                "design": "spec_ring", "tier": tier, "bit_exact": False, "pad_outputs_zero": True,
                "copy_slot": True, "ops": ["gdn"], "layouts": ["vk"], "act_dtypes": [self.act_name],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["rsqrt_mul"], "round_beta_to_act": False,
                "K": [32, 64, 128, 256], "max_T": 16}

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        common.gdn_geometry(self, setup, "the spec ring kernel is")
        cfg = setup["config"]
        rec = common.torch_dtype(self.rec_name)
        self.Lring = int(setup["ring_B"]) + self.T
        self.buf = 1 << (self.Lring - 1).bit_length()
        P = self.S + 2
        self.scratch = self.S + 1
        self.flat = []
        for _ in range(self.L):
            f = torch.full((P * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
            f[: self.stride] = 0  # the NULL block is never read; zeros keep it tidy
            self.flat.append(f)
        self.d = [torch.zeros(P, self.HV, self.buf, self.V, dtype=rec, device=self.dev) for _ in range(self.L)]
        self.k = [torch.zeros(P, self.H, self.buf, self.K, dtype=rec, device=self.dev) for _ in range(self.L)]
        self.g = [torch.zeros(P, self.HV, self.buf, dtype=torch.float32, device=self.dev) for _ in range(self.L)]
        self.write_pos = torch.zeros(P, dtype=torch.int32, device=self.dev)
        self.cache_base = torch.zeros(P, dtype=torch.int32, device=self.dev)
        self.is_flush = torch.zeros(P, dtype=torch.int8, device=self.dev)
        self.A_log = [torch.as_tensor(p[0], dtype=torch.float32).to(self.dev).contiguous() for p in params]
        self.dt_bias = [torch.as_tensor(p[1], dtype=torch.float32).to(self.dev).reshape(self.HV).contiguous()
                        for p in params]
        self.last = None

    # --- storage -------------------------------------------------------------------------------------------
    def tensors(self) -> list:
        return self.flat + self.d + self.k + self.g + [self.write_pos, self.cache_base, self.is_flush]

    def _ckpt(self, l: int):
        P = self.S + 2
        return self.torch.as_strided(self.flat[l], (P, self.HV, self.V, self.K), (self.stride, self.V * self.K, self.K, 1))

    def _blocks(self, l: int):
        return self.flat[l].view(-1, self.stride)

    def _reset(self, blocks: list) -> None:
        if not blocks:
            return
        torch = self.torch
        b = torch.tensor(blocks, dtype=torch.int32, device=self.dev)
        self.peer.reset_gdn_replayssm_spec_cursors(self.write_pos, self.cache_base, self.is_flush,
                                                   torch.ones_like(b), b, self.Lring, self.T)

    def _commit(self, blocks: list, accepted: list) -> None:
        if not blocks:
            return
        torch = self.torch
        b = torch.tensor(blocks, dtype=torch.int32, device=self.dev)
        n = torch.tensor(accepted, dtype=torch.int32, device=self.dev)
        self.peer.commit_gdn_replayssm_spec(self.write_pos, self.cache_base, self.is_flush, n, b, self.Lring, self.T,
                                            cache_buf_len=self.buf)

    def _launch(self, l: int, mixed, a, b, out, qsl, idx, mode: str) -> None:
        self.peer.gdn_replayssm_spec_decode(mixed, a, b, self.A_log[l], self.dt_bias[l], self._ckpt(l), self.d[l],
                                            self.k[l], self.g[l], out, qsl, idx, self.write_pos, self.cache_base,
                                            self.is_flush, self.Lring, self.T, scale=self.scale,
                                            use_qk_l2norm_in_kernel=True, null_block_id=0, launch_mode=mode)

    def _copy_block(self, src: int, dst: int) -> None:
        for l in range(self.L):
            blk = self._blocks(l)
            blk[dst, : self.E] = blk[src, : self.E]
            self.d[l][dst] = self.d[l][src]
            self.k[l][dst] = self.k[l][src]
            self.g[l][dst] = self.g[l][src]
        for c in (self.write_pos, self.cache_base, self.is_flush):
            c[dst] = c[src]

    # --- the protocol's commands ---------------------------------------------------------------------------
    def allocate(self, slot: int) -> None:
        self._reset([slot + 1])

    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N = inputs[0]["q"].shape[0]
        common.check_rows(rows, N, self.S, self.T)
        common.check_in_place(rows, "the ring")
        fresh = [r.slot + 1 for r in rows if not r.is_pad and r.is_prefill and r.fresh]
        for l in range(self.L):
            blk = self._blocks(l)
            for f in fresh:
                blk[f, : self.E] = 0
        self._reset(fresh)
        idx = torch.tensor([0 if r.is_pad else r.slot + 1 for r in rows], dtype=torch.int32, device=self.dev)
        qsl = torch.tensor([0] + [sum(r.T for r in rows[: i + 1]) for i in range(len(rows))], dtype=torch.int32,
                           device=self.dev)
        outs = []
        for l, x in enumerate(inputs):
            t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
            mixed = torch.cat([t("q").reshape(N, -1), t("k").reshape(N, -1), t("v").reshape(N, -1)], dim=1).contiguous()
            a, b = t("a").reshape(N, self.HV).contiguous(), t("b").reshape(N, self.HV).contiguous()
            out = torch.empty(N, self.HV, self.V, dtype=self.act, device=self.dev)
            self._launch(l, mixed, a, b, out, qsl, idx, "both")
            outs.append(out)
        pre = [(r.slot + 1, r.T) for r in rows if not r.is_pad and r.is_prefill]
        self._commit([p for p, _ in pre], [n for _, n in pre])
        self.last = rows
        return outs

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: max(r.accepted - 1, 0)) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        ver = [(r.slot + 1, n(r)) for r in rows if not r.is_pad and not r.is_prefill and r.write_slot != -1]
        self._commit([p for p, _ in ver], [n for _, n in ver])

    def copy_slot(self, src: int, dst: int) -> None:
        self._copy_block(src + 1, dst + 1)

    def committed_state(self, layer: int, slot: int):
        torch = self.torch
        s = self.scratch
        blk = self._blocks(layer)
        blk[s, : self.E] = blk[slot + 1, : self.E]
        self.d[layer][s] = self.d[layer][slot + 1]
        self.k[layer][s] = self.k[layer][slot + 1]
        self.g[layer][s] = self.g[layer][slot + 1]
        for c in (self.write_pos, self.cache_base):
            c[s] = c[slot + 1]
        self.is_flush[s] = 1
        dim = 2 * self.H * self.K + self.HV * self.V
        mixed = torch.zeros(1, dim, dtype=self.act, device=self.dev)
        ab = torch.zeros(1, self.HV, dtype=self.act, device=self.dev)
        out = torch.zeros(1, self.HV, self.V, dtype=self.act, device=self.dev)
        qsl = torch.zeros(2, dtype=torch.int32, device=self.dev)  # one row with an empty window
        idx = torch.tensor([s], dtype=torch.int32, device=self.dev)
        self._launch(layer, mixed, ab, ab, out, qsl, idx, "flush")
        return blk[s, : self.E].reshape(self.HV, self.V, self.K).clone()

    def pool(self, layer: int):
        return self._blocks(layer)[1: self.S + 1]


def build(argv=None) -> VllmSpecRing:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    ap.add_argument("--act", choices=("F32", "BF16"), default="F32", help="activation dtype served (one per process: "
                                                                           "it decides the tier)")
    ap.add_argument("--tier", choices=("fp32", "tf32", "bf16"), default=None,
                    help="claim this tier instead of the one the dtypes imply (experiments: TRITON_F32_DEFAULT=ieee "
                         "makes the kernel's fp32 dots IEEE, so it can be judged at fp32)")
    ap.add_argument("--records", choices=("F32", "BF16"), default=None,
                    help="d/k record dtype (default: the activation dtype)")
    args = ap.parse_args(argv)
    src = common.peer_path(args.peer_src, ENV, "vllm_spec_ring")
    peer = load_peer(src)
    return common.wrap(VllmSpecRing(peer, common.device(args.device), args.act, args.records or args.act,
                                    args.tier, args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
