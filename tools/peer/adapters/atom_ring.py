"""ATOM's ReplaySSM ring (`atom/model_ops/fla_ops/replayssm.py`: the fused rebuild + decode/verify kernels over a
checkpoint and (k, u, g) record buffers, the `replayssm_commit` cursor kernel) as a target, GDN or KDA (one op per
process, `--op`):

    replayssm fuzz --preset qwen3.5 --layers 2 --layout kv --l2norm div_sqrt --target exec:'python3 tools/peer/adapters/atom_ring.py --peer-src DIR --op gdn'
    replayssm fuzz --preset kimi-linear --layers 2 --target exec:'python3 tools/peer/adapters/atom_ring.py --peer-src DIR --op kda'

DIR holds atom/model_ops/fla_ops/{replayssm,op,utils}.py and atom/model_ops/attention_gdn.py at their paths in
ROCm/ATOM (README.md here). The package `__init__` files are not run (they import every op family and AMD's
aiter): the packages are made in memory with their directories as `__path__`, so `replayssm.py` loads its own
`op.py` and `utils.py` unchanged. `attention_gdn.py` (for ATOM's GDN gating kernel `fused_gdn_gating`) gets
stand-ins for its module-level imports of the layer (aiter's tensor-parallel group, the conv1d and chunk ops,
ATOM's env and forward context), none of which the gating kernel calls.

How the protocol maps onto the peer (design spec_ring):
* per layer a checkpoint pool [S, HV, K, V] (GDN, layout kv) or [S, HV, V, K] (KDA, layout vk) with the slot
  stride as its first stride (the kernels take `ckpt.stride(0)`), record buffers k [S, HV, cap, K] and u
  [S, HV, cap, V] in the record dtype, g [S, HV, cap] (GDN) or [S, HV, cap, K] (KDA) in fp32 (ATOM's
  allocation in gdn_attn.py), and one `write_pos` cursor per slot shared by the layers, as ATOM keeps it;
* cap = `--cache-len` (ATOM's default 16, raised to 2 * max_T when that is larger: `flush_threshold_ok`);
  the flush predicate's max_query_len is the setup's max_T in every launch and commit, as ATOM requires;
* step: one launch per layer over all rows (verify and prefill windows alike); a fresh prefill starts from a
  zeroed checkpoint and cursor 0 (ATOM's prefill runs its chunk kernel and parks the cursor at -1 instead);
  prefill rows are committed at once with accepted = T through `replayssm_commit`;
* commit: `replayssm_commit` with the accepted counts for every verify row of the step (accepted 0 for a row
  with write_slot -1: ATOM's cursor kernel must see every row its forward ran, because a flushing forward has
  already folded the records into the checkpoint);
* committed_state: the slot's checkpoint and its `write_pos` committed records are copied into a scratch
  one-slot pool whose record buffer is just long enough for ATOM's flush predicate to fire (cap' =
  max(2 * max_T, h + max_T) with h = write_pos, so h + 2 * max_T > cap'), and the peer's own launch runs one
  zero token on it: the flush it performs folds the records into the scratch checkpoint, which is the answer
  (cursor 0: the checkpoint itself, no record to fold). Every state value is the peer's.
* GDN gates: ATOM's `fused_gdn_gating` kernel, fed b widened to fp32 (an exact conversion) so that beta stays
  fp32 (ATOM's layer passes b in the activation dtype and gets beta rounded to it; the protocol's presets keep
  beta unrounded, docs/peer-conformance.md section 3.3). KDA computes its gate and beta inside the kernel.

Precision (the replay contraction `_replay_dot`, reached on every multi-token step and every flush): fp32
records -> one fp32 `tl.dot` (DOT_MODE 0), TF32 operands on NVIDIA GPUs: tier tf32; bf16 records ("replay on
the bf16 matrix cores", commit 2748d9e9) -> b_kw split into a bf16 hi/lo pair and two bf16 dots against the bf16
records (DOT_MODE 2), records k and u stored in bf16: tier bf16. Under Triton's CPU interpreter every dot is
IEEE fp32 for fp32 operands (`--tier fp32` is then the experiment; bf16 records are refused there).
"""

from __future__ import annotations

import importlib
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, TargetError, serve  # noqa: E402

ENV = "REPLAYSSM_ATOM_SRC"
FILES = ("atom/model_ops/fla_ops/replayssm.py", "atom/model_ops/fla_ops/op.py", "atom/model_ops/fla_ops/utils.py",
         "atom/model_ops/attention_gdn.py")


def _unused(name: str):
    def f(*_a, **_k):
        raise RuntimeError(f"{name} is a stand-in for an import of ATOM's layer; the adapter never calls it")
    return f


