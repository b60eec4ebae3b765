"""The implementation side of the target protocol: subclass `Target`, call `serve()`.

    from replayssm_kit.target import Target, TargetError, serve

    class MyKernel(Target):
        def capabilities(self): return {"name": "my-kernel", "tier": "tf32", "design": "replay"}
        def setup(self, setup, params): ...
        def step(self, rows, inputs): ...     # -> one o array per layer
        def commit(self, rows): ...
        def committed_state(self, layer, slot): ...
        def pool(self, layer): ...
        def capture(self, rows, T): ...       # optional (protocol 1.4): claims the `capture` capability
        def conv_step(self, rows, x): ...     # optional (protocol 1.5, with conv_commit, conv_committed_state,
                                              # conv_pool): claims the `conv_state` capability

    if __name__ == "__main__":
        raise SystemExit(serve(MyKernel()))

and judge it: `replayssm fuzz --target exec:'python3 my_kernel.py' --preset tiny-gdn`.

The methods mirror the protocol's commands (docs/target-protocol.md) and the judge's Target interface
(reference/include/replayssm/reference/target.hpp). serve() does the rest: frames, the version check,
BF16 inputs as float32 arrays, answers converted to the protocol's dtypes (replayssm_kit.convert), the
digests behind `pool` and `committed_state` (only what changed crosses the pipe), and exceptions turned
into error answers. Notation: L layers, N packed tokens of a step, S slots, E = HV*K*V, stride >= E;
act = config["act_dtype"], state = config["state_dtype"] ("F32" or "BF16").
"""

from __future__ import annotations

from dataclasses import dataclass

PAD_SLOT = -1

# The fixture ops a target can implement through Target.fixture (docs/target-protocol.md, "Fixture ops"): the
# golden operations (protocol 1.1), advertised by default when fixture() is overridden, and the short
# convolution's ops (protocol 1.3, docs/fixture-format.md section 11), advertised only when capabilities() lists
# them in `fixture_ops` (a fixture() written for the golden ops does not implement them) and only to a judge
# speaking 1.3 or later (an older judge refuses names it does not know).
FIXTURE_OPS = ("recurrent", "chunked", "mtp_verify", "replay_commit", "mtp_batch")
CONV_FIXTURE_OPS = ("conv.prefill", "conv.update", "conv.commit")
CONV_FIXTURE_OPS_MINOR = 3  # the protocol minor version that added CONV_FIXTURE_OPS
CAPTURE_MINOR = 4  # the protocol minor version that added the `capture` command
CONV_STATE_MINOR = 5  # the protocol minor version that added the conv component (`conv_state`, conv_* commands)
CONV_METHODS = ("conv_step", "conv_commit", "conv_committed_state", "conv_pool")

# The columns of the kit's index table (Rows.index): one int32 row per batch row. PAD_SLOT-style sentinels are
# kept as the judge sent them; `pad` is 1 for a row that is_pad (a PAD row or a graph tail row), else 0.
INDEX_FIELDS = ("slot", "write_slot", "T", "token_offset", "accepted", "pad")


