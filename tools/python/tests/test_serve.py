"""serve() driven in-process: a tiny fake target behind BytesIO pipes, command frames in, answer frames out."""
import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import HERE
from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits
from replayssm_kit.protocol import digest64, encode_frame, hex64, read_frame
from replayssm_kit.target import Target, TargetError, serve

CFG = {"op": "gdn", "H": 1, "HV": 2, "K": 2, "V": 3, "num_layers": 2, "act_dtype": "BF16", "state_dtype": "F32",
       "layout": "vk"}
E, S, STRIDE = 12, 3, 14
HELLO = {"op": "hello", "protocol": "replayssm.target", "version": [1, 0]}



def without_compute_time(msg: dict) -> dict:
    """A successful answer without its compute_s (seconds the command took, frame I/O excluded), which must
    be there and be a non-negative number."""
    m = dict(msg)
    t = m.pop("compute_s")
    assert isinstance(t, float) and t >= 0.0
    return m


def setup_cmd(cfg=CFG, drop=None):
    tensors = {}
    for l in range(cfg["num_layers"]):
        tensors[f"A_log.{l}"] = (np.zeros(cfg["HV"], np.float32), "F32")
        tensors[f"dt_bias.{l}"] = (np.zeros((cfg["HV"], 1), np.float32), "F32")
    tensors.pop(drop, None)
    return ({"op": "setup", "setup": {"config": cfg, "num_slots": S, "slot_stride": STRIDE, "max_T": 4},
             "poison_bits": "7fc00000"}, tensors)


ROW = {"slot": 1, "write_slot": 1, "T": 2, "token_offset": 0, "accepted": 0, "kind": "verify", "fresh": False}


def step_cmd(n=2, act="BF16", values=None):
    rng = np.random.default_rng(0)
    tensors = {}
    for l in range(2):
        for name, shape in (("q", (n, 1, 2)), ("k", (n, 1, 2)), ("v", (n, 2, 3)), ("a", (n, 2, 1)), ("b", (n, 2))):
            x = rng.standard_normal(shape).astype(np.float32) if values is None else values
            tensors[f"{name}.{l}"] = (x, act)
    return {"op": "step", "rows": [ROW], "total_tokens": n}, tensors


class Fake(Target):
    """Pools of S slots of STRIDE float32 values; step returns whatever `self.o` says (default: k-sum)."""

    def __init__(self):
        self.calls, self.o, self.fail = [], None, None
        self.state_override = None

    def capabilities(self):
        return {"name": "fake", "max_T": 4}

    def setup(self, setup, params):
        self.calls.append(("setup", setup, params))
        self.pools = [np.full((S, STRIDE), setup["poison"], np.float32) for _ in range(setup["config"]["num_layers"])]

    def allocate(self, slot):
        self.calls.append(("allocate", slot))

    def step(self, rows, inputs):
        self.calls.append(("step", rows, inputs))
        if self.fail:
            raise self.fail
        if self.o is not None:
            return self.o
        return [np.zeros((inputs[0]["v"].shape), np.float32) + x["k"].sum() for x in inputs]

    def commit(self, rows):
        self.calls.append(("commit", rows))
        for r in rows:
            for p in self.pools:
                p[r.slot, :E] = r.accepted

    def committed_state(self, layer, slot):
        if self.state_override is not None:
            return self.state_override
        return self.pools[layer][slot, :E].reshape(2, 3, 2)

    def pool(self, layer):
        return self.pools[layer]


def session(target, *commands, expect_status=0):
    """Runs serve() over the commands; returns the answers (Frame objects) and checks the exit status."""
    cin = io.BytesIO(b"".join(encode_frame(*c) if isinstance(c, tuple) else encode_frame(c) for c in commands))
    cout = io.BytesIO()
    assert serve(target, cin, cout) == expect_status
    cout.seek(0)
    answers = []
    while (f := read_frame(cout)) is not None:
        answers.append(f)
    return answers


