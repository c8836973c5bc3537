#!/usr/bin/env python3
"""Draw weft-bench results: throughput over time, node-delay CDF, TTFB/TTLB
CDFs, and (for comparisons) bars of throughput and CPU-seconds per GiB.

usage: plot.py RESULTS.json OUT_DIR   (prints the PNG paths it wrote)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    data = json.load(open(src))
    written = []

    def save(fig, name):
        p = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    if data.get("kind") == "soak":
        r = data["result"]
        t = [x["t_s"] / 60 for x in r["samples"]]
        fig, ax = plt.subplots(figsize=(9, 4.5))
        ax.plot(t, [x["rss_bytes"] / 2**20 for x in r["samples"]], color="tab:blue", label="RSS (MiB)")
        ax.set_xlabel("minutes")
        ax.set_ylabel("weft RSS, MiB", color="tab:blue")
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(t, [x["fds"] for x in r["samples"]], color="tab:orange", label="open fds")
        ax2.set_ylabel("open file descriptors", color="tab:orange")
        ax2.set_ylim(bottom=0)
        ax.set_title("soak: %.1f min, %d churn loads, %d migrations, %d cells, %d lost"
                     % (data["procedure"]["minutes"], r["churn_runs"], r["migrations"], r["cells"], r["lost"]))
        ax.grid(alpha=0.3)
        save(fig, "soak.png")
        for p in written:
            print(p)
        return

    if data.get("kind") == "scale":
        # RSS per idle circuit and CPU-s/GiB against circuits, tor and weft
        # on the same axes.
        steps = data["steps"]
        figs = [
            ("rss_per_idle_circuit", "RSS per idle circuit, bytes", "scale_rss_per_circuit.png",
             "RSS per circuit ((idle − connections only) / circuits)"),
            ("rss_per_idle_circuit_second_half", "RSS per idle circuit, bytes",
             "scale_rss_per_circuit_second_half.png",
             "RSS per circuit of the second half ((idle − first half) / second half)"),
            ("cpu_s_per_gib", "CPU-seconds per GiB (bulk circuits)", "scale_cpu_per_gib.png",
             "CPU-s/GiB of the %d bulk circuits among idle ones" % data["procedure"]["active"]),
        ]
        for key, ylabel, name, title in figs:
            fig, ax = plt.subplots(figsize=(7.5, 4.5))
            for side, color in (("tor", "tab:orange"), ("weft", "tab:blue")):
                pts = [(s[side]["circuits_built"], s[side][key]) for s in steps
                       if s.get(side) and s[side].get(key) is not None]
                if pts:
                    lbl = steps[0][side]["label"] if steps[0].get(side) else side
                    ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=color, label=lbl)
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_xlabel("circuits (built)")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(alpha=0.3, which="both")
            ax.legend()
            save(fig, name)
        for p in written:
            print(p)
        return

    if data.get("kind") == "multipath":
        rows = data["rows"]
        sizes = sorted({r["bytes"] for r in rows})
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        width = 0.38
        for k, size in enumerate(sizes):
            rs = [r for r in rows if r["bytes"] == size]
            legs = [r["legs"] for r in rs]
            x = [l + (k - 0.5) * width for l in legs]
            axes[0].bar(x, [r["speedup"] for r in rs], width, label="weft exit, %d KB" % (size // 1000))
            px = [xx for xx, r in zip(x, rs) if r["paper_speedup"]]
            py = [r["paper_speedup"] for r in rs if r["paper_speedup"]]
            axes[0].plot(px, py, "k_", markersize=18, markeredgewidth=2,
                         label="paper Table I" if k == 0 else None)
            axes[1].bar(x, [r["reorder_peak_bytes"] / 1000 for r in rs], width, label="%d KB" % (size // 1000))
        axes[0].set_xlabel("legs (circuits) in the conflux set")
        axes[0].set_ylabel("speed-up over one leg (median)")
        axes[0].set_title("Multipath transfer speed-up")
        axes[1].axhspan(90, 280, color="0.85", zorder=0, label="paper: 90-280 KB")
        axes[1].set_xlabel("legs")
        axes[1].set_ylabel("client reorder buffer peak, KB")
        axes[1].set_title("Receiver reorder buffer")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.legend()
        save(fig, "multipath.png")
        for p in written:
            print(p)
        return

    if data.get("kind") in ("e2e", "exit"):
        exit_mode = data["kind"] == "exit"
        role = " as exit" if exit_mode else " as middle"
        path = "relay0 -> relay1 -> exit" if exit_mode else "relay0 -> middle -> exit"
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, key, title in ((axes[0], "cdf_ttfb", "Time to first byte"), (axes[1], "cdf_ttlb", "Time to last byte")):
            for r in data["results"]:
                if r[key]:
                    x, y = zip(*r[key])
                    ax.plot(x, y, marker=".", label=r["target"] + role)
            if not any(r[key] for r in data["results"]):
                ax.text(0.5, 0.5, "uploads only: nothing downloaded", ha="center", transform=ax.transAxes)
            ax.set_xlabel(f"ms per stream (stock tor client, {path})")
            ax.set_ylabel("CDF")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
        save(fig, data["kind"] + "_cdf.png")
        if exit_mode:
            # CPU per GiB and throughput of every run, by target.
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
            targets = sorted({r["target"] for r in data["results"]})
            for ax, key, scale, title in (
                (axes[0], "cpu_s_per_gib", 1, "CPU-seconds per GiB (lower is better)"),
                (axes[1], "bytes_per_s", 2**-20, "MiB/s under the CPU cap"),
            ):
                for i, t in enumerate(targets):
                    v = [r[key] * scale for r in data["results"] if r["target"] == t]
                    ax.scatter([i] * len(v), v, label=t)
                ax.set_xticks(range(len(targets)))
                ax.set_xticklabels(targets)
                ax.set_title(title)
                ax.grid(alpha=0.3)
            save(fig, "exit_cpu_throughput.png")
        for p in written:
            print(p)
        return

    runs = data["runs"]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        t = [s["t_s"] for s in r["samples"]]
        v = [s["total"] / 2**20 for s in r["samples"]]
        ax.plot(t, v, label=r["label"])
    if runs:
        ax.axvline(runs[0]["procedure"]["warmup_s"], color="grey", ls=":", lw=1)
    ax.set_xlabel("seconds since data started (dotted: end of warm-up)")
    ax.set_ylabel("MiB/s relayed (both directions, 500 ms samples)")
    ax.set_title("Throughput through the target")
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, "throughput.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        if r["cdf_delay"]:
            x, y = zip(*r["cdf_delay"])
            ax.plot(x, y, label=r["label"])
    floor = next((r["cdf_floor"] for r in runs if r["cdf_floor"]), None)
    if floor:
        x, y = zip(*floor)
        ax.plot(x, y, "k--", label="loopback floor (no target)")
    ax.set_xscale("log")
    ax.set_xlabel("ms from stamp to arrival (node-based delay incl. floor)")
    ax.set_ylabel("CDF")
    ax.set_title("Node-based delay of marked cells")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    save(fig, "node_delay_cdf.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, title in ((axes[0], "cdf_ttfb", "Time to first byte"), (axes[1], "cdf_ttlb", "Time to last byte")):
        for r in runs:
            if r[key]:
                x, y = zip(*r[key])
                ax.plot(x, y, label=r["label"])
        ax.set_xscale("log")
        ax.set_xlabel("ms per transfer")
        ax.set_ylabel("CDF")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    save(fig, "ttfb_ttlb_cdf.png")

    if any(r.get("cdf_web_ttlb") for r in runs):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in runs:
            if r.get("cdf_web_ttlb"):
                x, y = zip(*r["cdf_web_ttlb"])
                ax.plot(x, y, label="%s (bulk %.1f MiB/s)" % (r["label"], r["bulk_bytes_per_s"] / 2**20))
        ax.set_xlabel("ms from request to last cell of an 87 KB fetch")
        ax.set_ylabel("CDF")
        ax.set_title("Web fetches next to bulk circuits (Tang & Goldberg)")
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, "web_ttlb_cdf.png")

    if len(runs) > 1 and not any(r.get("cdf_web_ttlb") for r in runs):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        labels = [r["label"] for r in runs]
        axes[0].bar(labels, [r["max_sustained_bytes_per_s"] / 2**20 for r in runs])
        axes[0].set_ylabel("MiB/s (max sustained)")
        axes[0].set_title("Throughput")
        axes[1].bar(labels, [r["cpu_s_per_gib"] for r in runs], color="tab:orange")
        axes[1].set_ylabel("CPU-seconds per GiB relayed")
        axes[1].set_title("Cost")
        for ax in axes:
            ax.tick_params(axis="x", rotation=30)
            ax.grid(alpha=0.3, axis="y")
        save(fig, "compare.png")

    for p in written:
        print(p)


if __name__ == "__main__":
    main()
