"""The conv component of the lifecycle (protocol 1.5): `conv_state` declined by default, claimed by overriding
the four conv_* methods, never claimed to a judge before 1.5; setup.conv and the conv commands parsed strictly;
the NumPy example's windows follow the committed history exactly (independent slicing of the raw inputs here),
leave other slots and gaps untouched, and its seeded conv_commit_keeps_window_tail is caught by a campaign."""
import os
import sys

import numpy as np
import pytest

from conftest import HERE
from test_exec_e2e import COMMAND
from test_serve import CFG, HELLO, S, Fake, session, setup_cmd
from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits
from replayssm_kit.pytest_helper import fuzz_target

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

HELLO_1_5 = {**HELLO, "version": [1, 5]}
C = 2 * CFG["H"] * CFG["K"] + CFG["HV"] * CFG["V"]  # 10 channels
W = 3
CONV = {"kernel_size": W, "activation": "silu", "bias": True, "state_dtype": "BF16", "seed": "7"}


MODEL = {**CFG, "l2norm": "rsqrt_mul", "l2_eps": 1e-6, "q_scale": 0.0, "round_beta_to_act": False,
         "kda_gate": "softplus", "lower_bound": -5.0}


def conv_setup_cmd(conv=CONV, drop=None, weight_shape=(C, W)):
    msg, tensors = setup_cmd(MODEL)
    msg["setup"] = {**msg["setup"], "conv": conv}
    rng = np.random.default_rng(5)
    for l in range(CFG["num_layers"]):
        tensors[f"conv_weight.{l}"] = (rng.standard_normal(weight_shape).astype(np.float32) * 0.5, "F32")
        tensors[f"conv_bias.{l}"] = (rng.standard_normal(C).astype(np.float32) * 0.1, "F32")
    tensors.pop(drop, None)
    return msg, tensors


def row(slot, T, offset, kind="verify", fresh=False, accepted=0, write_slot=None):
    return {"slot": slot, "write_slot": slot if write_slot is None else write_slot, "T": T, "token_offset": offset,
            "accepted": accepted, "kind": kind, "fresh": fresh}


def conv_step_cmd(rows, x):
    n = x[0].shape[0]
    return {"op": "conv_step", "rows": rows, "total_tokens": n}, {f"x.{l}": (x[l], "BF16") for l in range(len(x))}


def bf16(a):
    return bf16_bits_to_f32(f32_to_bf16_bits(np.asarray(a, dtype=np.float32)))


class Convs(Fake):
    def conv_step(self, rows, x):
        return [np.zeros_like(v) for v in x]

    def conv_commit(self, rows):
        pass

    def conv_committed_state(self, layer, slot):
        return np.zeros((C, W - 1), np.float32)

    def conv_pool(self, layer):
        return np.zeros((S, C * (W - 1) + 4), np.float32)


def test_conv_state_is_declined_by_default_and_a_conv_setup_then_refused():
    a = session(Fake(), HELLO_1_5, conv_setup_cmd())
    assert a[0].msg["capabilities"]["conv_state"] is False
    assert not a[1].msg["ok"] and a[1].msg["error"]["field"] == "setup.conv"


def test_overriding_the_four_methods_claims_it_only_to_a_judge_speaking_1_5():
    assert session(Convs(), HELLO_1_5)[0].msg["capabilities"]["conv_state"] is True
    a = session(Convs(), {**HELLO, "version": [1, 4]}, conv_setup_cmd())
    assert a[0].msg["capabilities"]["conv_state"] is False and a[1].msg["error"]["field"] == "setup.conv"

    class Partial(Fake):
        def capabilities(self):
            return {"conv_state": True}

        def conv_step(self, rows, x):
            return []

    a = session(Partial(), HELLO_1_5)
    assert a[0].msg["error"]["field"] == "capabilities.conv_state" and "conv_pool" in a[0].msg["error"]["message"]


@pytest.mark.parametrize("conv,drop,wshape,field", [
    ({**CONV, "kernel_size": 9}, None, (C, W), "setup.conv.kernel_size"),
    ({**CONV, "activation": "gelu"}, None, (C, W), "setup.conv.activation"),
    ({**CONV, "bias": 1}, None, (C, W), "setup.conv.bias"),
    ({**CONV, "state_dtype": "F16"}, None, (C, W), "setup.conv.state_dtype"),
    ({k: v for k, v in CONV.items() if k != "seed"}, None, (C, W), "setup.conv.seed"),
    ({**CONV, "extra": 1}, None, (C, W), "setup.conv.extra"),
    (CONV, "conv_bias.1", (C, W), "conv_bias.1"),
    (CONV, None, (C, W + 1), "conv_weight.0"),
])
def test_a_malformed_conv_setup_is_refused_naming_the_field(conv, drop, wshape, field):
    a = session(Convs(), HELLO_1_5, conv_setup_cmd(conv, drop, wshape))
    assert not a[1].msg["ok"] and a[1].msg["error"]["field"] == field, a[1].msg