def test_hello_answers_version_and_capabilities_then_shutdown():
    a = session(Fake(), HELLO, {"op": "shutdown"})
    assert a[0].msg["ok"] and a[0].msg["protocol"] == "replayssm.target" and a[0].msg["version"] == [1, 11]
    caps = a[0].msg["capabilities"]
    assert caps["name"] == "fake" and caps["max_T"] == 4
    assert caps["copy_slot"] is False  # Fake does not override copy_slot
    assert without_compute_time(a[1].msg) == {"ok": True} and len(a) == 2


def test_a_claimed_copy_slot_must_be_implemented():
    class Claims(Fake):
        def capabilities(self):
            return {"copy_slot": True}

    class Copies(Fake):
        def copy_slot(self, src, dst):
            self.calls.append(("copy", src, dst))

    a = session(Claims(), HELLO)
    assert not a[0].msg["ok"] and a[0].msg["error"]["field"] == "capabilities.copy_slot"
    t = Copies()
    a = session(t, HELLO, setup_cmd(), {"op": "copy_slot", "src": 0, "dst": 2})
    assert a[0].msg["capabilities"]["copy_slot"] is True and a[2].msg["ok"] and t.calls[-1] == ("copy", 0, 2)


def test_an_unknown_major_version_is_refused_and_ends_the_session():
    a = session(Fake(), {**HELLO, "version": [2, 0]}, {"op": "shutdown"}, expect_status=1)
    assert len(a) == 1 and not a[0].msg["ok"]
    assert a[0].msg["error"]["field"] == "version" and "major version 2" in a[0].msg["error"]["message"]
    a = session(Fake(), {**HELLO, "protocol": "other"}, expect_status=1)
    assert a[0].msg["error"]["field"] == "protocol"
    a = session(Fake(), {**HELLO, "version": [1, 12]}, {"op": "shutdown"})  # a newer minor is fine
    assert a[0].msg["ok"] and a[0].msg["version"] == [1, 11]


def test_commands_out_of_order_and_unknown_ones_are_error_answers():
    a = session(Fake(), setup_cmd(), HELLO, {"op": "step", "rows": []}, {"op": "frobnicate"}, {"op": "shutdown"})
    assert [x.msg["ok"] for x in a] == [False, True, False, False, True]
    assert "before a successful 'hello'" in a[0].msg["error"]["message"]
    assert "before a successful 'setup'" in a[2].msg["error"]["message"]
    assert a[3].msg["error"] == {"field": "op", "message": "unknown command 'frobnicate'"}


def test_setup_passes_config_params_and_poison_and_refuses_missing_tensors_by_name():
    t = Fake()
    a = session(t, HELLO, setup_cmd(drop="dt_bias.1"), setup_cmd())
    assert a[1].msg["error"]["field"] == "dt_bias.1" and "missing" in a[1].msg["error"]["message"]
    assert a[2].msg["ok"]
    _, setup, params = t.calls[-1]
    assert setup["config"] == CFG and setup["num_slots"] == S and setup["poison_bits"] == "7fc00000"
    assert np.isnan(setup["poison"]) and np.float32(setup["poison"]).view(np.uint32) == 0x7FC00000
    assert len(params) == 2 and params[1][0].shape == (2,) and params[1][1].shape == (2, 1)
    bad = dict(CFG, act_dtype="F16")
    a = session(Fake(), HELLO, setup_cmd(cfg=bad))
    assert a[1].msg["error"]["field"] == "setup.config.act_dtype"


def test_target_errors_name_the_field_and_the_loop_goes_on(capsys):
    t = Fake()
    t.fail = TargetError("rows[0].slot", "slot 1 is not allocated")
    a = session(t, HELLO, setup_cmd(), step_cmd(), {"op": "allocate", "slot": 2})
    assert a[2].msg == {"ok": False, "error": {"field": "rows[0].slot", "message": "slot 1 is not allocated"}}
    assert a[3].msg["ok"] and t.calls[-1] == ("allocate", 2)
    t.fail = ZeroDivisionError("oops")
    a = session(t, HELLO, setup_cmd(), step_cmd(), {"op": "allocate", "slot": 9}, {"op": "allocate", "slot": 0})
    assert a[2].msg["error"] == {"field": "", "message": "ZeroDivisionError: oops"}
    assert "Traceback" in capsys.readouterr().err  # the target's author gets the traceback on stderr
    assert a[3].msg["error"]["field"] == "slot" and a[4].msg["ok"]


