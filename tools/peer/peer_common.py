"""Shared pieces of the peer fixture scripts: configs in the project's JSON form, tensor conversion, library
versions, tolerances and the fixture writer (through the Python kit in tools/python).

Every peer fixture records in its metadata the library versions (peer.versions), the public functions that
produced its expected tensors (peer.functions), how the peer was driven (peer.notes) and why its tolerances
are what they are (peer.tolerance_note).
"""

from __future__ import annotations

import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import replayssm_kit as rk  # noqa: E402

OUT_DIR = os.path.join(REPO, "fixtures", "peer")
PROJECT_VERSION = rk.__version__  # the repository's VERSION file (docs/packaging.md, "One version")


def versions(*extra_modules) -> dict:
    v = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    import safetensors

    v["safetensors"] = safetensors.__version__
    for name in ("transformers",) + tuple(extra_modules):
        try:
            mod = __import__(name)
            v[name] = getattr(mod, "__version__", "unknown")
        except ImportError:
            pass
    return v


def model_config(name, op, H, HV, K, V, *, act="F32", state="F32", layout="kv", l2norm="rsqrt_mul",
                 round_beta=False, kda_gate="softplus", lower_bound=-5.0) -> dict:
    """The ModelConfig JSON (core/src/config.cpp to_json), every field spelled out."""
    return {"name": name, "op": op, "H": H, "HV": HV, "K": K, "V": V, "num_layers": 1, "l2norm": l2norm,
            "l2_eps": 1e-6, "q_scale": 0.0, "round_beta_to_act": round_beta, "kda_gate": kda_gate,
            "lower_bound": lower_bound, "act_dtype": act, "state_dtype": state, "layout": layout}


def case_config(name, op, H, HV, K, V, chunk=None, **model_fields) -> dict:
    """A recurrent / chunked fixture's config: {"model": model_config(...), "args": {"chunk": chunk} or {}}. The
    model is named after the fixture name's part before "__"; model_fields go to model_config."""
    return {"model": model_config(name.split("__")[0], op, H, HV, K, V, **model_fields),
            "args": {"chunk": chunk} if chunk else {}}


def delta_rule_inputs(seed, T, H, HV, K, V, kda=False):
    """Seeded fp32 inputs of one recurrent / chunked case, drawn in this order from torch_generator(seed):
    q, k [1, T, H, K]; v [1, T, HV, V]; a [1, T, HV] (GDN) or [1, T, HV, K] (KDA); b [1, T, HV];
    A_log = log(1 + 15 U[0,1)) [HV] (exp(A_log) in [1, 16), as FLA's gate tests); dt_bias [HV] (GDN) or
    [HV * K] (KDA); h0 [1, HV, K, V]. Returns (q, k, v, a, b, A_log, dt_bias, h0)."""
    g = torch_generator(seed)
    q = torch.randn(1, T, H, K, generator=g)
    k = torch.randn(1, T, H, K, generator=g)
    v = torch.randn(1, T, HV, V, generator=g)
    a = torch.randn(1, T, HV, K, generator=g) if kda else torch.randn(1, T, HV, generator=g)
    b = torch.randn(1, T, HV, generator=g)
    A_log = torch.log(1 + 15 * torch.rand(HV, generator=g))
    dt_bias = torch.randn(HV * K if kda else HV, generator=g)
    h0 = torch.randn(1, HV, K, V, generator=g)
    return q, k, v, a, b, A_log, dt_bias, h0


def layer_tensors(q, k, v, a, b, h0, A_log, dt_bias, o, state, act="F32") -> dict:
    """The tensors of a recurrent / chunked fixture, name -> (tensor, dtype). q, k, v, a, b, h0, o and state carry
    a batch dimension of 1, which the fixture drops; in.q/k/v/a/b are stored in `act`, everything else in F32
    (o widened exactly with .float())."""
    return {
        "in.q": (q[0], act), "in.k": (k[0], act), "in.v": (v[0], act), "in.a": (a[0], act), "in.b": (b[0], act),
        "in.state": (h0[0], "F32"), "param.A_log": (A_log, "F32"), "param.dt_bias": (dt_bias, "F32"),
        "out.o": (o[0].float(), "F32"), "out.state": (state[0], "F32"),
    }


