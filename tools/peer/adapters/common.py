"""What every peer adapter shares: importing the peer's own files from a path the user gives, the device, the
torch dtypes of the protocol's spellings, and the packed-row checks of a step.

An adapter never carries peer code: `peer_path(args, env)` names a directory that holds the peer's sources at
their original relative paths (tools/peer/adapters/README.md says which repository, commit and files), and that
directory is put first on sys.path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "python")))  # replayssm_kit of this checkout

from replayssm_kit.target import Target, TargetError  # noqa: E402


def peer_path(value: str | None, env: str, what: str) -> str:
    """The peer source directory: --peer-src, else $env. Refuses a missing directory, naming it."""
    path = value or os.environ.get(env)
    if not path:
        raise SystemExit(f"{what}: give the peer's source directory with --peer-src DIR or ${env}")
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise SystemExit(f"{what}: peer source directory {path} does not exist")
    sys.path.insert(0, path)
    return path


def base_args(doc: str, env: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--self-check", default=None, metavar="FILE",
                    help="run every step three times (again, and with the rows reversed) and append any difference "
                         "in bits to FILE as JSON lines (common.SelfCheck)")
    ap.add_argument("--fault", choices=("commit_one_fewer",), default=None,
                    help="negative control: commit one accepted token fewer than asked (a campaign must fail)")
    ap.add_argument("--peer-src", default=None, help=f"directory holding the peer's sources (default ${env})")
    ap.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu; on cpu "
                                                    "set TRITON_INTERPRET=1)")
    return ap


def wrap(target, args):
    """The target as served: inside SelfCheck when --self-check is given."""
    return SelfCheck(target, args.self_check) if args.self_check else target


def device(name: str | None):
    import torch

    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def torch_dtype(spelling: str):
    import torch

    return {"F32": torch.float32, "BF16": torch.bfloat16}[spelling]


def load_peer_file(src: str, rel: str, module_name: str, who: str):
    """Imports the peer's own file SRC/REL as module `module_name`; a missing file stops the adapter naming it."""
    path = os.path.join(src, rel)
    if not os.path.isfile(path):
        raise SystemExit(f"{who}: {path} is missing (see tools/peer/adapters/README.md)")
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class LoopIndex(int):
    """A loop counter that also answers `.to(dtype)` (with its own value) as a compiled Triton loop variable does."""

    def to(self, dtype):
        return self


def interpreter_range(*bounds):
    """`range` for a peer module under Triton's CPU interpreter, which runs a kernel's `for i in range(...)` with
    Python ints that lack the `.to` a kernel may call on its counter (`i.to(tl.int64)`, an index widening). It
    changes the type of an index, never a value; on a GPU the module's own `range` is used."""
    import operator

    return (LoopIndex(i) for i in range(*(operator.index(b) for b in bounds)))


def check_in_place(rows: list, what: str) -> None:
    """Peers that commit in place only: a live row with write_slot != slot is refused, naming the row."""
    for i, r in enumerate(rows):
        if not r.is_pad and r.write_slot not in (r.slot, -1):
            raise TargetError(f"rows[{i}].write_slot", f"{what} commits in place only (write_slot == slot)")


def gdn_geometry(target, setup: dict, what: str) -> None:
    """The setup fields every GDN adapter keeps, on `target`: L, S, T (layers, slots, max_T), H, HV, K, V, E
    (state elements per slot), stride, act and state (torch dtypes) and scale (q_scale, default K^-0.5).
    `what` names the kernels in the errors: GDN only, and the l2norm epsilon the peers hard-code (1e-6)."""
    cfg = setup["config"]
    if cfg["op"] != "gdn":
        raise TargetError("setup.config.op", f"{what} GDN only")
    if abs(cfg.get("l2_eps", 1e-6) - 1e-6) > 1e-12:
        raise TargetError("setup.config.l2_eps", "the kernels add 1e-6 inside their l2norm")
    target.L, target.S, target.T = cfg["num_layers"], setup["num_slots"], setup["max_T"]
    target.H, target.HV, target.K, target.V = cfg["H"], cfg["HV"], cfg["K"], cfg["V"]
    target.E = target.HV * target.K * target.V
    target.stride = setup["slot_stride"] or target.E
    target.act = torch_dtype(cfg["act_dtype"])
    target.state = torch_dtype(cfg["state_dtype"])
    target.scale = cfg.get("q_scale") or target.K ** -0.5


def check_rows(rows: list, n_tokens: int, num_slots: int, max_T: int) -> None:
    """Rows must be in range and their windows packed in batch order without holes: the peers' kernels take
    varlen batches as cumulative offsets (cu_seqlens / query_start_loc), which cannot express anything else."""
    at = 0
    for i, r in enumerate(rows):
        if not -1 <= r.slot < num_slots:
            raise TargetError(f"rows[{i}].slot", f"is {r.slot}, outside [-1, {num_slots})")
        if not -1 <= r.write_slot < num_slots:
            raise TargetError(f"rows[{i}].write_slot", f"is {r.write_slot}, outside [-1, {num_slots})")
        if not (0 if r.is_pad else 1) <= r.T <= max_T:
            raise TargetError(f"rows[{i}].T", f"is {r.T}, outside [1, {max_T}]")
        if r.token_offset != at:
            raise TargetError(f"rows[{i}].token_offset", f"is {r.token_offset}, the packed layout needs {at}")
        at += r.T
    if at != n_tokens:
        raise TargetError("total_tokens", f"is {n_tokens}, the rows' windows cover {at}")