def test_a_sticky_device_fault_is_answered_as_fatal_and_ends_the_process(capsys):
    """A CUDA fault poisons every later launch of the process: the answer says fatal, serve() returns 3 and no
    later command is answered, so the judge judges the next command with a fresh process."""
    class AcceleratorError(RuntimeError):  # torch's class name for sticky device errors
        pass

    for fault in (RuntimeError("Triton Error [CUDA]: misaligned address"),
                  RuntimeError("CUDA error: an illegal memory access was encountered"), AcceleratorError("x")):
        t = Fake()
        t.fail = fault
        a = session(t, HELLO, setup_cmd(), step_cmd(), {"op": "allocate", "slot": 2}, expect_status=3)
        assert len(a) == 3 and a[2].msg["error"]["fatal"] is True and not a[2].msg["ok"]
        assert ("allocate", 2) not in t.calls
    # an ordinary exception is not fatal, and a target can decide otherwise for its runtime
    t = Fake()
    t.fail = RuntimeError("shapes do not match")
    a = session(t, HELLO, setup_cmd(), step_cmd(), {"op": "allocate", "slot": 2})
    assert "fatal" not in a[2].msg["error"] and a[3].msg["ok"]
    t.is_fatal = lambda e: "do not match" in str(e)
    a = session(t, HELLO, setup_cmd(), step_cmd(), {"op": "allocate", "slot": 2}, expect_status=3)
    assert a[2].msg["error"]["fatal"] is True and len(a) == 3
    capsys.readouterr()


def test_step_inputs_arrive_as_float32_and_rows_as_row_objects():
    t = Fake()
    bits = np.array([0x3F80, 0xC0A0, 0x3E00, 0x0001], dtype=np.uint16)  # 1, -5, 0.125, the smallest subnormal
    cmd, tensors = step_cmd(values=None)
    tensors["q.1"] = (bits.reshape(2, 1, 2), "BF16")
    session(t, HELLO, setup_cmd(), (cmd, tensors))
    _, rows, inputs = t.calls[-1]
    assert rows[0].slot == 1 and rows[0].T == 2 and not rows[0].is_pad and not rows[0].is_prefill
    q = inputs[1]["q"]
    assert q.dtype == np.float32 and q.shape == (2, 1, 2)
    assert np.array_equal(q.reshape(-1), bf16_bits_to_f32(bits))
    assert inputs[0]["a"].shape == (2, 2, 1) and inputs[0]["b"].shape == (2, 2)
    cmd, tensors = step_cmd()
    tensors["v.0"] = (np.zeros((2, 2, 3), np.float32), "F32")  # the config says BF16
    a = session(Fake(), HELLO, setup_cmd(), (cmd, tensors))
    assert a[2].msg["error"]["field"] == "v.0" and "dtype F32" in a[2].msg["error"]["message"]
    a = session(Fake(), HELLO, setup_cmd(), {"op": "step", "rows": [], "total_tokens": -1})
    assert a[2].msg["error"] == {"field": "total_tokens", "message": "must be >= 0, got -1"}
    bad_row = dict(ROW, fresh=1)
    a = session(Fake(), HELLO, setup_cmd(), ({"op": "commit", "rows": [ROW, bad_row]}, {}))
    assert a[2].msg["error"]["field"] == "rows[1].fresh"


