"""The Target interface: the methods an implementation overrides, one per command of the target protocol
(docs/target-protocol.md), and the protocol vocabulary they claim. Imports nothing of the kit; server.py serves
a Target, and target.py is the public entry point that re-exports it with the rows and serve()."""

from __future__ import annotations

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
L2NORM_FORMULA_MINOR = 6  # the minor version that added l2norm forms by formula (and the forms beyond rsqrt_mul, div_sqrt)
STEP_MIX_MINOR = 7  # the minor version that added `step_mix` (what one step may mix: one width, prefill apart)
SELF_CHECK_MINOR = 8  # the minor version that added `self_check` (what an implementation claims about its own paths)
GRAPH_REPLAY_MINOR = 9  # the minor version that added `graph_replay` (a step's and commit's `replay` field)
MROPE_MINOR = 10  # the minor version that added MRoPE positions (`mrope`, the mrope_* commands, mrope.rotary)
# MRoPE (protocol 1.10, docs/mrope.md): the fixture op advertised only when capabilities() lists it in `fixture_ops` and
# only to a judge speaking 1.10 or later; the presets a target may claim in capabilities()["mrope"]["models"]; the
# methods a claim of `mrope` needs.
MROPE_FIXTURE_OPS = ("mrope.rotary",)
# Tree fixture ops (protocol 1.11, docs/fixture-format.md section 12): advertised only when capabilities() lists them
# in `fixture_ops` and only to a judge speaking 1.11 or later.
TREE_FIXTURE_OPS = ("tree.verify", "tree.commit", "tree.conv_update", "tree.conv_commit")
TREE_FIXTURE_MINOR = 11
MROPE_MODELS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5")
MROPE_METHODS = ("mrope_setup", "mrope_admit", "mrope_step", "mrope_accept", "mrope_release")
SELF_CHECKS = ("verify_vs_steps", "repeat", "permute")  # the judge's self checks (docs/lifecycle.md, "Self checks")
CONV_METHODS = ("conv_step", "conv_commit", "conv_committed_state", "conv_pool")


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
        or later), step_mix ({"one_width": bool, "prefill_apart": bool}, default both false: a kernel that takes
        one width per launch or keeps prefill chunks and verify rows in different launches; sent only to a judge
        speaking 1.7 or later, and the kit refuses a step that mixes more than claimed), self_check ({"exact":
        [names of SELF_CHECKS whose two paths are bit-identical], "tier": "fp32" | "tf32" | "bf16", the precision
        the implementation's own paths may differ at}, default none exact and fp32; sent only to a judge speaking
        1.8 or later: an older one holds every implementation to the default), graph_replay (bool, default
        false; needs capture and graph_padding: steps that replay a bucket captured earlier in the case carry
        rows.replay = (rows, T); sent only to a judge speaking 1.9 or later), mrope ({"models": [names of
        MROPE_MODELS], "pad_positions": "zero" | "any"}, default none; claims the five mrope_* methods, which must
        be overridden; sent only to a judge speaking 1.10 or later; list MROPE_FIXTURE_OPS in fixture_ops to claim
        the mrope.rotary fixture op, also 1.10 or later only). Missing
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
                rows.replay (protocol 1.9, graph_replay claimed): (rows, T) of the captured bucket this step
                replays (capture(rows, T) earlier in the case), else None; its commit carries the same.
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

    # --- MRoPE positions (protocol 1.10, docs/target-protocol.md "MRoPE positions (1.10)", docs/mrope.md) --------
    # Claimed by capabilities()["mrope"] = {"models": [...], "pad_positions": "zero" | "any"}, which needs all five
    # methods; the default declines (never sent). Independent of the recurrent state: no `setup` comes first, and the
    # lifecycle commands never see MRoPE. The kit checks every field and the order of the commands (below) before a
    # method is called; the bookkeeping (positions, delta, the computed-token cursor) is the implementation's own.

    def mrope_setup(self, config: dict, q_heads: int, k_heads: int) -> None:
        """Starts a new MRoPE case: every request is dropped.

        config:  the preset in full: model (informational, one of the claimed models), head_dim, rotary_dim R
                 (even, <= head_dim; dims >= R are copied), theta, mrope_section [s0, s1, s2] (sums to R/2),
                 interleaved (bool: the interleaved axis map, else chunked), spatial_merge_size,
                 temporal_patch_size, video_rule ("frame-index", "scaled-time" or "per-frame") and
                 tokens_per_second (used by scaled-time only).
        q_heads, k_heads: the heads of every later step's q [N, q_heads, head_dim] and k [N, k_heads, head_dim].
        """
        raise NotImplementedError("mrope_setup")

    def mrope_admit(self, req: int, segments: list, cached: int) -> None:
        """Registers request `req` (>= 0, not live) with its prompt: segments in the format of `replayssm mrope
        positions` (docs/mrope.md section 7): {"type": "text", "length": L}, {"type": "image", "grid": [T, H, W]},
        {"type": "video", "grid": [T, H, W]} with "second_per_grid" (or "fps") for scaled-time and "frame_text"
        (optional) for per-frame. The first `cached` prompt tokens (0 <= cached < prompt_len) are computed
        already, as after a prefix-cache hit: the first prefill chunk starts there. The prompt has at least one
        token."""
        raise NotImplementedError("mrope_admit")

    def mrope_step(self, rows: list, q, k) -> tuple:
        """One forward of the full-attention layers.

        rows:  MropeRow in packed order (kind, tokens, token_offset, req): "prefill" (the request's next `tokens`
               prompt tokens; the chunk that computes the last one leaves a sampled token pending), "verify" (the
               pending token and tokens - 1 drafts at absolute indices [C, C + tokens), C the request's computed
               count; mrope_accept follows), "decode" (the pending token alone, computed and accepted: C += 1),
               then at most one "pad" row (req None), the bucket's padding. Each request at most once, any order.
        q, k:  float32 [N, q_heads, head_dim] and [N, k_heads, head_dim], N the rows' tokens.
        Returns (positions, index, q_rot, k_rot): positions int [3, N] (rows t, h, w), index int [N] (each token's
        absolute index in its request, its KV slot: never a rope coordinate; -1 for padding), q_rot and k_rot
        float (q and k rotated; dims >= rotary_dim copied). Padding under pad_positions "zero": positions 0 and
        q, k unrotated, bit for bit. Answered as I64 and F32.
        """
        raise NotImplementedError("mrope_step")

    def mrope_accept(self, rows: list) -> None:
        """The accepted counts of the last step's verify rows: (req, accepted) pairs, one per verify row,
        1 <= accepted <= the row's tokens (the pending token and accepted - 1 drafts): C += accepted and a new
        token is pending; the rejected drafts leave nothing behind."""
        raise NotImplementedError("mrope_accept")

    def mrope_release(self, req: int) -> None:
        """Ends request `req` (finished, aborted, preempted for good); its id may be admitted again."""
        raise NotImplementedError("mrope_release")

    def fixture(self, op: str, config: dict, inputs: dict) -> dict:
        """Optional: one static fixture's operation (docs/fixture-format.md; the ops of FIXTURE_OPS), so that
        `replayssm conform --target exec:...` runs the committed fixtures through the implementation too.

        op:      "recurrent", "chunked", "mtp_verify", "replay_commit" or "mtp_batch"; when claimed, the conv
                 ops "conv.prefill", "conv.update", "conv.commit" (docs/fixture-format.md section 11) and, from
                 protocol 1.10, "mrope.rotary" (docs/mrope.md section 5);
        config:  the fixture's config: {"model": the model configuration, "args": {"chunk": C} for chunked};
                 for the conv ops {"conv": {name, H, HV, K, V, channels, kernel_size, activation, bias,
                 act_dtype, state_dtype}, "args": {"case": tag}} (no "model"); for mrope.rotary {"model": the
                 preset's name, "request": the request document};
        inputs:  the fixture's in.* and param.* tensors under their full names ("in.q", "in.state",
                 "param.A_log"; conv: "in.x" [T, C], "in.state" [C, W-1], "in.accepted", "param.weight" [C, W],
                 "param.bias" [C]): float tensors as float32 (BF16 widened exactly), in.slot / in.accepted as
                 int32; mrope.rotary: the request and rotary configuration as I64 / F64 tensors (in.segments,
                 in.second_per_grid, in.frame_text, in.generated, in.head_dim, ...; mrope_fixture.hpp), in.q, in.k.
        Returns the out.* tensors ("out.o" or "o", ...; conv: out.y, out.state, out.states; mrope.rotary:
        out.positions, out.delta, out.prompt_len as integers, out.q_rot, out.k_rot): NumPy arrays or torch
        tensors, converted to each expected tensor's dtype and shape (a BF16 state or output rounded to nearest
        even once; integer tensors exactly, from integer values only). Overriding it advertises every op of
        FIXTURE_OPS unless capabilities() lists `fixture_ops`; the conv and MRoPE ops are advertised only when
        listed there."""
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