class TargetError(Exception):
    """Raise it to refuse a command: serve() answers {"ok": false, "error": {"field", "message"}} and keeps
    serving. `field` names what is refused ("rows[2].slot", "setup.config.K"); the judge reports it as
    target.<command>.<field>. Any other exception is answered the same way with an empty field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Row:
    """One row of a step's batch (docs/target-protocol.md, "Rows of a step").

    slot          checkpoint read (and, in place, written); PAD_SLOT (-1) for a PAD row, which reads and
                  writes no state at all;
    write_slot    where the commit writes (== slot in place; -1: no write);
    T, token_offset  the row's window in the packed tokens: [token_offset, token_offset + T);
    kind          "verify" (committed later by commit() with `accepted`) or "prefill" (the whole window is
                  committed by the step itself, from a zero state when `fresh`);
    accepted      in commit(): n in [0, T] for verify rows (0 commits nothing and leaves the slot's bytes
                  unchanged); in step(): T for prefill rows, 0 for verify rows (not known yet).
    graph_tail    (protocol 1.2) a row of a captured batch beyond live_rows: its fields are stale (slot ids of an
                  earlier, larger batch) or PAD; it is a PAD row whatever its slot says;
    pad_sentinel  the slot PAD rows carry under the case's PAD convention (-1, 0 for "null_block", num_slots - 1
                  for "pad_slot"; docs/target-protocol.md, "Graph padding, PAD conventions and out-of-place commits").
    """

    slot: int
    write_slot: int
    T: int
    token_offset: int
    accepted: int
    kind: str
    fresh: bool
    graph_tail: bool = False
    pad_sentinel: int = PAD_SLOT

    @property
    def is_pad(self) -> bool:
        """No state may be read or written for this row: a PAD row (the convention's sentinel) or a graph tail."""
        return self.graph_tail or self.slot == self.pad_sentinel

    @property
    def is_prefill(self) -> bool:
        return self.kind == "prefill"


class RowIndex:
    """The index arrays of a batch, as an engine hands them to a kernel: int32 arrays of length len(rows), one per
    field of INDEX_FIELDS (slot, write_slot, T, token_offset, accepted, pad).

    Every array is a **column view** of one persistent, capacity-sized table ([capacity, len(INDEX_FIELDS)]
    int32, C order; `table`): non-contiguous, with a stride of len(INDEX_FIELDS) * 4 bytes, and the table's rows
    beyond len(rows) hold what earlier, larger batches wrote there. That is how vLLM's mixed spec / non-spec
    batches reached its kernels (a strided column of a (1 + num_spec)-wide index table, vLLM issue 52792): read
    them through NumPy or torch indexing, or make them contiguous (np.ascontiguousarray, tensor.contiguous())
    before handing a pointer to a kernel. Code that takes the data pointer and assumes unit stride reads the
    other columns instead (docs/target-protocol.md, "Index arrays"). The arrays hold this call's rows until the
    next step or commit rewrites the table: copy them to keep them.
    """

    def __init__(self, table, n: int):
        self.table = table
        for c, name in enumerate(INDEX_FIELDS):
            setattr(self, name, table[:n, c])


class Rows(list):
    """The rows of a step or commit: a list of Row in batch order, plus `index`, the same rows as strided int32
    index arrays (RowIndex)."""

    index: RowIndex


class Target:
    """An implementation of the state side of a hybrid model, as the judge drives it. Override setup, step,
    commit, committed_state and pool; copy_slot when the implementation can copy (else the kit declares
    copy_slot = false and campaigns report copies as not covered); allocate when slots carry bookkeeping.

    Arrays may be NumPy arrays or torch tensors on any device. Returned floating values are converted to
    the protocol's dtype: exact when representable, else rounded to nearest even once, which is what a
    kernel's bf16 store does (replayssm_kit.convert).
    """

    def capabilities(self) -> dict:
        """The hello answer's capabilities (docs/target-protocol.md, "Capabilities"): name, ops, act_dtypes,
        state_dtypes, layouts, l2norms, kda_gates, round_beta_to_act, gva_ratios, K, V, max_T, max_layers,
        copy_slot, bit_exact, tier, pad_outputs_zero, design, fixture_ops (default: FIXTURE_OPS when fixture()
        is overridden, else none; list CONV_FIXTURE_OPS there to claim the conv ops), pad_conventions, graph_padding, out_of_place_commit,
        capture (default: true when capture() is overridden; sent only to a judge speaking 1.4 or later),
        conv_state (default: true when the four conv_* methods are overridden; sent only to a judge speaking 1.5
        or later). Missing
        keys take the protocol's defaults; the generator produces only what is covered."""
        return {}

    def setup(self, setup: dict, params: list) -> None:
        """Discard everything of earlier cases and start a new one.

        setup:  the judge's engine setup: config (as in fixtures: op, H, HV, K, V, num_layers, l2norm, l2_eps,
                q_scale, round_beta_to_act, kda_gate, lower_bound, act_dtype, state_dtype, layout), num_slots,
                slot_stride (0 means E), max_T, ring_B, ring_T, recon, ring_record_dtype, page_tokens; the kit
                adds "poison_bits" (hex of the F32 bits every pool element starts with, a NaN) and "poison"
                (that value as a NumPy float32). With the conv component (protocol 1.5, conv_state claimed): conv
                (kernel_size W, activation "silu" / "none", bias, state_dtype, seed; docs/target-protocol.md) and
                the kit adds "conv_params": per layer {"weight": float32 [C, W], "bias": float32 [C] or None},
                C = 2*H*K + HV*V channels.
        params: one (A_log, dt_bias) pair per layer: float32 [HV] and float32 [HV, a_width] (a_width = 1 for
                GDN, K for KDA).
        Every layer has its own pool of S slots of `stride` elements, all starting as the poison value.
        """
        raise NotImplementedError("setup")

    def allocate(self, slot: int) -> None:
        """A slot is (re)allocated to a request: reset per-slot bookkeeping (ring cursors). Pool data stays.
        Nothing to do for an implementation without per-slot bookkeeping."""

    def step(self, rows: list, inputs: list) -> list:
        """One mixed step on every layer.

        rows:   Rows: a list of Row in batch order, and rows.index, the same rows as int32 index arrays that are
                strided column views of a capacity-sized table (RowIndex: never assume they are contiguous).
        inputs: per layer a dict of float32 arrays (act values, BF16 widened exactly): q, k [N, H, K];
                v [N, HV, V]; a [N, HV, a_width]; b [N, HV].
        Returns per layer o [N, HV, V] (or flat), values as the kernel stores them (act dtype); PAD rows'
        outputs are don't-care unless capabilities claim pad_outputs_zero. Prefill rows are committed here.
        """
        raise NotImplementedError("step")

    def commit(self, rows: list) -> None:
        """Commits the last step's verify rows with rows[i].accepted tokens (prefill and PAD rows: nothing).
        rows is a Rows, like step's (rows.index.accepted holds the accepted counts)."""
        raise NotImplementedError("commit")

    def copy_slot(self, src: int, dst: int) -> None:
        """Copies slot src's whole per-slot state (every layer) to slot dst; the gap is never written."""
        raise NotImplementedError("copy_slot")

    def committed_state(self, layer: int, slot: int):
        """The state a request in `slot` has committed, in the state dtype's values: [HV, K, V] (layout
        "kv") or [HV, V, K] (layout "vk"), or flat [E]."""
        raise NotImplementedError("committed_state")

    def pool(self, layer: int):
        """Raw pool storage of one layer, gaps included: [S, stride] or flat [S * stride], state values."""
        raise NotImplementedError("pool")

    def capture(self, rows: int, T: int) -> None:
        """Optional (protocol 1.4): capture a new CUDA-graph bucket while requests are live: a step of `rows`
        rows of `T` tokens each (1 <= rows <= num_slots + 8, 1 <= T <= max_T), warmed up and recorded on dummy
        inputs using only PAD rows or the implementation's own scratch. Every slot, gap and committed state must
        stay bitwise as it is (the pad_slot convention's pad slot excepted), and the next step behaves as if it
        had not happened. Overriding it claims the `capture` capability; the default declines (not claimed, so
        the judge never sends it and reports capture while live as not covered)."""
        raise NotImplementedError("capture")

    # --- the conv component (protocol 1.5, docs/target-protocol.md "The conv component (1.5)") -------------
    # Overriding all four claims `conv_state`; the default declines (no setup carries conv, no conv command).
    # A conv window per slot and layer is [C, W-1] (channel-major, column 0 the oldest), in the conv state dtype.

    def conv_step(self, rows: list, x: list) -> list:
        """The conv windows' half of the step just run (same rows): x per layer float32 [N, C], the tokens'
        raw conv inputs [q | k | v] (act values). Returns per layer y [N, C] (act dtype): the causal depthwise
        conv1d of each row's tokens from its read slot's window (zeros for a fresh prefill row); prefill rows
        commit their whole window to write_slot here; verify rows commit in conv_commit. PAD and graph tail
        rows read and write nothing (outputs don't-care unless pad_outputs_zero is claimed)."""
        raise NotImplementedError("conv_step")

    def conv_commit(self, rows: list) -> None:
        """Rolls each verify row's window to its accepted length n: write_slot gets the last W-1 columns of
        [window | x_1 .. x_n]; n = 0 leaves the slot's bytes unchanged."""
        raise NotImplementedError("conv_commit")

    def conv_committed_state(self, layer: int, slot: int):
        """The committed conv window of `slot`: [C, W-1] (or flat), conv state dtype values."""
        raise NotImplementedError("conv_committed_state")

    def conv_pool(self, layer: int):
        """Raw conv pool of one layer: [S, C*(W-1) + 4] (a 4-value gap after each window, never written)."""
        raise NotImplementedError("conv_pool")

    def fixture(self, op: str, config: dict, inputs: dict) -> dict:
        """Optional: one static fixture's operation (docs/fixture-format.md; the ops of FIXTURE_OPS), so that
        `replayssm conform --target exec:...` runs the committed fixtures through the implementation too.

        op:      "recurrent", "chunked", "mtp_verify", "replay_commit" or "mtp_batch"; when claimed, the conv
                 ops "conv.prefill", "conv.update", "conv.commit" (docs/fixture-format.md section 11);
        config:  the fixture's config: {"model": the model configuration, "args": {"chunk": C} for chunked};
                 for the conv ops {"conv": {name, H, HV, K, V, channels, kernel_size, activation, bias,
                 act_dtype, state_dtype}, "args": {"case": tag}} (no "model");
        inputs:  the fixture's in.* and param.* tensors under their full names ("in.q", "in.state",
                 "param.A_log"; conv: "in.x" [T, C], "in.state" [C, W-1], "in.accepted", "param.weight" [C, W],
                 "param.bias" [C]): float tensors as float32 (BF16 widened exactly), in.slot / in.accepted as
                 int32.
        Returns the out.* tensors ("out.o" or "o", ...; conv: out.y, out.state, out.states): NumPy arrays or
        torch tensors, converted to each expected tensor's dtype and shape (a BF16 state or output rounded to
        nearest even once). Overriding it advertises every op of FIXTURE_OPS unless capabilities() lists
        `fixture_ops`; the conv ops are advertised only when listed there."""
        raise NotImplementedError("fixture")

    def is_fatal(self, error: BaseException) -> bool:
        """Whether an exception the target raised leaves this process unable to answer further commands. A
        device fault (CUDA "misaligned address", "illegal memory access") is sticky: every later kernel launch
        of the process fails with the same error, so each later command would be judged on an earlier one's
        fault. When this returns True the error answer carries "fatal": true and the process exits with status
        3 after writing it; the judge starts a fresh process for the next command (docs/target-protocol.md,
        "Errors"). The default recognises torch's AcceleratorError and CUDA / HIP / Triton device errors by
        their messages; override it for other runtimes."""
        return is_device_fault(error)


def is_device_fault(error: BaseException) -> bool:
    """The default of Target.is_fatal: torch's AcceleratorError, or a message naming a CUDA, HIP or Triton device
    error (torch's "CUDA error: ...", Triton's "Triton Error [CUDA]: ...", HIP's "HIP error: ...")."""
    if type(error).__name__ == "AcceleratorError":
        return True
    message = str(error)
    return any(m in message for m in ("CUDA error:", "Triton Error [CUDA]", "HIP error:", "Triton Error [HIP]"))


def serve(target: Target, stdin=None, stdout=None) -> int:
    """Serves `target` over the protocol until shutdown or the end of input; returns the exit status (0 after
    shutdown or a clean end of input, 1 after refusing the judge's protocol version, 2 for an unreadable
    frame, 3 after answering an error that Target.is_fatal says poisons the process). Defaults: sys.stdin.buffer
    and sys.stdout.buffer; while serving, nothing but frames reaches the real stdout (prints, and writes to file
    descriptor 1, go to stderr)."""
    from .server import run

    return run(target, stdin, stdout)
