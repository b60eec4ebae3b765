"""A plain NumPy (binary64) GDN/KDA recurrence used by the kit's tests as the "implementation under test".

It reads everything from the fixture: the model configuration (config["model"]) decides the head mapping,
the l2norm form, the gate, beta rounding, the state layout and the state dtype. Faults can be switched on
to prove that the kit catches a wrong implementation.
"""

from __future__ import annotations

import numpy as np

from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits


def _round(x, dtype):
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x32)).astype(np.float64)
    return x32.astype(np.float64)


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


class Gdn:
    def __init__(self, model: dict, faults=()):
        self.m = model
        self.faults = set(faults)
        self.H, self.HV, self.K, self.V = model["H"], model["HV"], model["K"], model["V"]
        self.kda = model.get("op", "gdn") == "kda"
        self.scale = model.get("q_scale", 0.0) or 1.0 / np.sqrt(self.K)

    def key_head(self, hv):
        G = self.HV // self.H
        return hv % self.H if "modulo_gva" in self.faults else hv // G

    def norm(self, x):
        form = self.m.get("l2norm", "rsqrt_mul")
        if form == "none" or "no_l2norm" in self.faults:
            return x
        eps = float(np.float32(self.m.get("l2_eps", 1e-6)))
        return x / np.sqrt(np.sum(x * x) + eps)

    def to_kv(self, s):
        return s if self.m.get("layout", "vk") == "kv" else np.swapaxes(s, -1, -2)

    def from_kv(self, s):
        return self.to_kv(s)

    def run(self, q, k, v, a, b, A_log, dt_bias, state):
        """q, k [T,H,K]; v [T,HV,V]; a [T,HV] or [T,HV,K]; b [T,HV]; state in the fixture layout.
        Returns o [T,HV,V] and the list of states after each token (KV layout)."""
        T = v.shape[0]
        S = self.to_kv(np.asarray(state, dtype=np.float64)).copy()
        o = np.zeros((T, self.HV, self.V))
        states = []
        for t in range(T):
            for hv in range(self.HV):
                h = self.key_head(hv)
                kn = self.norm(k[t, h].astype(np.float64))
                qn = self.norm(q[t, h].astype(np.float64)) * self.scale
                if self.kda:
                    x = a[t, hv].astype(np.float64) + dt_bias[hv].astype(np.float64)
                    if self.m.get("kda_gate", "softplus") == "softplus":
                        g = -np.exp(A_log[hv]) * _softplus(x)
                    else:
                        g = self.m.get("lower_bound", -5.0) / (1 + np.exp(-np.exp(A_log[hv]) * x))
                    alpha = np.exp(g)[:, None]
                else:
                    g = -np.exp(A_log[hv]) * _softplus(float(a[t, hv]) + float(dt_bias[hv]))
                    alpha = np.exp(g)
                beta = 1.0 / (1.0 + np.exp(-float(b[t, hv])))
                if self.m.get("round_beta_to_act") and self.m.get("act_dtype", "BF16") == "BF16":
                    beta = float(_round(beta, "BF16"))
                s = S[hv] if "decay_after_read" in self.faults else alpha * S[hv]
                kv = s.T @ kn
                if "decay_after_read" in self.faults:
                    s = alpha * s
                delta = beta * (v[t, hv].astype(np.float64) - kv)
                S[hv] = s + np.outer(kn, delta)
                o[t, hv] = S[hv].T @ qn
            states.append(S.copy())
        return o, states


def implementation(faults=()):
    """An adapter fn(fixture) -> {out.*: array} for the GDN/KDA operations of the golden set."""

    def fn(fx):
        m = fx.model
        impl = Gdn(m, faults)
        sd = m.get("state_dtype", "F32")
        p = fx.params
        i = fx.inputs
        if fx.op in ("recurrent", "chunked", "mtp_verify"):
            o, states = impl.run(i["q"], i["k"], i["v"], i["a"], i["b"], p["A_log"], p["dt_bias"], i["state"])
            out = {"out.o": o.astype(np.float32)}
            if fx.op == "mtp_verify":
                out["out.states"] = np.stack([_round(impl.from_kv(s), sd) for s in states]).astype(np.float32)
            else:
                out["out.state"] = _round(impl.from_kv(states[-1] if states else impl.to_kv(i["state"])), sd)
            return out
        if fx.op == "replay_commit":
            n = int(i["accepted"])
            zeros = np.zeros_like(i["k"])
            if n == 0:
                return {"out.state": i["state"]}
            _, states = impl.run(zeros[:n], i["k"][:n], i["v"][:n], i["a"][:n], i["b"][:n], p["A_log"],
                                 p["dt_bias"], i["state"])
            return {"out.state": _round(impl.from_kv(states[-1]), sd)}
        if fx.op == "mtp_batch":
            pool = i["pool"].astype(np.float64).copy()
            B, T = i["q"].shape[:2]
            o = np.zeros((B, T, impl.HV, impl.V))
            commits = []
            for r in range(B):
                slot = int(i["slot"][r])
                if slot < 0:
                    continue
                o[r], states = impl.run(i["q"][r], i["k"][r], i["v"][r], i["a"][r], i["b"][r], p["A_log"],
                                        p["dt_bias"], pool[slot])
                n = int(i["accepted"][r])
                if n > 0:
                    commits.append((slot, _round(impl.from_kv(states[n - 1]), sd)))
            for slot, s in commits:
                pool[slot] = s
            return {"out.o": o.astype(np.float32), "out.pool": pool}
        raise NotImplementedError(fx.op)

    return fn
