"""TokenSpeed's GDN replay commit (`triton_gdn_decode_mtp` for the verify window, `triton_gdn_replay_commit`
for the accepted prefix, all layers in one launch) as a target:

    replayssm fuzz --preset tiny-gdn --l2norm div_sqrt --target exec:'python3 tools/peer/adapters/tokenspeed_replay.py --peer-src DIR'

DIR holds tokenspeed-kernel/python/tokenspeed_kernel/ops/attention/triton/gated_delta_rule.py at its path in
TokenSpeed (README.md here). The file is loaded on its own with importlib; its module-level imports (engine
registry, platform, signature, gdn_utils and the chunk-prefill kernel) are replaced by small in-memory modules:
the registry decorator returns the function unchanged, the other names are placeholders the decode and commit
launchers never reach. None of them is arithmetic.

How the protocol maps onto the peer (design replay):
* per layer one flat state pool of S slots `stride` apart, addressed [V, K] (layout vk, TokenSpeed's K-last
  pool); the commit kernel takes each layer's base address and row stride, the gap is never formed as an address.
* step: one `triton_gdn_decode_mtp` launch per layer and per distinct window length (the launcher takes a dense
  [B, T] batch), with `disable_state_update=True` (the verify never writes the pool): it reads the row's slot,
  -1 for PAD rows and fresh prefills (the kernel then starts from zeros). The raw k, v, a, b of every token are
  kept, bitwise, in a payload laid out as the commit kernel reads it: per layer and row, T token rows of
  [k (H*K) | v (HV*V) | a (HV) | b (HV)] in the activation dtype (TokenSpeed fills it in its fused QKV split).
  Prefill rows are committed in the step by the same commit kernel with accepted = T (read -1 when fresh).
* commit: one `triton_gdn_replay_commit` launch over all layers and rows: read page = slot, write page =
  write_slot (-1: no write; PAD rows read -1 and write -1), accepted_length = n. n = 0 rewrites the read state
  unchanged (an in-place store of the loaded values, through fp32 and back: bitwise for F32 and BF16 states).
* committed_state / pool: the pool itself; every stored state is written by the peer's commit kernel.
* when the slot stride is not E the decode launcher (which addresses its pool as contiguous [P, HV, V, K])
  reads a bitwise copy of the rows' checkpoints gathered into a contiguous scratch pool.

Precision: neither kernel has a `tl.dot`; every product is an fp32 multiply with `tl.sum` reductions: tier fp32.
beta = sigmoid(b) and the softplus gate are computed in fp32 from the raw payload; k (and q) are divided by
sqrt(sum(x^2) + 1e-6) (l2norm div_sqrt).
"""

from __future__ import annotations

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, serve  # noqa: E402

ENV = "REPLAYSSM_TOKENSPEED_SRC"
PEER_FILE = "tokenspeed-kernel/python/tokenspeed_kernel/ops/attention/triton/gated_delta_rule.py"


def _shim_modules() -> None:
    """In-memory stand-ins for the module-level imports of gated_delta_rule.py (none is called by the decode or
    commit path)."""

    def register_kernel(*args, **kwargs):
        return lambda fn: fn

    class Placeholder:
        def __init__(self, *args, **kwargs):
            pass

        def __getattr__(self, name):
            return name

    def unused(*args, **kwargs):
        raise RuntimeError("the chunk-prefill path is not part of the replay adapter")

    names = {
        "tokenspeed_kernel": {},
        "tokenspeed_kernel.ops": {},
        "tokenspeed_kernel.ops.attention": {},
        "tokenspeed_kernel.ops.attention.triton": {},
        "tokenspeed_kernel.ops.attention.triton.linear": {},
        "tokenspeed_kernel.ops.attention.triton.linear.chunk": {"chunk_gated_delta_rule": unused},
        "tokenspeed_kernel.ops.attention.gdn_utils": {"GdnCheckpointLayout": Placeholder(),
                                                      "GdnChunkPrefillResult": Placeholder},
        "tokenspeed_kernel.platform": {"CapabilityRequirement": Placeholder},
        "tokenspeed_kernel.registry": {"Priority": Placeholder(), "register_kernel": register_kernel},
        "tokenspeed_kernel.signature": {"format_signatures": lambda *a, **k: None},
    }
    for name, attrs in names.items():
        mod = sys.modules.get(name) or types.ModuleType(name)
        for k, v in attrs.items():
            setattr(mod, k, v)
        sys.modules[name] = mod