class TorchDeltaRule:
    """The pure torch recurrent and chunked delta-rule functions of a transformers modeling module, reached
    through __wrapped__ so that the hub kernel dispatch around them (optional kernels) never replaces them."""

    def __init__(self, module, recurrent: str, chunked: str):
        """module: the modeling module; recurrent, chunked: the names of its two functions."""
        self.functions = {}
        for op, attr in (("recurrent", recurrent), ("chunked", chunked)):
            fn = getattr(module, attr)
            self.functions[op] = (getattr(fn, "__wrapped__", fn), f"{module.__name__}.{attr}")

    def __call__(self, op, q, k, v, g, beta, h0, chunk=None):
        """Runs op ("recurrent" or "chunked", then with chunk_size=chunk) with use_qk_l2norm_in_kernel=True from
        initial state h0, without autograd. Returns (o, final state, dotted name of the function called)."""
        fn, name = self.functions[op]
        kw = {"chunk_size": chunk} if op == "chunked" else {}
        with torch.no_grad():
            o, state = fn(q, k, v, g=g, beta=beta, **kw, initial_state=h0, output_final_state=True,
                          use_qk_l2norm_in_kernel=True)
        return o, state, name


def as_stored(t, dtype: str):
    """(array, dtype) for the kit's writer; BF16 keeps the exact bit patterns of a torch.bfloat16 tensor."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        if dtype == "BF16":
            if t.dtype != torch.bfloat16:
                raise ValueError("BF16 fixture tensors must come from bfloat16 tensors (no silent rounding)")
            return t.view(torch.int16).numpy().view(np.uint16), "BF16"
        if dtype == "F32" and t.dtype != torch.float32:
            t = t.float()  # exact widening (bf16 -> f32) only
        return t.numpy(), dtype
    return np.asarray(t), dtype


def scale_of(t) -> float:
    return float(t.detach().abs().max()) if isinstance(t, torch.Tensor) else float(np.abs(t).max())


def nice(x: float) -> float:
    """Rounds a bound up to one significant digit, so the spelling stays short."""
    if x <= 0:
        return 0.0
    e = np.floor(np.log10(x))
    m = np.ceil(x / 10 ** e)
    return float(f"{m * 10 ** e:.1g}")


def f32_tolerance(ref, rel_atol: float, rtol: float) -> rk.Tolerance:
    """allclose with an absolute floor proportional to the tensor's largest magnitude."""
    return rk.Tolerance("allclose", atol=nice(rel_atol * max(scale_of(ref), 1e-30)), rtol=rtol)


def write(name, op, config, tensors, tolerance, *, seed, generator, functions, notes, tolerance_note,
          extra_versions=(), subdir="") -> str:
    """Writes fixtures/peer/<subdir>/<name>.safetensors. tensors: name -> (torch tensor or array, dtype)."""
    directory = os.path.join(OUT_DIR, subdir) if subdir else OUT_DIR
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name + ".safetensors")
    stored = {k: as_stored(v, dt) for k, (v, dt) in tensors.items()}
    rk.save_fixture(
        path, op, config, stored, tolerance, seed=seed, precision="f32", generator=generator,
        generator_version=PROJECT_VERSION,
        extra_metadata={
            "peer.versions": json.dumps(versions(*extra_versions), sort_keys=True),
            "peer.functions": json.dumps(functions),
            "peer.notes": notes,
            "peer.tolerance_note": tolerance_note,
            "peer.script": "tools/peer/" + os.path.basename(sys.argv[0]),
        })
    print(f"wrote {os.path.relpath(path, REPO)}")
    return path


def torch_generator(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


GENERATOR = f"torch.Generator(cpu).manual_seed + randn/rand (torch {torch.__version__})"