def test_step_outputs_are_rounded_to_bf16_like_a_kernel_store_and_checked():
    t = Fake()
    tie_even, tie_odd = 1 + 2.0**-8, 1 + 3 * 2.0**-8
    o = np.full((2, 2, 3), tie_even, np.float32)
    o[0, 0, 0] = tie_odd
    t.o = [o, o.astype(np.float64)]
    a = session(t, HELLO, setup_cmd(), step_cmd())
    assert a[2].msg["ok"] and a[2].dtypes == {"o.0": "BF16", "o.1": "BF16"}
    got = a[2].tensors["o.0"]
    assert got[0, 0, 0] == 1 + 2.0**-6 and got[0, 0, 1] == 1.0  # ties to even, up and down
    assert np.array_equal(a[2].tensors["o.1"], got)
    t.o = [o, o[:1]]
    a = session(t, HELLO, setup_cmd(), step_cmd())
    assert a[2].msg["error"]["field"] == "o.1" and "shape [1, 2, 3]" in a[2].msg["error"]["message"]
    t.o = [o]
    a = session(t, HELLO, setup_cmd(), step_cmd())
    assert a[2].msg["error"]["field"] == "o" and "one output per layer (2)" in a[2].msg["error"]["message"]


def test_f32_activations_answer_float32_exactly():
    t = Fake()
    cfg = dict(CFG, act_dtype="F32", state_dtype="BF16")
    t.o = [np.full((2, 2, 3), 1 + 2.0**-20, np.float32)] * 2
    cmd, tensors = step_cmd(act="F32")
    a = session(t, HELLO, setup_cmd(cfg), (cmd, tensors))
    assert a[2].dtypes["o.0"] == "F32" and np.all(a[2].tensors["o.0"] == np.float32(1 + 2.0**-20))


def _pool(known, layer=0):
    return {"op": "pool", "layer": layer, "known": known}


def test_pool_answers_only_the_slots_whose_state_or_gap_changed():
    t = Fake()
    a = session(t, HELLO, setup_cmd(), _pool(["0"] * (2 * S)))
    first = a[2]
    assert first.msg["slots"] == [0, 1, 2] and first.tensors["values"].shape == (S, STRIDE)
    assert np.all(np.isnan(first.tensors["values"]))
    assert np.all(first.tensors["values"].view(np.uint32) == 0x7FC00000)  # the poison's bits, exactly
    digests = first.msg["digests"]
    poison_row = np.full(STRIDE, 0x7FC00000, np.uint32).view(np.float32)
    assert digests[0] == hex64(digest64(poison_row[:E])) and digests[1] == hex64(digest64(poison_row[E:]))
    # Nothing changed: no slot, no values tensor.
    a = session(t, HELLO, setup_cmd(), _pool(digests))
    assert a[2].msg["slots"] == [] and "values" not in a[2].tensors and a[2].msg["digests"] == digests
    # One slot's state, another slot's gap: exactly those two come back.
    commit = {"op": "commit", "rows": [dict(ROW, accepted=1)]}

    class Gap(Fake):
        def commit(self, rows):
            super().commit(rows)
            self.pools[0][2, E + 1] = 7.0

    t2 = Gap()
    a = session(t2, HELLO, setup_cmd(), commit, _pool(digests), _pool(digests, layer=1))
    assert a[3].msg["slots"] == [1, 2]
    assert a[3].tensors["values"][0, :E].tolist() == [1.0] * E and a[3].tensors["values"][1, E + 1] == 7.0
    assert a[3].msg["digests"][4] == digests[4] and a[3].msg["digests"][5] != digests[5]  # slot 2: gap only
    assert a[4].msg["slots"] == [1]
    a = session(t, HELLO, setup_cmd(), _pool(digests[:-1]))
    assert a[2].msg["error"]["field"] == "known"
    a = session(t, HELLO, setup_cmd(), _pool(digests[:-1] + ["xyz"]))
    assert a[2].msg["error"]["field"] == f"known[{2 * S - 1}]"


