#!/usr/bin/env python3
"""The benchmarks' plots: SVG files drawn from the JSON lines the bench scripts write to bench/results.

    python3 bench/plot.py                        # every plot, from the JSON in bench/results
    python3 bench/plot.py --from FILE.jsonl ...  # only the plots drawn from FILE (each bench script calls this)
    python3 bench/plot.py --list                 # which plot comes from which files

Each plot is `bench/results/<name>.svg`, shown in BENCHMARKS.md (or RELIABILITY.md) beside the table of the same
data. The plots are only ever drawn by this script, from the JSON lines: rerunning a bench script redraws its plots.

matplotlib, because bench/ is Python already and these scripts already parse the JSON: no new Rust dependency, and
a plotting library kept up for over twenty years. It is installed with pip if missing, as kazoo is. The SVG
files are kept small and the same from run to run on the same data: text as text, a fixed `svg.hashsalt` for the
ids, no date in the metadata; white background, so that they read in GitHub's light and dark themes alike.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


def ensure_matplotlib():
    """matplotlib, installed with pip if missing (as the bench scripts install kazoo), rendering without a display."""
    try:
        import matplotlib
    except ImportError:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "matplotlib"]
        print("plot.py: installing matplotlib for %s" % sys.executable, file=sys.stderr)
        if subprocess.call(pip) != 0:
            subprocess.check_call(pip + ["--break-system-packages"])
        import importlib
        importlib.invalidate_caches()
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({
        "svg.hashsalt": "zk-partitioner",  # the ids of clip paths and the like: the same on every run
        "svg.fonttype": "none",  # text as text, not glyph outlines: a fraction of the size
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "sans-serif"],
        "font.size": 9.5,
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "axes.labelsize": 9.5,
        "legend.fontsize": 8.5,
        "legend.framealpha": 0.9,
        "figure.facecolor": "white",
        "axes.facecolor": "white",
        "savefig.facecolor": "white",
        "axes.edgecolor": "#444444",
        "axes.grid": True,
        "grid.color": "#dddddd",
        "grid.linewidth": 0.6,
        "axes.axisbelow": True,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "lines.linewidth": 1.6,
        "path.simplify": True,
    })
    return plt


# One colour per implementation or mode, the same in every plot (Okabe-Ito: told apart with any colour vision).
MODES = {
    "kazoo": ("kazoo 2.11 (eager, stride)", "#D55E00"),
    "eager-stride": ("eager + KazooStride (default)", "#0072B2"),
    "eager-rendezvous": ("eager + Rendezvous", "#56B4E9"),
    "incremental-rendezvous": ("incremental + Rendezvous", "#009E73"),
    "incremental-rendezvous-session-aware": ("incremental + Rendezvous + SessionAware", "#CC79A7"),
    "incremental-rendezvous-static": ("incremental + Rendezvous + static membership", "#E69F00"),
    "before": ("incremental + Rendezvous, before the fast path", "#999999"),
    "incremental-weighted": ("incremental + WeightedRendezvous", "#F0E442"),
}
IMPLS = {"rust": ("zk-partitioner", "#0072B2"), "kazoo": ("kazoo 2.11", "#D55E00")}
INK = "#222222"
MUTED = "#666666"


# --- helpers --------------------------------------------------------------------------------------------------------

def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def rel(path):
    return os.path.relpath(path, ROOT)


def provenance(path):
    """'run <date>, crate at <commit>' from the markdown the same script wrote beside the JSON, where it says so."""
    md = os.path.splitext(path)[0] + ".md"
    try:
        with open(md) as f:
            text = f.read()
    except OSError:
        return ""
    m = re.search(r"Run (\d{4}-\d\d-\d\d(?: \d\d:\d\d(?:-\d\d:\d\d)? UTC)?).*?crate at ([0-9a-f]{7,}[^.;]*?)[.;]",
                  text, re.S)
    if not m:
        return ""
    crate = m.group(2).strip()
    if "+" in crate:
        crate = crate.split("+")[0].strip() + " + uncommitted changes"
    return "run %s, crate at %s" % (m.group(1), crate)


def source_note(paths, extra=""):
    parts = []
    for p in paths:
        where = provenance(p)
        parts.append("%s (%s)" % (rel(p), where) if where else rel(p))
    return ("%s. " % extra if extra else "") + "Data: " + "; ".join(parts) + "."


def footnote(fig, text):
    """The figure's source line, under everything (as the figure's x label, so that the layout makes room for it)."""
    import textwrap
    width = int(fig.get_figwidth() * 17)
    fig.supxlabel("\n".join(textwrap.wrap(text, width)), x=0.01, ha="left", fontsize=7.5, color=MUTED,
                  linespacing=1.3)


def spread(n, width):
    """Deterministic horizontal offsets for n dots of one group (a golden-ratio sequence: no two alike, no RNG)."""
    return [((i * 0.6180339887) % 1.0 - 0.5) * width for i in range(n)]


def fmt_seconds(v):
    """Three significant digits at most, in the unit that reads best: 4.8 ms, 167 ms, 1.19 s, 266 s."""
    if v <= 0:
        return "0"
    x, unit = v * 1e6, "µs"
    for factor, bigger in ((1e3, "ms"), (1e3, "s")):
        if float("%.3g" % x) < 1000:
            break
        x, unit = x / factor, bigger
    return "%s %s" % ("%.3g" % x if x < 1000 else "%.0f" % x, unit)


def seconds_axis(ax, axis="y"):
    from matplotlib.ticker import FuncFormatter
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _: fmt_seconds(v)))


def thousands(v):
    return "{:,.0f}".format(v)


def median(xs):
    return statistics.median(xs) if xs else None


PNG_DIR = None  # --png DIR: a PNG twin of each plot there, to look at (never committed)


def save(plt, fig, out):
    fig.savefig(out, format="svg", metadata={"Date": None})
    if PNG_DIR:
        fig.savefig(os.path.join(PNG_DIR, os.path.basename(out)[:-4] + ".png"), format="png", dpi=110)
    plt.close(fig)
    print("plot.py: wrote %s (%.1f kB)" % (rel(out), os.path.getsize(out) / 1024.0), file=sys.stderr)


# --- 1. time to ACQUIRED against item count (bench/run.sh) --------------------------------------------------------

def plot_acquired(plt, inputs, out):
    (path,) = inputs
    records = [r for r in load(path) if r.get("scenario") == "single" and r.get("net_s") is not None]
    fig, ax = plt.subplots(figsize=(7.6, 4.9), layout="constrained")
    sizes = sorted({r["n"] for r in records})
    medians = {}
    runs_by = {}
    for impl in ("kazoo", "rust"):
        label, colour = IMPLS[impl]
        for mode, marker, style, nudge in (("fresh", "o", "-", 0.96), ("reused", "s", "--", 1.04)):
            xs, ys, lo, hi = [], [], [], []
            for n in sizes:
                vals = [r["net_s"] for r in records if r["impl"] == impl and r["mode"] == mode and r["n"] == n]
                if not vals:
                    continue
                m = median(vals)
                medians[(impl, mode, n)] = m
                runs_by.setdefault(impl, {})[n] = len(vals)
                xs.append(n * nudge)
                ys.append(m)
                lo.append(m - min(vals))
                hi.append(max(vals) - m)
                ax.scatter([n * nudge] * len(vals), vals, s=9, color=colour, alpha=0.35, linewidths=0, zorder=2)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, marker=marker, markersize=5.5, linestyle=style,
                            capsize=3, elinewidth=1, label="%s, %s path" % (label, mode), zorder=3)
    # kazoo ÷ zk-partitioner of the medians, between the two lines at each size.
    for n in sizes:
        ratios = []
        for mode in ("fresh", "reused"):
            k, r = medians.get(("kazoo", mode, n)), medians.get(("rust", mode, n))
            if k and r:
                ratios.append((mode, k / r))
        if ratios:
            k = min(medians[("kazoo", m, n)] for m, _ in ratios)
            r = max(medians[("rust", m, n)] for m, _ in ratios)
            ax.text(n, (k * r) ** 0.5, "kazoo ÷ zk-partitioner\n" + "\n".join("%s %.0f×" % x for x in ratios),
                    ha="center", va="center", fontsize=8, color=INK,
                    bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="#bbbbbb", linewidth=0.6))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([thousands(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlim(sizes[0] / 1.6, sizes[-1] * 1.6)
    seconds_axis(ax)
    ax.set_xlabel("items (log scale)")
    ax.set_ylabel("time to ACQUIRED, net of time_boundary (log scale)")
    ax.set_title("One member taking N items: zk-partitioner against kazoo 2.11")
    ax.legend(loc="upper left", ncol=2)
    runs = "; ".join("%s: %s" % (IMPLS[i][0], ", ".join("%d" % runs_by[i][n] for n in sizes if n in runs_by[i]))
                     for i in ("rust", "kazoo") if i in runs_by)
    footnote(fig, source_note([path], "Median of the runs (%s at %s items), bars min–max, dots every run; one "
                                      "ZooKeeper, runs alternating" % (runs, ", ".join(thousands(n) for n in sizes))))
    save(plt, fig, out)


# --- 2. reaction to a party change (bench/run.sh) -------------------------------------------------------------------

def plot_reaction(plt, inputs, out):
    (path,) = inputs
    records = [r for r in load(path) if r.get("scenario") in ("abort", "release") and r.get("latency_s") is not None]
    groups = [("abort", "A member mid-allocation gives up\n(party change → its first lock node deleted)"),
              ("release", "An ACQUIRED member reports RELEASE\n(party change → its RELEASE line)")]
    groups = [g for g in groups if any(r["scenario"] == g[0] for r in records)]
    fig, axes = plt.subplots(1, len(groups), figsize=(7.8, 4.8), layout="constrained", sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (scenario, title) in zip(axes, groups):
        ticks = []
        for x, impl in enumerate(("rust", "kazoo")):
            label, colour = IMPLS[impl]
            vals = sorted(r["latency_s"] for r in records if r["scenario"] == scenario and r["impl"] == impl)
            if not vals:
                continue
            ax.scatter([x + d for d in spread(len(vals), 0.45)], vals, s=15, color=colour, alpha=0.7, linewidths=0,
                       zorder=3)
            m = median(vals)
            ax.hlines(m, x - 0.3, x + 0.3, color=INK, linewidth=2, zorder=4)
            ticks.append((x, "%s\nmedian %s\nworst %s (%d)" % (label, fmt_seconds(m), fmt_seconds(vals[-1]),
                                                                   len(vals))))
        ax.axhline(1.0, color=MUTED, linestyle=":", linewidth=1)
        ax.text(1.45, 1.0, "max_reaction_time 1 s", va="bottom", ha="right", fontsize=7.5, color=MUTED)
        if scenario == "abort":
            ax.axhline(0.05, color="#C00000", linestyle="--", linewidth=1)
            ax.text(1.45, 0.05, "target: p99 ≤ 50 ms", va="bottom", ha="right", fontsize=7.5, color="#C00000")
        ax.set_xticks([t[0] for t in ticks])
        ax.set_xticklabels([t[1] for t in ticks], fontsize=8)
        ax.set_xlim(-0.55, 1.55)
        ax.grid(axis="x", visible=False)
        ax.set_title(title, fontsize=9.5)
    axes[0].set_yscale("log")
    axes[0].set_ylim(0.001, 2.0)
    seconds_axis(axes[0])
    axes[0].set_ylabel("from the party change to the reaction (log scale)")
    n = sorted({r["n"] for r in records})
    fig.suptitle("Reaction to a party change: one member over %s items, max_reaction_time 1 s" % "/".join(
        thousands(x) for x in n), fontweight="bold")
    footnote(fig, source_note([path], "Every sample (dots) and the median (bar); the clock starts at the party "
                                      "node's ctime, stamped by ZooKeeper"))
    save(plt, fig, out)


# --- the rebalance benchmark: one party change in a party of 10 (bench/rebalance.sh) --------------------------------

SCENARIO_TITLES = {"join": "join", "leave": "leave\n(SIGTERM)", "crash": "crash\n(SIGKILL)",
                   "stall": "ZooKeeper\nstalls"}


def grouped_bars(ax, groups, modes, value, dots=True, width=0.8, label_fmt=None):
    """Bars of the median of `value(records)` per group and mode, every run as a dot; returns the bar centres."""
    centres = {}
    for g, (group, recs) in enumerate(groups):
        present = [m for m in modes if any(r["mode"] == m for r in recs)]
        w = width / max(1, len(present))
        for i, mode in enumerate(present):
            vals = [value(r) for r in recs if r["mode"] == mode]
            vals = [v for v in vals if v is not None]
            if not vals:
                continue
            x = g - width / 2 + w * (i + 0.5)
            label, colour = MODES[mode]
            ax.bar(x, median(vals), w * 0.9, color=colour, label=label, zorder=2)
            if dots and len(vals) > 1:
                ax.scatter([x + d for d in spread(len(vals), w * 0.5)], vals, s=7, color=INK, alpha=0.55,
                           linewidths=0, zorder=3)
            if label_fmt:
                ax.annotate(label_fmt(median(vals)), (x, max(vals)), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6.5, color=INK, rotation=90)
            centres[(group, mode)] = x
    return centres


def dedup_legend(ax, **kwargs):
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    return ax.legend(list(seen.values()), list(seen.keys()), **kwargs)


def plot_rebalance(plt, inputs, out):
    (path,) = inputs
    records = [r for r in load(path) if r.get("ok", True)]
    scenarios = [s for s in ("join", "leave", "crash", "stall") if any(r["scenario"] == s for r in records)]
    modes = [m for m in MODES if any(r["mode"] == m for r in records)]
    groups = [(s, [r for r in records if r["scenario"] == s]) for s in scenarios]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 5.4), layout="constrained")
    grouped_bars(left, groups, modes, lambda r: r["time_to_stable_s"], label_fmt=fmt_seconds)
    seconds_axis(left)
    left.set_ylabel("from the change to a stable party (time_boundary included)")
    left.set_title("Time until every member is ACQUIRED again")
    grouped_bars(right, groups, modes, lambda r: r["paused_item_s"] if r["paused_item_s"] > 0 else None,
                 label_fmt=lambda v: "{:,.3g}".format(v) if v < 1000 else thousands(v))
    right.set_yscale("log")
    right.set_ylabel("item-seconds without an active owner (log scale)")
    right.set_title("Work stopped: item-seconds paused")
    for ax in (left, right):
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels([SCENARIO_TITLES[s] for s in scenarios])
        ax.grid(axis="x", visible=False)
        ax.margins(y=0.12)
    tb = sorted({r["tb_s"] for r in records})
    st = sorted({r["session_timeout_s"] for r in records})
    members = sorted({r["members_before"] for r in records if r["scenario"] == "join"})
    n = sorted({r["n"] for r in records})
    fig.suptitle("One party change in a party of %s over %s items, kazoo 2.11 and the crate's modes" % (
        "/".join(map(str, members)) or "10", "/".join(thousands(x) for x in n)), fontweight="bold")
    left.legend(*dedup_handles(left, right), loc="upper left", fontsize=7.5)
    left.set_ylim(top=max(r["time_to_stable_s"] for r in records) * 1.6)
    runs = max((r["run"] for r in records), default=0)
    footnote(fig, source_note([path], "Bars: median of %d runs, dots: each run; time_boundary %s s, session "
                                      "timeout %s s; every member a separate process" % (
                                          runs, "/".join("%g" % x for x in tb), "/".join("%g" % x for x in st))))
    save(plt, fig, out)


# --- 3b. the departure fast path (bench/handover.sh) -----------------------------------------------------------------

def plot_handover(plt, inputs, out):
    (path,) = inputs
    records = [r for r in load(path) if r.get("ok", True) and r.get("taken_s") is not None]
    phases = [p for p in ("crash", "leave", "crash-join", "crash-crash", "crash-pair")
              if any(r["phase"] == p for r in records)]
    modes = [m for m in MODES if any(r["mode"] == m for r in records)]
    groups = [(p, [r for r in records if r["phase"] == p]) for p in phases]
    fig, ax = plt.subplots(figsize=(9.5, 5.4), layout="constrained")
    grouped_bars(ax, groups, modes, lambda r: max(r["taken_s"], 0.001), label_fmt=fmt_seconds)
    ax.set_yscale("log")
    seconds_axis(ax)
    st = sorted({r["session_timeout_s"] for r in records})
    tb = sorted({r["tb_s"] for r in records})
    for s_timeout in st:
        ax.axhline(s_timeout, color=MUTED, linewidth=0.8, linestyle=":", zorder=1)
        ax.annotate("session timeout S = %g s" % s_timeout, (1.0, s_timeout), xycoords=("axes fraction", "data"),
                    xytext=(-2, -2), textcoords="offset points", ha="right", va="top", fontsize=7, color=MUTED, zorder=5,
                    bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))
    titles = {"crash": "crash (SIGKILL):\nfrom the kill", "leave": "leave (SIGTERM):\nfrom the leaver's exit",
              "crash-join": "crash, then a join\n(from the kill)", "crash-crash": "two crashes 1 s apart\n(from the first)",
              "crash-pair": "two crashes at once\n(from the kills)"}
    ax.set_xticks(range(len(phases)))
    ax.set_xticklabels([titles[p] for p in phases])
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("until the departed member's items are ACQUIRED again (log)")
    members = sorted({r["members"] for r in records})
    n = sorted({r["n"] for r in records})
    ax.set_title("A departed member's items: %s members over %s items, kazoo 2.11 and the crate" % (
        "/".join(map(str, members)), "/".join(thousands(x) for x in n)), fontweight="bold")
    dedup_legend(ax, loc="upper left", fontsize=7.5)
    ax.margins(y=0.15)
    # Room above the tallest bar for its label and the legend (a log axis: a factor, not a fraction).
    ax.set_ylim(top=max((r["taken_s"] for r in records), default=0.0) * 8 or 1.0)
    runs = max((r["run"] for r in records), default=0)
    footnote(fig, source_note([path], "Bars: median of %d run(s), dots: each run; time_boundary %s s; ZooKeeper's tick "
                                      "50 ms; every member a separate process" % (
                                          runs, "/".join("%g" % x for x in tb))))
    save(plt, fig, out)


def dedup_handles(*axes):
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    order = [MODES[m][0] for m in MODES]
    labels = sorted(seen, key=lambda lab: order.index(lab) if lab in order else len(order))
    return [seen[lab] for lab in labels], labels


# --- 4. items moved by a join under each partition function (rebalance + scale) --------------------------------------

def plot_join_moves(plt, inputs, out):
    groups = []
    for path in inputs:
        if not os.path.exists(path):
            continue
        joins = [r for r in load(path) if r.get("scenario") == "join" and r.get("ok", True)
                 and not r.get("warmup") and r.get("items_moved") is not None]
        if not joins:
            continue
        before = joins[0].get("members_before", joins[0].get("p"))
        n = joins[0]["n"]
        groups.append(("%d → %d members\n%s items\n(%s)" % (before, before + 1, thousands(n), os.path.basename(path)),
                       joins, n, before, path))
    groups.sort(key=lambda g: (g[2], g[3]))
    fig, ax = plt.subplots(figsize=(8.2, 4.9), layout="constrained")
    modes = [m for m in MODES if any(r["mode"] == m for g in groups for r in g[1])]
    centres = grouped_bars(ax, [(g[0], g[1]) for g in groups], modes,
                           lambda r: 100.0 * r["items_moved"] / r["n"], dots=False)
    for g, (title, recs, n, before, _) in enumerate(groups):
        for mode in modes:
            vals = [r["items_moved"] for r in recs if r["mode"] == mode]
            if vals and (title, mode) in centres:
                m = median(vals)
                ax.annotate(thousands(m), (centres[(title, mode)], 100.0 * m / n), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7, color=INK)
        ideal = 100.0 / (before + 1)
        ax.hlines(ideal, g - 0.45, g + 0.45, color=INK, linestyle="--", linewidth=1.1, zorder=4,
                  label="ideal: the joiner's fair share, N / (P + 1)")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups])
    ax.grid(axis="x", visible=False)
    ax.set_ylim(0, 122)
    ax.set_yticks(range(0, 101, 20))
    ax.set_yticklabels(["%d %%" % v for v in range(0, 101, 20)])
    ax.set_ylabel("items that changed owner (% of the items; labels: count)")
    ax.set_title("Items moved by one join, per partition function")
    dedup_legend(ax, loc="upper center", fontsize=7.5, ncol=2)
    footnote(fig, source_note([g[4] for g in groups], "Median over the measured runs (warm-up rounds left out), "
                                                      "between the stable states before and after the join"))
    save(plt, fig, out)


# --- 3. the scale benchmark's phases per mode, per ZooKeeper heap (bench/scale.sh) -----------------------------------

PHASES = [("start", "cold start\n(from the last join)"), ("join", "a join"), ("leave", "a leave\n(SIGTERM)"),
          ("crash", "a crash\n(from the session's expiry)")]
GOALS = {"start": 5.0, "join": 3.0}  # beyond time_boundary (BENCHMARKS.md, the scale benchmark's goals)


def scale_total(r):
    """From the phase's event to the cover, time_boundary included, as the tables count it: the cold start from the
    last member's party node, the crash from the crashed session's expiry."""
    if r["scenario"] == "start":
        joined = r.get("zk", {}).get("last_party_create_s", r.get("all_joined_s")) or 0.0
        return r["time_to_cover_s"] - joined
    if r["scenario"] == "crash":
        return r.get("after_expiry_s")
    return r["time_to_cover_s"]


def plot_scale(plt, inputs, out):
    records = []
    for path in inputs:
        if os.path.exists(path):
            records += [dict(r, _file=path) for r in load(path) if r.get("ok", True)]
    panels = sorted({(r["hosting"], r["zk_heap_mb"]) for r in records}, key=lambda k: (k[0] != "processes", k[1]))
    modes = [m for m in MODES if any(r["mode"] == m for r in records)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 0.6, 5.0), layout="constrained",
                             sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (hosting, heap) in zip(axes, panels):
        mine = [r for r in records if r["hosting"] == hosting and r["zk_heap_mb"] == heap]
        width = 0.8
        for g, (phase, _) in enumerate(PHASES):
            present = [m for m in modes if any(r["mode"] == m and r["scenario"] == phase for r in mine)]
            w = width / max(1, len(present))
            for i, mode in enumerate(present):
                label, colour = MODES[mode]
                x = g - width / 2 + w * (i + 0.5)
                measured = [scale_total(r) for r in mine if r["mode"] == mode and r["scenario"] == phase
                            and not r.get("warmup")]
                warm = [scale_total(r) for r in mine if r["mode"] == mode and r["scenario"] == phase
                        and r.get("warmup")]
                tb = median([r["tb_s"] for r in mine])
                if measured:
                    m = median(measured)
                    ax.bar(x, min(tb, m), w * 0.9, color=colour, alpha=0.35, zorder=2)
                    ax.bar(x, max(0.0, m - tb), w * 0.9, bottom=tb, color=colour, label=label, zorder=2)
                    ax.scatter([x + d for d in spread(len(measured), w * 0.4)], measured, s=10, color=INK,
                               linewidths=0, zorder=4, label="each measured run")
                    ax.annotate("+%s" % fmt_seconds(m - tb), (x, max(measured + warm)), xytext=(0, 3),
                                textcoords="offset points", ha="center", va="bottom", fontsize=7, color=INK)
                if warm:
                    ax.scatter([x] * len(warm), warm, s=22, marker="D", facecolors="white", edgecolors=INK,
                               linewidths=0.9, zorder=4, label="warm-up round (ZooKeeper's JVM fresh)")
            if phase in GOALS and mine:
                tb = median([r["tb_s"] for r in mine])
                ax.hlines(tb + GOALS[phase], g - 0.46, g + 0.46, color="#C00000", linestyle="--", linewidth=1.1,
                          zorder=5, label="goal (time_boundary + 5 s cold start, + 3 s join)")
        ax.set_xticks(range(len(PHASES)))
        ax.set_xticklabels([p[1] for p in PHASES], fontsize=8)
        ax.grid(axis="x", visible=False)
        where = "separate processes" if hosting == "processes" else "all in one process"
        size = "%g GB" % (heap / 1024.0) if heap >= 1024 else "%d MB" % heap
        ax.set_title("%s, ZooKeeper heap %s" % (where, size), fontsize=10)
    axes[0].set_ylabel("from the event to a full disjoint cover (light: time_boundary)")
    seconds_axis(axes[0])
    axes[0].set_ylim(bottom=0)
    p = sorted({r["p"] for r in records})
    n = sorted({r["n"] for r in records})
    fig.suptitle("Scale: %s members over %s items, time to cover per phase and mode" % (
        "/".join(map(str, p)), "/".join(thousands(x) for x in n)), fontweight="bold")
    from matplotlib.patches import Patch
    handles, labels = dedup_handles(*axes)
    tbs = sorted({r["tb_s"] for r in records})
    handles.append(Patch(facecolor="#bbbbbb"))
    labels.append("light part: time_boundary (%s),\nthe wait for a stable party" % "/".join(map(fmt_seconds, tbs)))
    axes[-1].legend(handles, labels, loc="upper right", fontsize=7.5)
    tops = [scale_total(r) for r in records] + [r["tb_s"] + GOALS[r["scenario"]] for r in records
                                                 if r["scenario"] in GOALS]
    axes[0].set_ylim(top=max(tops) * 1.35)
    runs = max((r["run"] for r in records), default=0)
    footnote(fig, source_note(inputs, "Bars: median of %d measured run%s (the label: beyond time_boundary), dots: "
                                      "each run" % (runs, "s" if runs != 1 else "")))
    save(plt, fig, out)


# --- 5. recovery after each fault of the chaos run (tests/chaos.rs, bench/chaos.sh) ----------------------------------

FAULTS = [("KillProcess", "worker process\nSIGKILL, restarted"), ("Expire", "session expired\n(cut), replaced"),
          ("ShortCut", "connection cut\n(⅓ session)"), ("Leave", "leave (finish()),\na new member"),
          ("RestartServer", "ZooKeeper\nstopped, started"), ("PauseServer", "ZooKeeper paused\n(½ session)"),
          ("Churn", "churn: 3 joins\nand leaves")]


def plot_chaos(plt, inputs, out):
    (path,) = inputs
    records = [r for r in load(path) if "fault" in r and r.get("recovery_s") is not None]
    kinds = [k for k in FAULTS if any(r["fault"] == k[0] for r in records)]
    kinds += [(k, k) for k in sorted({r["fault"] for r in records} - {k for k, _ in FAULTS})]
    fig, ax = plt.subplots(figsize=(8.6, 4.8), layout="constrained")
    data = [sorted(r["recovery_s"] for r in records if r["fault"] == k) for k, _ in kinds]
    ax.boxplot(data, positions=range(len(kinds)), widths=0.55, showfliers=False, whis=(0, 100),
               medianprops=dict(color=INK, linewidth=1.8), boxprops=dict(color=MUTED),
               whiskerprops=dict(color=MUTED), capprops=dict(color=MUTED))
    bound = median([r["bound_s"] for r in records if r.get("bound_s")])
    for i, vals in enumerate(data):
        over = [v for v in vals if bound and v > bound]
        ax.scatter([i + d for d in spread(len(vals), 0.42)], vals, s=11, linewidths=0, zorder=3, alpha=0.7,
                   color=["#D55E00" if bound and v > bound else "#0072B2" for v in vals])
        # The upper median, as the test's own table gives it.
        ax.annotate("median %s\n%d faults%s" % (fmt_seconds(statistics.median_high(vals)), len(vals),
                                                ", %d over" % len(over) if over else ""),
                    (i, 0), xytext=(0, -2), textcoords="offset points", ha="center", va="top", fontsize=7,
                    color=INK, annotation_clip=False)
    if bound:
        ax.axhline(bound, color="#C00000", linestyle="--", linewidth=1)
        ax.text(len(kinds) - 0.5, bound * 0.985, "liveness bound %s (session + time_boundary + 2 s)" % (
            fmt_seconds(bound)), ha="right", va="top", fontsize=7.5, color="#C00000")
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels([label for _, label in kinds], fontsize=8)
    ax.tick_params(axis="x", pad=24)
    ax.grid(axis="x", visible=False)
    ax.set_ylim(bottom=0)
    seconds_axis(ax)
    ax.set_ylabel("recovery: end of the fault to every member\nACQUIRED over a disjoint, lock-backed cover")
    seeds = sorted({r.get("seed") for r in records if r.get("seed") is not None})
    ax.set_title("Chaos run: recovery after each fault (%d faults, seed %s)" % (
        len(records), ", ".join(map(str, seeds)) or "?"))
    footnote(fig, source_note([path], "Box: quartiles, whiskers: min–max, dots: every fault (orange: over the "
                                      "bound); 4 in-process members and a worker process over 60 items"))
    save(plt, fig, out)


# --- exporting and importing progress (bench/progress.sh) -----------------------------------------------------------

def plot_progress(plt, inputs, out):
    (path,) = inputs
    rows = load(path)
    runs = [r for r in rows if r.get("kind") == "run"]
    base = next((r for r in rows if r.get("kind") == "one-by-one"), None)
    if not runs or base is None:
        return
    n = runs[0]["items"]
    nodes = base["lineage"] + base["checkpoints"]
    per_create = base["write_sample_s"] / base["write_sample"]
    # (label, measured values, requests, colour, hatched: extrapolated from a sample)
    bars = [
        ("export\n(one token)", [r["export_s"] for r in runs], median([r["export_requests"] for r in runs]),
         "#009E73", False),
        ("import into an\nempty path (a move)", [r["move_s"] for r in runs], median([r["move_requests"] for r in runs]),
         "#0072B2", False),
        ("import over the\noriginal (a restore)", [r["restore_s"] for r in runs],
         median([r["restore_requests"] for r in runs]), "#56B4E9", False),
        ("the same nodes\nread one by one", [base["read_s"]], base["read_requests"], "#D55E00", False),
        ("the checkpoints created\none by one (from %s)" % thousands(base["write_sample"]),
         [per_create * base["checkpoints"]], base["checkpoints"], "#E69F00", True),
    ]
    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    for i, (label, values, requests, colour, hatched) in enumerate(bars):
        mid = median(values)
        ax.bar(i, mid, width=0.62, color="white" if hatched else colour, edgecolor=colour,
               hatch="///" if hatched else None, linewidth=1.2, zorder=2)
        if len(values) > 1:
            ax.scatter([i + d for d in spread(len(values), 0.3)], values, s=14, color=INK, zorder=3, linewidths=0)
        text = "%s%s\n%s requests" % ("≈ " if hatched else "", fmt_seconds(mid), thousands(requests))
        ax.annotate(text, (i, mid), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8,
                    color=INK)
    ax.axhline(10, color="#C00000", linestyle="--", linewidth=1, zorder=1)
    ax.text(-0.45, 10 * 1.06, "goal: 10 s", ha="left", va="bottom", fontsize=7.5, color="#C00000")
    ax.set_yscale("log")
    seconds_axis(ax)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax.grid(axis="x", visible=False)
    ax.margins(y=0.25)
    ax.set_ylabel("time (log scale)")
    ax.set_title("A party's progress, %s items with lineage and %d-byte checkpoints: one token against node by node"
                 % (thousands(n), runs[0]["checkpoint_bytes"]), fontweight="bold", fontsize=10)
    footnote(fig, source_note([path], "Bars: median of %d runs, dots: each run; %s nodes read (lineage and "
                                      "checkpoints); token %s bytes; hatched: %s creates timed one by one, scaled "
                                      "to every checkpoint" % (len(runs), thousands(nodes),
                                                               thousands(runs[0]["token_bytes"]),
                                                               thousands(base["write_sample"]))))
    save(plt, fig, out)


# --- the registry ---------------------------------------------------------------------------------------------------

def r(name):
    return os.path.join(RESULTS, name)


# name → (function, input files, what it shows). The first input decides whether the plot is drawn at all.
PLOTS = {
    "acquired": (plot_acquired, [r("latest.jsonl")], "time to ACQUIRED against item count, kazoo and the crate"),
    "reaction": (plot_reaction, [r("latest.jsonl")], "reaction to a party change, kazoo and the crate"),
    "rebalance": (plot_rebalance, [r("rebalance.jsonl")], "one party change in a party of 10, every mode"),
    "join-moves": (plot_join_moves, [r("rebalance.jsonl"), r("scale.jsonl"), r("scale-100x100k.jsonl")],
                   "items moved by a join, per partition function"),
    "handover": (plot_handover, [r("handover.jsonl")], "a departed member's items: crash, leave and bursts"),
    "handover-100x100k": (plot_handover, [r("handover-100x100k.jsonl")],
                          "a departed member's items at 100 × 100,000: crash and leave"),
    "scale": (plot_scale, [r("scale.jsonl")], "the scale benchmark's phases per mode and hosting"),
    "scale-100x100k": (plot_scale, [r("scale-100x100k.jsonl"), r("scale-100x100k-2g.jsonl")],
                       "100 × 100,000: phases per mode, ZooKeeper at 256 MB and 2 GB"),
    "chaos": (plot_chaos, [r("chaos.jsonl")], "recovery time after each fault kind of the chaos run"),
    "progress": (plot_progress, [r("progress.jsonl")], "a party's progress exported and imported, against node by node"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="sources", nargs="+", metavar="FILE",
                        help="draw only the plots that read one of these JSON files")
    parser.add_argument("--list", action="store_true", help="list the plots and their inputs")
    parser.add_argument("--png", metavar="DIR", help="also write a PNG twin of each plot to DIR, to look at")
    parser.add_argument("names", nargs="*", help="draw only these plots (default: all)")
    args = parser.parse_args()
    global PNG_DIR
    PNG_DIR = args.png
    if args.list:
        for name, (_, inputs, what) in PLOTS.items():
            print("bench/results/%s.svg: %s; from %s" % (name, what, ", ".join(rel(p) for p in inputs)))
        return 0
    unknown = [n for n in args.names if n not in PLOTS]
    if unknown:
        parser.error("unknown plot %s (see --list)" % ", ".join(unknown))
    chosen = [n for n in PLOTS if not args.names or n in args.names]
    if args.sources:
        wanted = {os.path.realpath(p) for p in args.sources}
        chosen = [n for n in chosen if wanted & {os.path.realpath(p) for p in PLOTS[n][1]}]
        if not chosen:
            print("plot.py: no plot is drawn from %s (see --list)" % ", ".join(args.sources), file=sys.stderr)
            return 0
    plt = ensure_matplotlib()
    for name in chosen:
        function, inputs, _ = PLOTS[name]
        if not os.path.exists(inputs[0]):
            print("plot.py: %s.svg skipped: %s is missing" % (name, rel(inputs[0])), file=sys.stderr)
            continue
        function(plt, inputs, os.path.join(RESULTS, name + ".svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
