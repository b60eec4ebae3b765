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
PROJECT_VERSION = "0.1.0"


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
