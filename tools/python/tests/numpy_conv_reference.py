"""A plain NumPy (binary64) short convolution with its conv state, the "implementation under test" of the
conv.* fixtures (docs/fixture-format.md section 11), written from the documented formulas alone:

    E = [state | x_1 .. x_T]   per channel (state [C, W-1] channel-major, column 0 the oldest; x [T, C])
    y_t = act(bias + sum_j weight[:, j] * E[:, t-1+j])   act = SiLU z * sigmoid(z), or none
    state after token t = the last W-1 columns of [state | x_1 .. x_t], stored in the state dtype

Faults can be switched on to prove that the kit catches a wrong implementation:
    rollback_to_window  the commit keeps the state after the whole window T instead of the accepted n
    column_off_by_one   the committed window ends one token early (at n - 1; n = 0 keeps the state)
    flipped_kernel      the taps are applied in reverse (a convolution instead of torch's cross-correlation)
    no_activation       SiLU is skipped
"""

from __future__ import annotations

import numpy as np

from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits

FAULTS = ("rollback_to_window", "column_off_by_one", "flipped_kernel", "no_activation")


def _round(x, dtype):
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x32)).astype(np.float64)
    return x32.astype(np.float64)


def _extended(state, x):
    return np.concatenate([np.asarray(state, np.float64), np.asarray(x, np.float64).T], axis=1)  # [C, W-1+T]


def _state_after(state, x, t, dtype):
    W1 = state.shape[1]
    return _round(_extended(state, x)[:, t:t + W1], dtype)


def implementation(faults=()):
    """An adapter fn(fixture) -> {out.*: array} for conv.prefill, conv.update and conv.commit."""
    faults = set(faults)
    unknown = faults - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown faults {sorted(unknown)}")

    def fn(fx):
        c = fx.config["conv"]
        i, p = fx.inputs, fx.params
        state = np.asarray(i["state"], np.float64)
        x = np.asarray(i["x"], np.float64)
        T, C = x.shape
        W = c["kernel_size"]
        assert c["channels"] == C == 2 * c["H"] * c["K"] + c["HV"] * c["V"]
        sd = c["state_dtype"]
        if fx.op == "conv.commit":
            n = int(i["accepted"])
            if "rollback_to_window" in faults:
                n = T
            if "column_off_by_one" in faults:
                n = max(n - 1, 0)
            return {"out.state": state if n == 0 else _state_after(state, x, n, sd)}
        w = np.asarray(p["weight"], np.float64)
        if "flipped_kernel" in faults:
            w = w[:, ::-1]
        E = _extended(state, x)
        y = np.zeros((T, C))
        for t in range(T):
            z = (np.asarray(p["bias"], np.float64) if c["bias"] else 0.0) + np.sum(w * E[:, t:t + W], axis=1)
            if c["activation"] == "silu" and "no_activation" not in faults:
                z = z / (1.0 + np.exp(-z))
            y[t] = z
        out = {"out.y": _round(y, c["act_dtype"])}
        if fx.op == "conv.update":
            out["out.states"] = np.stack([_state_after(state, x, t, sd) for t in range(1, T + 1)])
        elif fx.op == "conv.prefill":
            out["out.state"] = _state_after(state, x, T, sd)
        else:
            raise NotImplementedError(fx.op)
        return out

    return fn