def _interpreter_exp():
    """Triton's CPU interpreter patches the `tl` module a kernel sees at launch, not an alias taken at import:
    op.py's `exp = tl.exp` would call the unpatched builtin. The interpreter runs a kernel as Python, so a plain
    function that looks `tl.exp` up at call time gets the patched one: the same operation, no kernel code."""
    import triton.language as tl

    return lambda x: tl.exp(x)


def load_peer(src: str):
    """(replayssm module, fused_gdn_gating) from ATOM's own files under `src`."""
    for rel in FILES:
        if not os.path.isfile(os.path.join(src, rel)):
            raise SystemExit(f"atom_ring: {os.path.join(src, rel)} is missing (see tools/peer/adapters/README.md)")
    for name, rel in (("atom", "atom"), ("atom.model_ops", "atom/model_ops"),
                      ("atom.model_ops.fla_ops", "atom/model_ops/fla_ops"), ("atom.model_ops.mamba_ops", None),
                      ("atom.utils", None), ("aiter", None), ("aiter.dist", None)):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(src, rel)] if rel else []
        sys.modules[name] = mod
    fla = sys.modules["atom.model_ops.fla_ops"]
    for n in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "gdn_decode_update_lossy_fast"):
        setattr(fla, n, _unused(n))
    stand_ins = {"aiter.dist.parallel_state": {"get_tp_group": _unused("get_tp_group")},
                 "atom.model_ops.mamba_ops.causal_conv1d": {"causal_conv1d_fn": _unused("causal_conv1d_fn"),
                                                            "causal_conv1d_update": _unused("causal_conv1d_update")},
                 "atom.utils.envs": {},
                 "atom.utils.forward_context": {"ForwardContext": object,
                                                "get_forward_context": _unused("get_forward_context")}}
    for name, attrs in stand_ins.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, mod)
    sys.modules["atom.utils"].envs = sys.modules["atom.utils.envs"]
    rs = importlib.import_module("atom.model_ops.fla_ops.replayssm")
    if os.environ.get("TRITON_INTERPRET") == "1":
        rs.exp = _interpreter_exp()
    gating = importlib.import_module("atom.model_ops.attention_gdn").fused_gdn_gating
    return rs, gating