def load_peer(src: str):
    _shim_modules()
    return common.load_peer_file(src, PEER_FILE, "tokenspeed_gated_delta_rule", "tokenspeed_replay")


class TokenSpeedReplay(Target):
    def __init__(self, peer, dev, fault: str | None = None):
        import torch

        self.torch, self.peer, self.dev, self.fault = torch, peer, dev, fault

    def capabilities(self) -> dict:
        # GDN only (scalar gate per value head); pool addressed [V, K] (K-last); l2norm x / sqrt(sum + 1e-6);
        # beta = sigmoid(b) in fp32 from the raw payload; K one tile (next_pow2(K), NK == 1 for every K).
        return {"name": "tokenspeed-gdn_replay_commit" + (f"+{self.fault}" if self.fault else ""),
                "design": "replay", "tier": "fp32", "bit_exact": False, "pad_outputs_zero": False,
                "copy_slot": True, "ops": ["gdn"], "layouts": ["vk"], "act_dtypes": ["F32", "BF16"],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["div_sqrt"], "round_beta_to_act": False}

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        common.gdn_geometry(self, setup, "TokenSpeed's replay commit is")
        cfg = setup["config"]
        self.width = self.H * self.K + self.HV * self.V + 2 * self.HV
        self.flat = [torch.full((self.S * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
                     for _ in range(self.L)]
        self.params = torch.stack([torch.stack([torch.as_tensor(p[0], dtype=torch.float32).reshape(self.HV),
                                                torch.as_tensor(p[1], dtype=torch.float32).reshape(self.HV)])
                                   for p in params]).to(self.dev).contiguous()  # [L, 2, HV]
        self.A_log = [self.params[l, 0].contiguous() for l in range(self.L)]
        self.dt_bias = [self.params[l, 1].contiguous() for l in range(self.L)]
        self.addresses = torch.tensor([f.data_ptr() for f in self.flat], dtype=torch.int64, device=self.dev)
        self.row_strides = torch.full((self.L,), self.stride, dtype=torch.int64, device=self.dev)
        self.payload = torch.zeros(self.L, 0, self.width, dtype=self.act, device=self.dev)
        self.last = None

    # --- storage -------------------------------------------------------------------------------------------
    def reserve(self, rows: int) -> None:
        """The payload holds `rows` rows of max_T tokens per layer (grown before a step, never during one)."""
        if self.payload.shape[1] < rows * self.T:
            self.payload = self.torch.zeros(self.L, rows * self.T, self.width, dtype=self.act, device=self.dev)

    def tensors(self) -> list:
        return self.flat + [self.payload]

    def _pool_vk(self, l: int):
        return self.flat[l].view(self.S, self.stride)[:, : self.E].view(self.S, self.HV, self.V, self.K)

    def _replay(self, read: list, write: list, accepted: list) -> None:
        """One all-layer commit launch over every row of the last step (payload row block i = batch row i);
        a row that commits nothing passes read -1, write -1, n 0, which the kernel turns into a no-op."""
        torch = self.torch
        if not any(w >= 0 for w in write):
            return
        rd = torch.tensor(read, dtype=torch.int32, device=self.dev).repeat(self.L, 1).contiguous()
        wr = torch.tensor(write, dtype=torch.int32, device=self.dev).repeat(self.L, 1).contiguous()
        n = torch.tensor(accepted, dtype=torch.int32, device=self.dev)
        self.peer.triton_gdn_replay_commit(self.payload, self.params, state_addresses=self.addresses,
                                           state_row_strides=self.row_strides, read_indices=rd, write_indices=wr,
                                           accepted_length=n, draft_token_num=self.T, num_k_heads=self.H,
                                           num_v_heads=self.HV, head_k_dim=self.K, head_v_dim=self.V,
                                           state_dtype=self.state)

    # --- the protocol's commands ---------------------------------------------------------------------------
    def allocate(self, slot: int) -> None:
        pass

    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N = inputs[0]["q"].shape[0]
        common.check_rows(rows, N, self.S, self.T)
        self.reserve(len(rows))
        self.payload.zero_()
        T = self.T
        read = [-1 if r.is_pad or (r.is_prefill and r.fresh) else r.slot for r in rows]
        outs = []
        for l, x in enumerate(inputs):
            t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
            q, k, v = t("q").reshape(N, self.H, self.K), t("k").reshape(N, self.H, self.K), t("v").reshape(N, self.HV, self.V)
            a, b = t("a").reshape(N, self.HV), t("b").reshape(N, self.HV)
            pay = self.payload[l].view(-1, T, self.width)
            for i, r in enumerate(rows):  # the raw payload rows, as TokenSpeed's QKV split stores them
                s = slice(r.token_offset, r.token_offset + r.T)
                pay[i, : r.T] = torch.cat([k[s].reshape(r.T, -1), v[s].reshape(r.T, -1), a[s], b[s]], dim=1)
            out = torch.zeros(N, self.HV, self.V, dtype=self.act, device=self.dev)
            for width in sorted({r.T for r in rows if r.T > 0}):
                group = [i for i, r in enumerate(rows) if r.T == width]
                tok = torch.cat([torch.arange(rows[i].token_offset, rows[i].token_offset + width) for i in group]).to(self.dev)
                if self.stride == self.E:
                    pool, idx = self._pool_vk(l), [read[i] for i in group]
                else:  # a bitwise gather of the read checkpoints into a contiguous pool the launcher can address
                    pool = torch.zeros(len(group), self.HV, self.V, self.K, dtype=self.state, device=self.dev)
                    for j, i in enumerate(group):
                        if read[i] >= 0:
                            pool[j] = self._pool_vk(l)[read[i]]
                    idx = [j if read[i] >= 0 else -1 for j, i in enumerate(group)]
                B = len(group)
                o = self.peer.triton_gdn_decode_mtp(
                    q[tok].reshape(B, width, self.H, self.K), k[tok].reshape(B, width, self.H, self.K),
                    v[tok].reshape(B, width, self.HV, self.V), A_log=self.A_log[l],
                    a=a[tok].reshape(B, width, self.HV), dt_bias=self.dt_bias[l], b=b[tok].reshape(B, width, self.HV),
                    initial_state=pool, initial_state_indices=torch.tensor(idx, dtype=torch.int32, device=self.dev),
                    scale=self.scale, disable_state_update=True, use_qk_l2norm=True)
                out[tok] = o.reshape(B * width, self.HV, self.V)
            outs.append(out)
        pre = [not r.is_pad and r.is_prefill for r in rows]
        self._replay([read[i] if p else -1 for i, p in enumerate(pre)], [r.slot if p else -1 for r, p in zip(rows, pre)],
                     [r.T if p else 0 for r, p in zip(rows, pre)])
        self.last = rows
        return outs

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: max(r.accepted - 1, 0)) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        # PAD rows read -1 and write -1 (TokenSpeed's graph-padding convention); prefill rows were committed by
        # the step. An n = 0 row with write_slot == slot stores its loaded state back unchanged (bitwise for F32
        # and BF16); with another write slot TokenSpeed would copy the read state there, which the protocol
        # forbids for n = 0: no write.
        ver = [not r.is_pad and not r.is_prefill for r in rows]
        self._replay([r.slot if v else -1 for r, v in zip(rows, ver)],
                     [r.write_slot if v and (n(r) > 0 or r.write_slot == r.slot) else -1 for r, v in zip(rows, ver)],
                     [n(r) if v else 0 for r, v in zip(rows, ver)])

    def copy_slot(self, src: int, dst: int) -> None:
        for l in range(self.L):
            blk = self.flat[l].view(self.S, self.stride)
            blk[dst, : self.E] = blk[src, : self.E]

    def committed_state(self, layer: int, slot: int):
        return self._pool_vk(layer)[slot].clone()

    def pool(self, layer: int):
        return self.flat[layer].view(self.S, self.stride)


def build(argv=None) -> TokenSpeedReplay:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    args = ap.parse_args(argv)
    src = common.peer_path(args.peer_src, ENV, "tokenspeed_replay")
    peer = load_peer(src)
    return common.wrap(TokenSpeedReplay(peer, common.device(args.device), args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