def test_bf16_pools_cross_as_bf16_bits_and_digest_those_bytes():
    t = Fake()
    cfg = dict(CFG, state_dtype="BF16")
    a = session(t, HELLO, setup_cmd(cfg), _pool(["0"] * (2 * S)))
    assert a[2].dtypes["values"] == "BF16"
    bits = np.full(STRIDE, 0x7FC0, np.uint16)
    assert a[2].msg["digests"][0] == hex64(digest64(bits[:E])) and a[2].msg["digests"][1] == hex64(digest64(bits[E:]))


def test_committed_state_answers_the_digest_alone_when_the_judge_knows_it():
    t = Fake()
    cs = {"op": "committed_state", "layer": 1, "slot": 1}
    commit = {"op": "commit", "rows": [dict(ROW, accepted=3)]}
    a = session(t, HELLO, setup_cmd(), commit, cs)
    state = a[3].tensors["state"]
    assert state.shape == (2, 3, 2) and np.all(state == 3.0)  # layout vk: [HV, V, K]
    d = a[3].msg["digest"]
    assert d == hex64(digest64(np.full(E, 3.0, np.float32)))
    a = session(t, HELLO, setup_cmd(), commit, {**cs, "known": d}, {**cs, "known": "1234"})
    assert without_compute_time(a[3].msg) == {"ok": True, "digest": d} and "state" not in a[3].tensors
    assert "state" in a[4].tensors and a[4].msg["digest"] == d
    t.state_override = np.zeros((2, 2, 3), np.float32)  # [HV, K, V]: the kv shape, not this config's
    a = session(t, HELLO, setup_cmd(), cs)
    assert a[2].msg["error"]["field"] == "state" and "expected [2, 3, 2]" in a[2].msg["error"]["message"]
    t.state_override = np.zeros(E, np.float32)  # flat is fine
    assert session(t, HELLO, setup_cmd(), cs)[2].msg["ok"]


def test_end_of_input_and_unreadable_frames_end_the_loop():
    assert len(session(Fake(), HELLO)) == 1  # a clean end of input after any command: status 0 (checked)
    cin = io.BytesIO(encode_frame(HELLO) + b"\x05\x00\x00\x00\x00\x00\x00\x00junk!")
    cout = io.BytesIO()
    assert serve(Fake(), cin, cout) == 2