class AtomRing(Target):
    def __init__(self, rs, gating, dev, op: str, records: str, cache_len: int, tier: str | None = None,
                 fault: str | None = None):
        import torch

        self.torch, self.rs, self.gating, self.dev = torch, rs, gating, dev
        self.op, self.rec_name, self.cache_len, self.tier, self.fault = op, records, cache_len, tier, fault

    def capabilities(self) -> dict:
        tier = self.tier or ("tf32" if self.rec_name == "F32" else "bf16")
        # K must be one tile (`triton.cdiv(K, BK) == 1`); every replay dot contracts over BH >= 16 records, so any
        # head size compiles (the UT route's K contraction is checked in setup)
        sizes = list(range(1, 257))
        caps = {"name": f"atom-replayssm-{self.op}(records {self.rec_name}, cache_len {self.cache_len})"
                        + (f"+{self.fault}" if self.fault else ""),
                "design": "spec_ring", "tier": tier, "bit_exact": False, "pad_outputs_zero": False,
                "copy_slot": True, "ops": [self.op], "state_dtypes": ["F32", "BF16"], "act_dtypes": ["F32", "BF16"],
                "round_beta_to_act": False, "K": sizes, "V": sizes, "max_T": 16}
        if self.op == "gdn":
            # [slot, HV, K, V] checkpoint; l2norm x / sqrt(sum + 1e-6) in the serial and UT routes (the T == 1
            # route multiplies by 1 / sqrt: one rounding apart)
            caps.update(layouts=["kv"], l2norms=["div_sqrt"])
        else:
            # [slot, HV, V, K] checkpoint; l2norm x * rsqrt(sum + 1e-6); both gates of `_kda_gate`
            caps.update(layouts=["vk"], l2norms=["rsqrt_mul"], kda_gates=["softplus", "lower_bound_sigmoid"])
        return caps

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        cfg = setup["config"]
        if cfg["op"] != self.op:
            raise TargetError("setup.config.op", f"this process serves {self.op} (--op)")
        if abs(cfg.get("l2_eps", 1e-6) - 1e-6) > 1e-12:
            raise TargetError("setup.config.l2_eps", "ATOM's kernels add 1e-6 inside their l2norm")
        self.L, self.S, self.T = cfg["num_layers"], setup["num_slots"], setup["max_T"]
        self.H, self.HV, self.K, self.V = cfg["H"], cfg["HV"], cfg["K"], cfg["V"]
        self.E = self.HV * self.K * self.V
        self.stride = setup["slot_stride"] or self.E
        self.act = common.torch_dtype(cfg["act_dtype"])
        self.state = common.torch_dtype(cfg["state_dtype"])
        self.scale = cfg.get("q_scale") or self.K ** -0.5
        self.lower_bound = cfg["lower_bound"] if cfg.get("kda_gate") == "lower_bound_sigmoid" else None
        if self.op == "gdn" and self.T >= self.rs.UT_MIN_QUERY_LEN and self.K < 16 and self.dev.type == "cuda":
            raise TargetError("setup.config.K", f"is {self.K}: at max_T >= {self.rs.UT_MIN_QUERY_LEN} ATOM takes its UT "
                                                "route, whose tl.dot contracts over K and needs K >= 16 on a GPU")
        self.cap = max(self.cache_len, 2 * self.T)
        self.rec = common.torch_dtype(self.rec_name)
        self.flat = [torch.full((self.S * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
                     for _ in range(self.L)]
        self.bufs = [self._buffers(self.S, self.cap) for _ in range(self.L)]
        self.write_pos = torch.zeros(self.S, dtype=torch.int32, device=self.dev)
        self.A_log = [torch.as_tensor(p[0], dtype=torch.float32).to(self.dev).contiguous() for p in params]
        self.dt_bias = [torch.as_tensor(p[1], dtype=torch.float32).to(self.dev).reshape(-1).contiguous() for p in params]
        self.last = None

    def _buffers(self, slots: int, cap: int):
        torch = self.torch
        gk = (self.K,) if self.op == "kda" else ()
        return (torch.zeros(slots, self.HV, cap, self.K, dtype=self.rec, device=self.dev),
                torch.zeros(slots, self.HV, cap, self.V, dtype=self.rec, device=self.dev),
                torch.zeros((slots, self.HV, cap) + gk, dtype=torch.float32, device=self.dev))

    def _ckpt(self, flat, slots: int):
        a, b = (self.K, self.V) if self.op == "gdn" else (self.V, self.K)
        return self.torch.as_strided(flat, (slots, self.HV, a, b), (self.stride, a * b, b, 1))

    # --- storage -------------------------------------------------------------------------------------------
    def tensors(self) -> list:
        return self.flat + [t for b in self.bufs for t in b] + [self.write_pos]

    # --- the peer's launches -------------------------------------------------------------------------------
    def _launch(self, l: int, x: dict, ckpt, bufs, write_pos, slot_idx, cu, N: int):
        torch = self.torch
        t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
        q = t("q").reshape(1, N, self.H, self.K)
        k = t("k").reshape(1, N, self.H, self.K)
        v = t("v").reshape(1, N, self.HV, self.V)
        bk, bu, bg = bufs
        if self.op == "gdn":
            a = t("a").reshape(N, self.HV)
            b = t("b").reshape(N, self.HV).float()  # exact widening: beta stays fp32 (module docstring)
            g, beta = self.gating(self.A_log[l], a, b, self.dt_bias[l])
            return self.rs.replayssm_gated_delta_rule(q, k, v, g, beta, ckpt, bk, bu, bg, write_pos, slot_idx, cu,
                                                      self.T, scale=self.scale, use_qk_l2norm_in_kernel=True,
                                                      is_kda=False, route="auto")
        a = t("a").reshape(1, N, self.HV, self.K)
        b = t("b").reshape(1, N, self.HV)
        return self.rs.replayssm_sigmoid_gating_delta_rule(q, k, v, a, b, self.A_log[l], self.dt_bias[l], ckpt, bk,
                                                          bu, bg, write_pos, slot_idx, cu, self.T, scale=self.scale,
                                                          use_qk_l2norm_in_kernel=True,
                                                          lower_bound=self.lower_bound)

    def _commit(self, slots: list, accepted: list) -> None:
        if not slots:
            return
        torch = self.torch
        s = torch.tensor(slots, dtype=torch.int32, device=self.dev)
        n = torch.tensor(accepted, dtype=torch.int32, device=self.dev)
        self.rs.replayssm_commit(self.write_pos, s, n, self.T, self.cap)

    # --- the protocol's commands ---------------------------------------------------------------------------
    def allocate(self, slot: int) -> None:
        self.write_pos[slot] = 0

    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N = inputs[0]["q"].shape[0]
        common.check_rows(rows, N, self.S, self.T)
        common.check_in_place(rows, "ATOM's ring")
        for r in rows:
            if not r.is_pad and r.is_prefill and r.fresh:
                for f in self.flat:
                    f[r.slot * self.stride: r.slot * self.stride + self.E] = 0
                self.write_pos[r.slot] = 0
        slot_idx = torch.tensor([-1 if r.is_pad else r.slot for r in rows], dtype=torch.int32, device=self.dev)
        cu = torch.tensor([0] + [sum(r.T for r in rows[: i + 1]) for i in range(len(rows))], dtype=torch.int32,
                          device=self.dev)
        outs = []
        for l, x in enumerate(inputs):
            if N == 0:
                outs.append(torch.zeros(0, self.HV, self.V, dtype=self.act, device=self.dev))
                continue
            o = self._launch(l, x, self._ckpt(self.flat[l], self.S), self.bufs[l], self.write_pos, slot_idx, cu, N)
            outs.append(o.reshape(N, self.HV, self.V))
        pre = [(r.slot, r.T) for r in rows if not r.is_pad and r.is_prefill]
        self._commit([s for s, _ in pre], [n for _, n in pre])
        self.last = rows
        return outs

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: max(r.accepted - 1, 0)) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        ver = [(r.slot, n(r) if r.write_slot != -1 else 0) for r in rows if not r.is_pad and not r.is_prefill]
        self._commit([s for s, _ in ver], [a for _, a in ver])

    def copy_slot(self, src: int, dst: int) -> None:
        for l in range(self.L):
            f = self.flat[l]
            f[dst * self.stride: dst * self.stride + self.E] = f[src * self.stride: src * self.stride + self.E]
            for t in self.bufs[l]:
                t[dst] = t[src]
        self.write_pos[dst] = self.write_pos[src]

    def committed_state(self, layer: int, slot: int):
        torch = self.torch
        f = self.flat[layer]
        ckpt = f[slot * self.stride: slot * self.stride + self.E]
        h = int(self.write_pos[slot])
        if h <= 0:  # no committed record: the checkpoint is the state
            return ckpt.reshape(self.HV, -1).clone().reshape(self._shape())
        cap = max(2 * self.T, h + self.T)  # h + 2 * max_T > cap: ATOM's flush predicate fires
        bufs = self._buffers(1, cap)
        for dst, src in zip(bufs, self.bufs[layer]):
            dst[0, :, :h] = src[slot, :, :h]
        flat = torch.zeros(self.stride, dtype=self.state, device=self.dev)
        flat[: self.E] = ckpt
        wp = torch.tensor([h], dtype=torch.int32, device=self.dev)
        one = torch.zeros(1, dtype=torch.int32, device=self.dev)
        cu = torch.tensor([0, 1], dtype=torch.int32, device=self.dev)
        a_w = self.K if self.op == "kda" else 1
        zero = {"q": torch.zeros(1, self.H, self.K), "k": torch.zeros(1, self.H, self.K),
                "v": torch.zeros(1, self.HV, self.V), "a": torch.zeros(1, self.HV, a_w), "b": torch.zeros(1, self.HV)}
        self._launch(layer, zero, self._ckpt(flat, 1), bufs, wp, one, cu, 1)
        return flat[: self.E].reshape(self._shape()).clone()

    def _shape(self):
        return (self.HV, self.K, self.V) if self.op == "gdn" else (self.HV, self.V, self.K)

    def pool(self, layer: int):
        return self.flat[layer].view(self.S, self.stride)


def build(argv=None) -> AtomRing:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    ap.add_argument("--op", choices=("gdn", "kda"), default="gdn",
                    help="the path served (one per process: GDN's checkpoint is [K, V], KDA's [V, K])")
    ap.add_argument("--records", choices=("F32", "BF16"), default="F32",
                    help="k/u record dtype: it picks ATOM's replay dot (fp32 dot, or bf16 hi/lo dots) and the tier")
    ap.add_argument("--cache-len", type=int, default=16, help="record buffer length (ATOM's default 16)")
    ap.add_argument("--tier", choices=("fp32", "tf32", "bf16"), default=None,
                    help="claim this tier instead of the one the record dtype implies (experiments)")
    args = ap.parse_args(argv)
    if args.cache_len < 2:
        ap.error("--cache-len must be at least 2")
    if args.records == "BF16" and os.environ.get("TRITON_INTERPRET") == "1":
        # Triton 3.6's interpreter multiplies the raw 16-bit patterns of bf16 dot operands (a 16x16 tl.dot of
        # N(0, 1) values answers 2.5e10), so bf16 records (ATOM's bf16 dots) can only be judged compiled
        ap.error("--records BF16 needs a GPU: the CPU interpreter's tl.dot is wrong for bf16 operands")
    src = common.peer_path(args.peer_src, ENV, "atom_ring")
    rs, gating = load_peer(src)
    return common.wrap(AtomRing(rs, gating, common.device(args.device), args.op, args.records, args.cache_len,
                                args.tier, args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
