#!/usr/bin/env python3
"""Chart of a `replayssm bench kernels` (or replayssm_bench) CSV.

Three panels against the batch size, one line per draft window T:
  1. step time: ReplaySSM step (verify + capture + commit, solid) and full-state step (verify writing T
     states + commit copy, dashed);
  2. speedup of the ReplaySSM step over the full-state step (the 1.8x target of T = 4, batch 128 marked);
  3. ReplaySSM commit bytes as % of the device-to-device copy bandwidth measured in the same run (the 85%
     target for batch >= 64 marked), with the full-state commit copy for reference.

With --before PREVIOUS.csv (same columns, e.g. the previous kernels measured in the same run), the previous
ReplaySSM step times and commit percentages are drawn thin and grey for comparison.

Usage: plot.py RESULTS.csv OUT.png [--before PREVIOUS.csv] [--title TEXT]
Needs matplotlib (e.g. in a virtual environment outside the repository).
"""
import argparse
import csv
import sys
from collections import defaultdict


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--before", default=None, help="CSV of the previous kernels, drawn grey")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def by_window(rows):
        out = defaultdict(list)
        for r in rows:
            out[int(r["T"])].append(r)
        for t in out:
            out[t].sort(key=lambda r: int(r["batch"]))
        return out

    rows = load(args.csv)
    by_t = by_window(rows)
    before = by_window(load(args.before)) if args.before else {}

    first = rows[0]
    title = args.title or (
        f"{first['preset']} on {first['gpu']}, {first['date']} "
        f"(copy {float(first['copy_GBps']):.0f} GB/s, accepted n = T)"
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    ax_t, ax_s, ax_c = axes
    for i, t in enumerate(sorted(by_t)):
        rs = by_t[t]
        b = [int(r["batch"]) for r in rs]
        c = colors[i % len(colors)]
        ax_t.plot(b, [float(r["step_replay_us"]) / 1000 for r in rs], "o-", color=c, label=f"ReplaySSM T={t}")
        ax_t.plot(b, [float(r["step_full_us"]) / 1000 for r in rs], "s--", color=c, label=f"full-state T={t}")
        ax_s.plot(b, [float(r["speedup"]) for r in rs], "o-", color=c, label=f"T={t}")
        ax_c.plot(b, [float(r["commit_replay_pct_copy"]) for r in rs], "o-", color=c, label=f"ReplaySSM commit T={t}")
    for i, t in enumerate(sorted(before)):
        rs = before[t]
        b = [int(r["batch"]) for r in rs]
        lab = "previous kernels (grey)" if i == 0 else None
        ax_t.plot(b, [float(r["step_replay_us"]) / 1000 for r in rs], ":", color="grey", lw=1, label=lab)
        ax_s.plot(b, [float(r["speedup"]) for r in rs], ":", color="grey", lw=1, label=lab)
        ax_c.plot(b, [float(r["commit_replay_pct_copy"]) for r in rs], ":", color="grey", lw=1, label=lab)
    # The commit copy moves the same bytes whatever T is: one line (T = the smallest).
    rs = by_t[min(by_t)]
    ax_c.plot([int(r["batch"]) for r in rs], [float(r["commit_copy_pct_copy"]) for r in rs], "k:", marker="x",
              label="full-state commit copy")

    ax_t.set_title("step time (24 layers)")
    ax_t.set_ylabel("ms")
    ax_t.set_yscale("log")
    ax_s.set_title("full-state step / ReplaySSM step")
    ax_s.set_ylabel("speedup (x)")
    ax_s.axhline(1.0, color="grey", lw=0.8)
    ax_s.plot([128], [1.8], "r*", ms=12, label="target 1.8x (T=4, batch 128)")
    ax_c.set_title("commit bytes / time, % of copy bandwidth")
    ax_c.set_ylabel("%")
    ax_c.set_ylim(0, 100)
    ax_c.axhline(85, color="r", lw=0.8, ls="--", label="target 85% (batch >= 64)")
    batches = sorted({int(r["batch"]) for r in rows})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("batch (requests)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