def test_conv_commands_check_shapes_and_need_a_conv_setup():
    x = [np.zeros((2, C), np.float32)] * 2
    a = session(Convs(), HELLO_1_5, setup_cmd(), conv_step_cmd([row(1, 2, 0)], x), conv_setup_cmd(),
                conv_step_cmd([row(1, 2, 0)], [np.zeros((2, C + 1), np.float32)] * 2),
                conv_step_cmd([row(1, 2, 0)], x))
    assert a[2].msg["error"]["field"] == "op" and "setup.conv" in a[2].msg["error"]["message"]
    assert a[4].msg["error"]["field"] == "x.0" and "shape" in a[4].msg["error"]["message"]
    assert a[5].msg["ok"] and sorted(a[5].tensors) == ["y.0", "y.1"] and a[5].tensors["y.0"].shape == (2, C)


def history_window(x_hist):
    """The truth of a committed window: the last W-1 columns of [zeros | history], in the conv state dtype."""
    cols = np.concatenate([np.zeros((C, W - 1), np.float32), np.asarray(x_hist, np.float32).T], axis=1)
    return bf16(cols[:, -(W - 1):])


@pytest.mark.parametrize("fault", [None, "conv_commit_keeps_window_tail"])
def test_the_example_rolls_its_windows_back_to_the_accepted_length(fault):
    rng = np.random.default_rng(11)
    x1 = [bf16(rng.standard_normal((4, C))) for _ in range(2)]  # a fresh prefill of 4 tokens into slot 1
    x2 = [bf16(rng.standard_normal((3, C))) for _ in range(2)]  # a verify window of 3, 2 accepted
    pre = [row(1, 4, 0, kind="prefill", fresh=True, accepted=4)]
    ver = [row(1, 3, 0), {**row(-1, 1, 3), "write_slot": -1}]  # a PAD row after it
    x2p = [np.concatenate([v, bf16(rng.standard_normal((1, C)))]) for v in x2]
    ver_c = [{**ver[0], "accepted": 2}, ver[1]]
    known = ["0"] * (2 * S)
    t = NumpyReplay(fault)
    a = session(t, HELLO_1_5, conv_setup_cmd(), conv_step_cmd(pre, x1), conv_step_cmd(ver, x2p),
                {"op": "conv_commit", "rows": ver_c}, {"op": "conv_committed_state", "layer": 1, "slot": 1},
                {"op": "conv_pool", "layer": 1, "known": known})
    assert all(f.msg["ok"] for f in a), [f.msg for f in a if not f.msg["ok"]]
    assert not np.any(a[3].tensors["y.1"][3]), "PAD row outputs must be zeros"
    got = a[5].tensors["state"]  # BF16 arrives widened to float32
    want = history_window(np.concatenate([x1[1], x2[1][:2]]))
    if fault is None:
        assert np.array_equal(got, want), (got, want)
    else:
        assert not np.array_equal(got, want), "the seeded fault must change the committed window"
    pool = a[6].tensors["values"]  # every slot is new to the judge: all of them come back
    assert a[6].msg["slots"] == list(range(S))
    assert pool.shape == (S, C * (W - 1) + 4)
    values = pool
    assert np.all(np.isnan(values[[0, 2]])), "unused slots keep the poison"
    assert np.all(np.isnan(values[1, C * (W - 1):])), "the gap keeps the poison"
    assert np.array_equal(values[1, : C * (W - 1)].reshape(C, W - 1), got)


def test_the_example_passes_conv_campaigns_and_its_seeded_conv_fault_is_caught(cli, tmp_path):  # noqa: F811
    ok = fuzz_target(COMMAND, preset="tiny-kda", cases=12, seed=2, extra_args=("--conv", "on"), dump_dir=str(tmp_path),
                     complete=False)
    assert ok[0]["cases_passed"] == 12 and "conv" not in ok[0]["not_covered"], ok[0]
    with pytest.raises(pytest.fail.Exception) as e:
        fuzz_target(f"{COMMAND} --fault conv_commit_keeps_window_tail", preset="tiny-gdn", cases=40, seed=1,
                    extra_args=("--conv", "on"), dump_dir=str(tmp_path))
    assert "conv" in str(e.value), str(e.value)
