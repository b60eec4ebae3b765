"""Standalone repro: FLA's full-state spec path (`fused_recurrent_kda_fwd` with `ssm_state_indices` and
`num_accepted_tokens`) uses a PAD index -1 as an address: it reads the initial state from, and writes every
token's state to, the slot before the pool. Needs torch + triton and FLA's `fla/` package only.

    python3 fla_pad_index_repro.py --peer-src DIR       # DIR holds fla/ (flash-linear-attention @ bc3b101d / 0.5.2)

The pool is a view that starts one slot into a larger buffer, so "slot -1" is a guard slot filled with a marker
value instead of some other tensor's memory: the repro prints whether the guard was written and whether the
PAD row's output was computed from the guard. Exit 1 when the guard was written (the behaviour reported).
"""

import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--peer-src", required=True)
ap.add_argument("--device", default="cuda")
ap.add_argument("--no-guard", action="store_true",
                help="the pool is an allocation of its own (run under compute-sanitizer memcheck with "
                     "PYTORCH_NO_CUDA_MEMORY_CACHING=1 to see the out-of-bounds accesses reported)")
args = ap.parse_args()
sys.path.insert(0, args.peer_src)

import torch  # noqa: E402
from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd  # noqa: E402

torch.manual_seed(0)
dev = torch.device(args.device if torch.cuda.is_available() or args.device == "cpu" else "cpu")
H, HV, K, V, T = 1, 1, 16, 16, 2
S = 2  # pool slots
buf = torch.full((S + 1, HV, K, V), 7.0, device=dev)  # buf[0] is the guard slot ("slot -1")
pool = torch.zeros(S, HV, K, V, device=dev) if args.no_guard else buf[1:]
pool.zero_()
x = lambda *s: torch.randn(*s, device=dev)
q, k, v, g, b = x(1, 2 * T, H, K), x(1, 2 * T, H, K), x(1, 2 * T, HV, V), x(1, 2 * T, HV, K), x(1, 2 * T, HV)
cu = torch.tensor([0, T, 2 * T], dtype=torch.int32, device=dev)
# row 0 is a live request in slot 0 (its per-token states go to slots [0, 1]); row 1 is a CUDA-graph PAD row
# with the PAD index -1 in every position, as vLLM-style callers write it
idx = torch.tensor([[0, 1], [-1, -1]], dtype=torch.int32, device=dev)
acc = torch.ones(2, dtype=torch.int32, device=dev)
o, _ = fused_recurrent_kda_fwd(q, k, v, g, b, A_log=torch.zeros(HV, device=dev),
                               dt_bias=torch.zeros(HV * K, device=dev), initial_state=pool, inplace_final_state=True,
                               cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=acc,
                               use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
if dev.type == "cuda":
    torch.cuda.synchronize()
guard_written = not bool((buf[0] == 7.0).all())
print(f"torch {torch.__version__}, device {dev}")
print(f"guard slot (index -1) written by the PAD row: {guard_written} "
      f"(max |guard - 7| = {float((buf[0] - 7.0).abs().max()):.4g})")
print(f"PAD row outputs: max |o| = {float(o[0, T:].abs().max()):.4g} (computed from the guard's contents)")
sys.exit(1 if guard_written else 0)
