"""FLA's chunked forward (`chunk_gated_delta_rule` for GDN, `chunk_kda` for KDA) on the static fixtures of op
`chunked` (docs/fixture-format.md), through the protocol's `fixture` command:

    replayssm check --target exec:'python3 tools/peer/adapters/fla_chunk.py --peer-src DIR --act F32' fixtures/golden

DIR holds flash-linear-attention's `fla/` package and `einops` (tools/peer/adapters/README.md). The target runs
fixtures only (`fixture_ops: ["chunked"]`); FLA's lifecycle path is `fla_spec.py`.

What the adapter passes (bytes and layouts only; every value is the kernel's): q, k, v [1, T, ...] in the
activation dtype; the raw gate `a` with `use_gate_in_kernel=True` and the layer's A_log and dt_bias (GDN: [HV];
KDA: dt_bias flattened to [HV*K]); the raw `b` with `use_beta_sigmoid_in_kernel=True`; the l2norm in-kernel
(`l2norm_fwd`: x * (1 / sqrt(sum + 1e-6)), form rsqrt_mul); the fixture's initial state widened to float32
(FLA requires an fp32 h0 for KDA and keeps its state in fp32), `state_v_first` for layout vk, and the chunk
size C of the fixture (`chunk_size`; GDN takes 16, 32, 64; KDA 32, 64, so a C = 16 KDA fixture runs at 32: the
chunk size changes the order of the sums, not the result a kernel must reach). The KDA gate
lower_bound_sigmoid is FLA's `safe_gate=True, lower_bound=...` form; softplus is its default.
The answer: the outputs as stored (activation dtype, widened to F32 for the fixture's F32 `out.o`) and the
final state (fp32), rounded once to the fixture's state dtype by the kit.

Precision: the chunk kernels compute their intra-chunk matrices, the chunk states and the outputs with `tl.dot`
without `input_precision`: TF32 operands on NVIDIA GPUs for fp32 inputs (tier tf32); with bf16 inputs the
operands, the per-chunk states h, the corrected values v_new and the normalised q, k are stored in bf16 (tier
bf16). One activation dtype per process (`--act`), since it decides the tier.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, TargetError, serve  # noqa: E402

ENV = "REPLAYSSM_FLA_SRC"


class FlaChunk(Target):
    def __init__(self, dev, act: str, tier: str | None = None):
        import torch

        self.torch, self.dev, self.act_name, self.tier = torch, dev, act, tier

    def capabilities(self) -> dict:
        tier = self.tier or ("tf32" if self.act_name == "F32" else "bf16")
        return {"name": f"fla-chunk(act {self.act_name})", "design": "other", "tier": tier, "bit_exact": False,
                "ops": ["gdn", "kda"], "layouts": ["kv", "vk"], "act_dtypes": [self.act_name],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["rsqrt_mul"], "round_beta_to_act": False,
                "kda_gates": ["softplus", "lower_bound_sigmoid"], "fixture_ops": ["chunked"]}

    def setup(self, setup: dict, params: list) -> None:
        raise TargetError("setup", "this target runs the `chunked` fixtures only (fla_spec.py runs campaigns)")

    def fixture(self, op: str, config: dict, inputs: dict) -> dict:
        torch = self.torch
        if op != "chunked":
            raise TargetError("fixture_op", f"{op!r} is not run by FLA's chunk kernels")
        m = config["model"]
        C = (config.get("args") or {}).get("chunk")
        if type(C) is not int or C < 1:
            raise TargetError("config.args.chunk", f"must be a positive integer, got {C!r}")
        if abs(m.get("l2_eps", 1e-6) - 1e-6) > 1e-12:
            raise TargetError("config.model.l2_eps", "FLA's l2norm_fwd adds 1e-6")
        kda = m["op"] == "kda"
        HV, K, V = m["HV"], m["K"], m["V"]
        act = common.torch_dtype(m["act_dtype"])

        def need(name):
            if name not in inputs:
                raise TargetError(name, "is missing from the command")
            return torch.as_tensor(inputs[name])

        q, k, v, a, b = (need("in." + n).to(self.dev, act)[None].contiguous() for n in ("q", "k", "v", "a", "b"))
        T = q.shape[1]
        vk = m["layout"] == "vk"
        h0 = need("in.state").to(self.dev, torch.float32).reshape(1, HV, *((V, K) if vk else (K, V))).contiguous()
        A_log = need("param.A_log").to(self.dev, torch.float32).reshape(HV).contiguous()
        dt_bias = need("param.dt_bias").to(self.dev, torch.float32)
        scale = m.get("q_scale") or K ** -0.5
        common_kw = dict(scale=scale, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                         use_beta_sigmoid_in_kernel=True, state_v_first=vk, use_gate_in_kernel=True, A_log=A_log)
        if kda:
            from fla.ops.kda import chunk_kda

            lb = m.get("kda_gate") == "lower_bound_sigmoid"
            o, ht = chunk_kda(q, k, v, a.reshape(1, T, HV, K), b.reshape(1, T, HV),
                              dt_bias=dt_bias.reshape(HV * K).contiguous(), chunk_size=max(C, 32) if C <= 64 else 64,
                              safe_gate=lb, lower_bound=m.get("lower_bound") if lb else None, **common_kw)
        else:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule

            if C not in (16, 32, 64):
                raise TargetError("config.args.chunk", f"is {C}: FLA's GDN chunk takes 16, 32 or 64")
            o, ht = chunk_gated_delta_rule(q, k, v, a.reshape(1, T, HV), b.reshape(1, T, HV),
                                           dt_bias=dt_bias.reshape(HV).contiguous(), chunk_size=C, **common_kw)
        return {"out.o": o[0].float(), "out.state": ht[0].float()}


def interpreter_autotune_shim() -> None:
    """Triton's CPU interpreter only: an autotuned kernel takes its first configuration without a benchmark (the
    interpreter has no driver to time launches with, and FLA's chunk kernels are autotuned). A configuration
    chooses tile sizes, warps and stages, never a formula; on a GPU the autotuner runs unchanged."""
    from triton.runtime.autotuner import Autotuner

    Autotuner._bench = lambda self, *args, config, **meta: [0.0, 0.0, 0.0]


def interpreter_loop_shim() -> None:
    """Triton's CPU interpreter only: every loaded FLA op module gets common.interpreter_range (its kernels widen
    loop counters with `i_t.to(tl.int64)`); an index type, never a value."""
    import fla.ops.gated_delta_rule  # noqa: F401  (loads the chunk modules)
    import fla.ops.kda  # noqa: F401

    for name, mod in list(sys.modules.items()):
        if name.startswith("fla.ops") and mod is not None:
            mod.range = common.interpreter_range


def build(argv=None) -> FlaChunk:
    ap = common.base_args(__doc__, ENV)
    ap.add_argument("--act", choices=("F32", "BF16"), default="F32",
                    help="activation dtype served (one per process: it decides the tier)")
    ap.add_argument("--tier", choices=("fp32", "tf32", "bf16"), default=None,
                    help="claim this tier instead of the one the dtype implies (TRITON_F32_DEFAULT=ieee with "
                         "--tier fp32: the experiment that separates TF32 from anything else)")
    args = ap.parse_args(argv)
    common.peer_path(args.peer_src, ENV, "fla_chunk")
    dev = common.device(args.device)
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_autotune_shim()
        interpreter_loop_shim()
    return FlaChunk(dev, args.act, args.tier)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