def test_nothing_but_frames_reaches_stdout_even_from_native_writes(tmp_path):
    """A real process: the target prints and writes to file descriptor 1 while serving."""
    script = tmp_path / "noisy.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(HERE)!r})
        sys.path.insert(0, {HERE!r})
        from test_serve import Fake
        from replayssm_kit.target import serve

        class Noisy(Fake):
            def step(self, rows, inputs):
                print("a stray print")
                os.write(1, b"a native write to fd 1\\n")
                return super().step(rows, inputs)

        print("before serving")  # not yet serving: plain stdout, before any frame
        sys.stdout.flush()
        sys.exit(serve(Noisy()))
    """))
    commands = b"".join(encode_frame(*c) if isinstance(c, tuple) else encode_frame(c)
                        for c in (HELLO, setup_cmd(), step_cmd(), {"op": "shutdown"}))
    p = subprocess.run([sys.executable, str(script)], input=commands, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    out = io.BytesIO(p.stdout)
    assert out.read(len(b"before serving\n")) == b"before serving\n"
    answers = []
    while (f := read_frame(out)) is not None:
        answers.append(f.msg["ok"])
    assert answers == [True, True, True, True]
    err = p.stderr.decode()
    assert "a stray print" in err and "a native write to fd 1" in err


def test_prints_go_to_stderr_when_the_frames_use_python_s_stdout(monkeypatch, capsys):
    """sys.stdout without a file descriptor (a wrapper): the frames go to its buffer, prints to stderr."""

    class Chatty(Fake):
        def step(self, rows, inputs):
            print("chatty step")
            return super().step(rows, inputs)

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, write_through=True))
    cin = io.BytesIO(b"".join(encode_frame(*c) if isinstance(c, tuple) else encode_frame(c)
                              for c in (HELLO, setup_cmd(), step_cmd())))
    assert serve(Chatty(), cin) == 0
    raw.seek(0)
    answers = []
    while (f := read_frame(raw)) is not None:
        answers.append(f.msg["ok"])
    assert answers == [True, True, True]
    assert "chatty step" in capsys.readouterr().err


def _setup_with(convention):
    cmd, tensors = setup_cmd()
    cmd = {**cmd, "setup": {**cmd["setup"], "pad_convention": convention}}
    return cmd, tensors


def test_rows_carry_the_pad_convention_and_the_graph_tail():
    # Protocol 1.2: a PAD row is the convention's sentinel, and every row from live_rows on is the graph tail
    # (a stale slot id or PAD): Row.is_pad is true for both.
    for convention, sentinel in (("minus_one", -1), ("null_block", 0), ("pad_slot", S - 1)):
        t = Fake()
        pad = dict(ROW, slot=sentinel, write_slot=sentinel, token_offset=0)
        live = dict(ROW, slot=1, write_slot=1, token_offset=0)
        stale = dict(ROW, slot=1 if sentinel != 1 else 2, write_slot=1, token_offset=0, graph_tail=True)
        cmd, tensors = step_cmd()
        cmd = {**cmd, "rows": [live, pad, stale], "live_rows": 2}
        a = session(t, HELLO, _setup_with(convention), (cmd, tensors))
        assert a[2].msg["ok"], a[2].msg
        _, rows, _ = t.calls[-1]
        assert [r.is_pad for r in rows] == [sentinel == 1, True, True]
        assert [r.graph_tail for r in rows] == [False, False, True] and rows[0].pad_sentinel == sentinel


def test_a_graph_tail_must_follow_live_rows_and_match_live_rows():
    cmd, tensors = step_cmd()
    tail = dict(ROW, graph_tail=True)
    for rows, live, field in (([tail, ROW], 1, "rows[0].graph_tail"), ([ROW, tail], 2, "rows[1].graph_tail"),
                              ([ROW, ROW], 3, "live_rows"), ([dict(ROW, graph_tail=1)], 0, "rows[0].graph_tail")):
        a = session(Fake(), HELLO, setup_cmd(), ({**cmd, "rows": rows, "live_rows": live}, tensors))
        assert a[2].msg["error"]["field"] == field, (rows, live, a[2].msg)


def test_an_unknown_pad_convention_is_refused_by_name():
    a = session(Fake(), HELLO, _setup_with("zero"))
    assert a[1].msg["error"]["field"] == "setup.pad_convention"


def test_l2norm_forms_of_1_6_are_left_out_for_an_older_judge():
    """A judge before 1.6 knows only rsqrt_mul, div_sqrt and none: the kit leaves the other claims out for it, and
    passes them unchanged to a 1.6 judge."""
    formula = "x / (sqrt(sum(x^2)) + eps)"

    class Forms(Fake):
        def capabilities(self):
            return {"l2norms": ["rsqrt_mul", formula, "div_max_norm_eps"]}

    old = session(Forms(), {**HELLO, "version": [1, 5]}, {"op": "shutdown"})
    assert old[0].msg["ok"] and old[0].msg["capabilities"]["l2norms"] == ["rsqrt_mul"]
    new = session(Forms(), {**HELLO, "version": [1, 6]}, {"op": "shutdown"})
    assert new[0].msg["capabilities"]["l2norms"] == ["rsqrt_mul", formula, "div_max_norm_eps"]


def test_step_mix_is_claimed_to_a_1_7_judge_and_a_step_that_mixes_more_is_refused():
    """step_mix (1.7): passed to a judge speaking 1.7, left out for an older one; malformed claims are refused
    naming the field; a step that mixes more than claimed is refused naming rows, before the target sees it."""

    class OneWidth(Fake):
        def capabilities(self):
            return {"name": "one-width", "max_T": 4, "step_mix": {"one_width": True}}

    new = session(OneWidth(), {**HELLO, "version": [1, 7]}, {"op": "shutdown"})
    assert new[0].msg["ok"] and new[0].msg["capabilities"]["step_mix"] == {"one_width": True}
    old = session(OneWidth(), {**HELLO, "version": [1, 6]}, {"op": "shutdown"})
    assert old[0].msg["ok"] and "step_mix" not in old[0].msg["capabilities"]

    for bad in ({"one_width": 1}, {"widths": True}, ["one_width"]):
        class Bad(Fake):
            def capabilities(self, bad=bad):
                return {"step_mix": bad}
        a = session(Bad(), {**HELLO, "version": [1, 7]}, {"op": "shutdown"})
        assert not a[0].msg["ok"] and a[0].msg["error"]["field"] == "capabilities.step_mix", (bad, a[0].msg)

    t = OneWidth()
    msg, tensors = step_cmd(n=3)
    mixed = dict(msg, rows=[ROW, dict(ROW, slot=2, write_slot=2, T=1, token_offset=2)])
    a = session(t, {**HELLO, "version": [1, 7]}, setup_cmd(), (mixed, tensors), step_cmd(n=2), {"op": "shutdown"})
    assert not a[2].msg["ok"] and a[2].msg["error"]["field"] == "rows", a[2].msg
    assert "row 1 is 1 tokens wide and row 0 2" in a[2].msg["error"]["message"]
    assert a[3].msg["ok"], a[3].msg  # one width: served
    assert [c[0] for c in t.calls].count("step") == 1  # the refused step never reached the target


def test_step_mix_excess_names_what_a_step_mixes():
    from replayssm_kit.rows import Row, step_mix_excess
    v = Row(slot=0, write_slot=0, T=2, token_offset=0, accepted=0, kind="verify", fresh=False)
    p = Row(slot=1, write_slot=1, T=2, token_offset=2, accepted=2, kind="prefill", fresh=True)
    pad = Row(slot=-1, write_slot=-1, T=2, token_offset=4, accepted=0, kind="verify", fresh=False)
    assert step_mix_excess([v, p, pad], {}) == ""
    assert step_mix_excess([v, p, pad], {"one_width": True}) == ""
    assert "prefill apart" in step_mix_excess([v, p], {"prefill_apart": True})
    assert "pad a prefill step" in step_mix_excess([p, pad], {"prefill_apart": True})
    assert step_mix_excess([v, pad], {"prefill_apart": True}) == ""
    assert "one width" in step_mix_excess([v, Row(**{**v.__dict__, "T": 3})], {"one_width": True})


def test_self_check_is_claimed_to_a_1_8_judge_and_malformed_claims_are_refused():
    """self_check (1.8): passed to a judge speaking 1.8, left out for an older one (which holds the target to the
    default claim); a malformed claim is refused naming the field."""

    class Claims(Fake):
        def capabilities(self):
            return {"name": "self", "self_check": {"exact": ["repeat", "permute"], "tier": "tf32"}}

    new = session(Claims(), {**HELLO, "version": [1, 8]}, {"op": "shutdown"})
    assert new[0].msg["ok"] and new[0].msg["capabilities"]["self_check"] == {"exact": ["repeat", "permute"],
                                                                              "tier": "tf32"}
    old = session(Claims(), {**HELLO, "version": [1, 7]}, {"op": "shutdown"})
    assert old[0].msg["ok"] and "self_check" not in old[0].msg["capabilities"]

    for bad in ({"exact": ["reorder"]}, {"exact": ["repeat", "repeat"]}, {"tier": "fp16"}, {"exactly": []},
                ["repeat"], {"exact": "repeat"}):
        class Bad(Fake):
            def capabilities(self, bad=bad):
                return {"self_check": bad}
        a = session(Bad(), {**HELLO, "version": [1, 8]}, {"op": "shutdown"})
        assert not a[0].msg["ok"] and a[0].msg["error"]["field"] == "capabilities.self_check", (bad, a[0].msg)