def check_commit(rows: list, stepped: list | None) -> None:
    if stepped is None:
        raise TargetError("rows", "commit without an uncommitted step")
    if [(r.slot, r.T) for r in rows] != [(r.slot, r.T) for r in stepped]:
        raise TargetError("rows", "are not the last step's rows")
    for i, r in enumerate(rows):
        if not r.is_pad and not r.is_prefill and not 0 <= r.accepted <= r.T:
            raise TargetError(f"rows[{i}].accepted", f"is {r.accepted}, outside [0, {r.T}]")


def _bits(x):
    return x.detach().contiguous().cpu().view(-1).numpy().tobytes() if hasattr(x, "detach") else bytes(x)


def _dtype_bits(x):
    import torch

    t = x.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.cpu().numpy().tobytes()


def live_outputs(o, rows: list, caps: dict):
    """A copy of a step's output [N, ...] with the windows of PAD rows (graph tail included) set to +0 unless the
    target claims `pad_outputs_zero`: those outputs are don't-care (docs/target-protocol.md, "PAD rows"), and a
    kernel that leaves them unwritten answers whatever the allocator held, which no bitwise check may count."""
    o = o.detach().clone() if hasattr(o, "detach") else o.copy()
    if not caps.get("pad_outputs_zero", False):
        for r in rows:
            if r.is_pad:
                o[r.token_offset: r.token_offset + r.T] = 0
    return o


class SelfCheck(Target):
    """Wraps a target whose whole storage is `inner.tensors()` (a list of torch tensors) and runs every step three
    times from the same storage: as asked, again as asked, and with the batch rows reversed (windows repacked).
    The second run must reproduce the first's outputs and storage bit for bit (determinism); the reversed run's
    outputs, put back in the judge's order, must equal the first's (no dependence on launch position). The first
    run's results are kept, so the judge sees an unchanged target. Findings go to `path` as JSON lines."""

    def __init__(self, inner, path: str):
        self.inner, self.path, self.steps, self.found = inner, path, 0, 0

    def capabilities(self):
        return self.inner.capabilities()

    def setup(self, setup, params):
        return self.inner.setup(setup, params)

    def allocate(self, slot):
        return self.inner.allocate(slot)

    def commit(self, rows):
        return self.inner.commit(rows)

    def copy_slot(self, src, dst):
        return self.inner.copy_slot(src, dst)

    def committed_state(self, layer, slot):
        return self.inner.committed_state(layer, slot)

    def pool(self, layer):
        return self.inner.pool(layer)

    def _snap(self):
        return [t.clone() for t in self.inner.tensors()]

    def _restore(self, snap):
        for t, s in zip(self.inner.tensors(), snap):
            t.copy_(s)

    def _log(self, **kw):
        import json

        self.found += 1
        with open(self.path, "a") as f:
            f.write(json.dumps(kw) + "\n")

    def step(self, rows, inputs):
        import dataclasses

        import numpy as np

        self.steps += 1
        if hasattr(self.inner, "reserve"):
            self.inner.reserve(len(rows))  # storage that a step would grow is grown before the snapshot
        before = self._snap()
        out1 = [o.clone() for o in self.inner.step(rows, inputs)]
        after1 = self._snap()
        self._restore(before)
        out2 = self.inner.step(rows, inputs)
        after2 = self._snap()
        caps = self.inner.capabilities()
        live1 = [live_outputs(a, rows, caps) for a in out1]
        for l, (a, b) in enumerate(zip(live1, out2)):
            b = live_outputs(b, rows, caps)
            if _dtype_bits(a) != _dtype_bits(b):
                self._log(step=self.steps, check="repeat outputs", layer=l, rows=len(rows))
        for i, (a, b) in enumerate(zip(after1, after2)):
            if _dtype_bits(a) != _dtype_bits(b):
                self._log(step=self.steps, check="repeat storage", tensor=i, rows=len(rows))
        self._restore(before)
        order = list(reversed(range(len(rows))))
        new_rows, at = [], 0
        for i in order:
            new_rows.append(dataclasses.replace(rows[i], token_offset=at))
            at += rows[i].T
        take = np.concatenate([np.arange(rows[i].token_offset, rows[i].token_offset + rows[i].T) for i in order]
                              + [np.zeros(0, np.int64)]).astype(np.int64)
        out3 = self.inner.step(new_rows, [{k: v[take] for k, v in x.items()} for x in inputs])
        back = np.argsort(take, kind="stable")
        for l, (a, c) in enumerate(zip(live1, out3)):
            c = live_outputs(c.reshape(len(take), -1)[back].reshape(a.shape), rows, caps)
            if _dtype_bits(a) != _dtype_bits(c):
                diff = (a.float() - c.float()).abs()
                self._log(step=self.steps, check="reversed rows outputs", layer=l, rows=len(rows),
                          max_abs_diff=float(diff.max()), max_abs=float(a.float().abs().max()))
        self._restore(after1)
        owner = self.inner  # the adapter that remembers the stepped rows (through any forwarding wrappers)
        while "last" not in vars(owner) and "inner" in vars(owner):
            owner = owner.inner
        owner.last = rows
        return out1
