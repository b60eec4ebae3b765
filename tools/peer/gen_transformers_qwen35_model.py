"""Peer fixtures from a real model path: a small random-weight Qwen3.5 text model built from a config (nothing
is downloaded; HF_HUB_OFFLINE=1), with the real linear-attention head layout (H = 16 key heads, HV = 32 value
heads, K = V = 128), run in fp32.

Forward hooks on the first GDN layer's in_proj_a / in_proj_b give the raw a and b; the layer's delta-rule
calls are intercepted (the module globals torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule are
replaced by recorders around the pure torch functions) to capture q, k, v exactly as the layer hands them
over (after projection, causal conv, SiLU and the GVA repeat; the fixture keeps the H key heads), the core
output and the final state. A_log and dt_bias are the layer's parameters. So every input comes from the real
layer code.

Two fixtures: the prefill (chunked path, zero initial state) and the following decode steps (one recurrent
call per token, state carried by the model's cache; stored as one recurrent case of T tokens starting from the
state the prefill left, which is the same computation).

Run: HF_HUB_OFFLINE=1 python tools/peer/gen_transformers_qwen35_model.py
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

import peer_common as pc
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

TORCH_REC = getattr(mq.torch_recurrent_gated_delta_rule, "__wrapped__", mq.torch_recurrent_gated_delta_rule)
TORCH_CHUNK = getattr(mq.torch_chunk_gated_delta_rule, "__wrapped__", mq.torch_chunk_gated_delta_rule)

TOL = ("out.o and out.state: allclose(atol = {ao:g} * max|ref| rounded up, rtol = {r:g}), as the standalone "
       "transformers fixtures: the model runs in fp32, so the layer's delta rule is a binary32 computation "
       "compared with the binary64 reference.")

SEED = 401
PREFILL = 16
DECODE = 4


def build_model():
    cfg = Qwen3_5TextConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, max_position_embeddings=256)
    torch.manual_seed(SEED)
    model = mq.Qwen3_5ForCausalLM(cfg).float().eval()
    return cfg, model


def main():
    torch.set_num_threads(2)
    cfg, model = build_model()
    layer = model.model.layers[0].linear_attn
    assert isinstance(layer, mq.Qwen3_5GatedDeltaNet)
    calls = []
    proj = {"a": [], "b": []}
    layer.in_proj_a.register_forward_hook(lambda m, i, o: proj["a"].append(o.detach().clone()))
    layer.in_proj_b.register_forward_hook(lambda m, i, o: proj["b"].append(o.detach().clone()))

    def recorder(kind, fn):
        def wrapped(query, key, value, g, beta, **kw):
            init = kw.get("initial_state")
            o, s = fn(query, key, value, g=g, beta=beta, **kw)
            calls.append({"kind": kind, "q": query.detach().clone(), "k": key.detach().clone(),
                          "v": value.detach().clone(), "g": g.detach().clone(), "beta": beta.detach().clone(),
                          "init": None if init is None else init.detach().clone(), "o": o.detach().clone(),
                          "state": s.detach().clone(), "chunk": kw.get("chunk_size", 64)})
            return o, s
        return wrapped

    mq.torch_chunk_gated_delta_rule = recorder("chunk", TORCH_CHUNK)
    mq.torch_recurrent_gated_delta_rule = recorder("recurrent", TORCH_REC)

    g = pc.torch_generator(SEED)
    ids = torch.randint(0, cfg.vocab_size, (1, PREFILL + DECODE), generator=g)
    with torch.no_grad():
        out = model(input_ids=ids[:, :PREFILL], use_cache=True)
        cache = out.past_key_values
        for t in range(DECODE):
            out = model(input_ids=ids[:, PREFILL + t : PREFILL + t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
    assert [c["kind"] for c in calls] == ["chunk"] + ["recurrent"] * DECODE, [c["kind"] for c in calls]

    H, HV, K, V = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    G = HV // H
    A_log = layer.A_log.detach().float()
    dt_bias = layer.dt_bias.detach().float()
    versions_note = ("Qwen3_5ForCausalLM(Qwen3_5TextConfig(hidden 256, 2 layers [linear_attention, full_attention], "
                     "linear heads 16/32, K = V = 128, vocab 512)), torch.manual_seed(401) weights, fp32, "
                     "random input ids; captured from model.model.layers[0].linear_attn. ")

    def key_heads(x):  # the layer repeated q/k to the value heads; keep one copy per key head
        assert torch.equal(x, x[:, :, ::G].repeat_interleave(G, dim=2))
        return x[:, :, ::G]

    def fixture(name, op, sel, a, b, init, args, fn, note):
        q = torch.cat([key_heads(c["q"]) for c in sel], dim=1)[0]
        k = torch.cat([key_heads(c["k"]) for c in sel], dim=1)[0]
        v = torch.cat([c["v"] for c in sel], dim=1)[0]
        o = torch.cat([c["o"] for c in sel], dim=1)[0]
        state = sel[-1]["state"][0]
        # The layer's own gates agree with what the reference recomputes from a, b, A_log, dt_bias.
        beta = torch.cat([c["beta"] for c in sel], dim=1)[0]
        assert torch.equal(beta, b.sigmoid())
        config = {"model": pc.model_config("hf-qwen3_5-model", "gdn", H, HV, K, V, act="F32", layout="kv",
                                           l2norm="rsqrt_mul"), "args": args}
        tensors = {"in.q": (q, "F32"), "in.k": (k, "F32"), "in.v": (v, "F32"), "in.a": (a, "F32"),
                   "in.b": (b, "F32"), "in.state": (init, "F32"), "param.A_log": (A_log, "F32"),
                   "param.dt_bias": (dt_bias, "F32"), "out.o": (o, "F32"), "out.state": (state, "F32")}
        tol = {"out.o": pc.f32_tolerance(o, 2e-6, 1e-5), "out.state": pc.f32_tolerance(state, 2e-6, 1e-5)}
        pc.write(name, op, config, tensors, tol, seed=SEED, generator="Qwen3_5ForCausalLM forward (torch.manual_seed)",
                 functions=[fn, "transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward"],
                 notes=versions_note + note, tolerance_note=TOL.format(ao=2e-6, r=1e-5), subdir="transformers")

    prefill = calls[0]
    fixture(f"hf-qwen3_5-model__chunked__prefill_H16_HV32_K128_T{PREFILL}", "chunked", [prefill],
            proj["a"][0][0], proj["b"][0][0], torch.zeros(HV, K, V), {"chunk": prefill["chunk"]},
            "transformers.models.qwen3_5.modeling_qwen3_5.torch_chunk_gated_delta_rule",
            "Prefill: the chunked path with no initial state (zeros) and the default chunk size.")
    dec = calls[1:]
    assert torch.equal(dec[0]["init"], prefill["state"])
    fixture(f"hf-qwen3_5-model__recurrent__decode_H16_HV32_K128_T{DECODE}", "recurrent", dec,
            torch.cat(proj["a"][1:], dim=1)[0], torch.cat(proj["b"][1:], dim=1)[0], dec[0]["init"][0], {},
            "transformers.models.qwen3_5.modeling_qwen3_5.torch_recurrent_gated_delta_rule",
            f"Decode: {DECODE} single-token forwards after the prefill, each one recurrent call from the cached "
            "state; stored as one recurrent case starting from the state the prefill left.")


if __name__ == "__main__":
    main()
