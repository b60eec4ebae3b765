"""FLA's full-state speculative path as a target: `fused_recurrent_kda_fwd` with per-token state slots
(`ssm_state_indices` [N, T]) and `num_accepted_tokens`, the kernel and calling convention a vLLM user runs for
full-state MTP, judged through the target protocol:

    replayssm fuzz --preset tiny-gdn --target exec:'python3 tools/peer/adapters/fla_spec.py --peer-src DIR'

DIR holds flash-linear-attention's `fla/` package (tools/peer/adapters/README.md: repository, commit, files).

How the protocol maps onto the peer (design full_state):
* every layer has one state tensor: the protocol's S slots of `stride` elements, then T scratch slots per batch
  row (the per-token state slots of the spec path). The kernel reads and writes it through a strided
  [P, HV, K, V] (layout kv) or [P, HV, V, K] (layout vk, `state_v_first`) view, so the gap after each slot is
  outside every address the kernel forms.
* step: one launch per layer over the packed batch (`cu_seqlens`); row i's tokens write their states into its
  scratch slots, and the state it starts from is read from scratch slot 0 (`num_accepted_tokens` = 1, the
  kernel reads `ssm_state_indices[i, accepted - 1]`), which holds a bitwise copy of the row's checkpoint (zeros
  for a fresh prefill). The gate (softplus or lower-bound sigmoid, from the raw `a`, `A_log`, `dt_bias`), the
  beta sigmoid and the q/k l2norm are computed by the kernel. A GDN head's scalar gate goes through the KDA
  kernel with `a` and `dt_bias` repeated over K: every k lane computes the same scalar decay, so the arithmetic
  is GDN's. Prefill rows are committed at once: the state after their last token is copied into the slot.
* commit: the state after token n of a verify row (its scratch slot n - 1) is copied bitwise into the row's
  write slot; n = 0 copies nothing. The adapter only moves bytes: every state is the kernel's own.
* PAD rows: FLA's spec path has no PAD convention (an index -1 would be used as an address), so a PAD row is
  given a zeroed scratch slot of its own; its outputs are what the kernel computes from it (don't-care).

Precision: the kernel's arithmetic is elementwise fp32 with `tl.sum` reductions, no `tl.dot`: tier fp32.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from replayssm_kit.target import Target, TargetError, serve  # noqa: E402

ENV = "REPLAYSSM_FLA_SRC"


class FlaSpec(Target):
    def __init__(self, dev, per_row: bool, fault: str | None = None):
        import torch
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

        self.torch, self.kernel, self.dev, self.per_row = torch, fused_recurrent_kda_fwd, dev, per_row
        self.fault = fault

    def capabilities(self) -> dict:
        # l2norm: the kernel divides by sqrt(sum(x^2) + 1e-6) (fla/ops/kda/fused_recurrent.py, USE_QK_L2NORM_IN_KERNEL);
        # beta: sigmoid of the raw b in fp32 in-kernel (APPLY_BETA_SIGMOID), never rounded to the activation dtype.
        return {"name": "fla-fused_recurrent_kda_fwd-spec" + (f"+{self.fault}" if self.fault else ""), "design": "full_state", "tier": "fp32",
                "bit_exact": False, "pad_outputs_zero": False, "copy_slot": True,
                "ops": ["gdn", "kda"], "layouts": ["kv", "vk"], "act_dtypes": ["F32", "BF16"],
                "state_dtypes": ["F32", "BF16"], "l2norms": ["div_sqrt"],
                "kda_gates": ["softplus", "lower_bound_sigmoid"], "round_beta_to_act": False}

    def setup(self, setup: dict, params: list) -> None:
        torch = self.torch
        cfg = setup["config"]
        if abs(cfg.get("l2_eps", 1e-6) - 1e-6) > 1e-12:
            raise TargetError("setup.config.l2_eps", "the kernel adds 1e-6 inside its l2norm")
        self.cfg, self.kda = cfg, cfg["op"] == "kda"
        self.L, self.S, self.max_T = cfg["num_layers"], setup["num_slots"], setup["max_T"]
        self.H, self.HV, self.K, self.V = cfg["H"], cfg["HV"], cfg["K"], cfg["V"]
        self.E = self.HV * self.K * self.V
        self.stride = setup["slot_stride"] or self.E
        self.vk = cfg["layout"] == "vk"
        self.shape = (self.HV, self.V, self.K) if self.vk else (self.HV, self.K, self.V)
        self.act = common.torch_dtype(cfg["act_dtype"])
        self.state = common.torch_dtype(cfg["state_dtype"])
        self.scale = cfg.get("q_scale") or self.K ** -0.5
        self.lower_bound = cfg.get("lower_bound", -5.0) if cfg.get("kda_gate") == "lower_bound_sigmoid" else None
        self.A_log = [torch.as_tensor(p[0], dtype=torch.float32).to(self.dev).contiguous() for p in params]
        self.dt_bias = [torch.as_tensor(p[1], dtype=torch.float32).to(self.dev).reshape(self.HV, -1)
                        .expand(self.HV, self.K).contiguous() for p in params]
        self.rows_cap = 0
        self.flat = [torch.full((self.S * self.stride,), float(setup["poison"]), dtype=self.state, device=self.dev)
                     for _ in range(self.L)]
        self.last = None

    # --- storage ---------------------------------------------------------------------------------------------
    def _grow(self, rows: int) -> None:
        """Room for `rows` batch rows of max_T scratch slots after the S protocol slots (zeros)."""
        if rows <= self.rows_cap:
            return
        torch = self.torch
        P = self.S + rows * self.max_T
        for l in range(self.L):
            new = torch.zeros(P * self.stride, dtype=self.state, device=self.dev)
            new[: self.S * self.stride] = self.flat[l][: self.S * self.stride]
            self.flat[l] = new
        self.rows_cap = rows

    def tensors(self) -> list:
        return list(self.flat)

    def reserve(self, rows: int) -> None:
        self._grow(rows)

    def _slots(self, l: int):
        """[P, stride] rows of layer l: protocol slots then scratch slots."""
        return self.flat[l].view(-1, self.stride)

    def _view(self, l: int):
        P = self.flat[l].numel() // self.stride
        d1, d2 = self.shape[1], self.shape[2]
        return self.torch.as_strided(self.flat[l], (P, self.HV, d1, d2), (self.stride, d1 * d2, d2, 1))

    def _scratch(self, i: int, t: int) -> int:
        return self.S + i * self.max_T + t

    def _move(self, dst: list, src: list) -> None:
        """Bitwise copies of whole states (the first E elements of a slot) on every layer; gaps untouched."""
        if not dst:
            return
        torch = self.torch
        d = torch.tensor(dst, dtype=torch.long, device=self.dev)
        s = torch.tensor(src, dtype=torch.long, device=self.dev)
        for l in range(self.L):
            rows = self._slots(l)
            rows[d, : self.E] = rows[s, : self.E]

    def _launch(self, l, q, k, v, g, b, cu, idx, accepted):
        o, _ = self.kernel(q, k, v, g, b, A_log=self.A_log[l], dt_bias=self.dt_bias[l], initial_state=self._view(l),
                           scale=self.scale, output_final_state=False, inplace_final_state=True,
                           state_v_first=self.vk, cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=accepted,
                           use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                           lower_bound=self.lower_bound)
        return o

    # --- the protocol's commands -----------------------------------------------------------------------------
    def step(self, rows: list, inputs: list) -> list:
        torch = self.torch
        N_tok = inputs[0]["q"].shape[0]
        common.check_rows(rows, N_tok, self.S, self.max_T)
        n = len(rows)
        self._grow(n)
        dst, src, zero = [], [], []
        for i, r in enumerate(rows):
            if r.is_pad or (r.is_prefill and r.fresh):
                zero.append(self._scratch(i, 0))
            else:
                dst.append(self._scratch(i, 0))
                src.append(r.slot)
        self._move(dst, src)
        if zero:
            z = torch.tensor(zero, dtype=torch.long, device=self.dev)
            for l in range(self.L):
                self._slots(l)[z, : self.E] = 0
        idx = torch.tensor([[self._scratch(i, t) for t in range(self.max_T)] for i in range(n)],
                           dtype=torch.int32, device=self.dev)
        ends = [sum(r.T for r in rows[: i + 1]) for i in range(n)]
        cu = torch.tensor([0] + ends, dtype=torch.int32, device=self.dev)
        accepted = torch.ones(n, dtype=torch.int32, device=self.dev)
        outs = []
        for l, x in enumerate(inputs):
            t = lambda name: torch.as_tensor(x[name]).to(device=self.dev, dtype=self.act)
            q, k, v, b = t("q")[None].contiguous(), t("k")[None].contiguous(), t("v")[None].contiguous(), t("b")[None].contiguous()
            a = t("a")
            g = (a if self.kda else a.expand(N_tok, self.HV, self.K)).contiguous()[None]
            if not self.per_row:
                o = self._launch(l, q, k, v, g, b, cu, idx, accepted)
            else:  # one launch per row, without cu_seqlens (see --per-row)
                o = torch.zeros_like(v)
                for i, r in enumerate(rows):
                    w = slice(ends[i] - r.T, ends[i])
                    if r.T:
                        o[:, w] = self._launch(l, q[:, w].contiguous(), k[:, w].contiguous(), v[:, w].contiguous(),
                                               g[:, w].contiguous(), b[:, w].contiguous(), None,
                                               idx[i: i + 1, : r.T].contiguous(), accepted[i: i + 1])
            outs.append(o[0])
        pre = [(r.write_slot, self._scratch(i, r.T - 1)) for i, r in enumerate(rows)
               if r.is_prefill and not r.is_pad and r.write_slot != -1 and r.T > 0]
        self._move([d for d, _ in pre], [s for _, s in pre])
        self.last = rows
        return outs

    def commit(self, rows: list) -> None:
        common.check_commit(rows, self.last)
        self.last = None
        n = (lambda r: r.accepted - 1) if self.fault == "commit_one_fewer" else (lambda r: r.accepted)
        done = [(r.write_slot, self._scratch(i, n(r) - 1)) for i, r in enumerate(rows)
                if not r.is_pad and not r.is_prefill and r.write_slot != -1 and n(r) > 0]
        self._move([d for d, _ in done], [s for _, s in done])

    def copy_slot(self, src: int, dst: int) -> None:
        self._move([dst], [src])

    def committed_state(self, layer: int, slot: int):
        return self._slots(layer)[slot, : self.E].reshape(self.shape)

    def pool(self, layer: int):
        return self._slots(layer)[: self.S]


def build(argv=None) -> FlaSpec:
    """The target of a command line (also used in-process by run_traces.py)."""
    ap = common.base_args(__doc__, ENV)
    ap.add_argument("--per-row", choices=("auto", "yes", "no"), default="no",
                    help="one launch per batch row without cu_seqlens (auto: on a cpu device, where Triton's "
                         "interpreter cannot loop over a bound loaded from cu_seqlens)")
    args = ap.parse_args(argv)
    common.peer_path(args.peer_src, ENV, "fla_spec")
    dev = common.device(args.device)
    return common.wrap(FlaSpec(dev, args.per_row == "yes" or (args.per_row == "auto" and dev.type == "cpu"),
                               args.fault), args)


def main(argv=None) -> int:
    return serve(build(argv))


if __name__ == "__main__":
    sys.exit(main())
