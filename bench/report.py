#!/usr/bin/env python3
"""Turns the JSON lines of a benchmark run (bench/run.sh) into the markdown tables of BENCHMARKS.md.

    python3 bench/report.py RESULTS.jsonl [--title TEXT] [--machine TEXT]

Every figure is the median over runs, with [min-max] and the number of runs; ratios are kazoo / rust of the medians.
"""
import argparse
import json
import math
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def select(records, impl, **match):
    return [r for r in records if r["impl"] == impl and all(r.get(k) == v for k, v in match.items())]


def values(records, field):
    return [r[field] for r in records if r.get(field) is not None and r.get(field) >= 0]


def seconds(v):
    if v is None:
        return "–"
    if abs(v) < 1:
        return "%.0f ms" % (v * 1000) if abs(v) >= 0.01 else "%.1f ms" % (v * 1000)
    return "%.2f s" % v


def count(v):
    if v is None:
        return "–"
    return "{:,.0f}".format(v) if float(v).is_integer() or v >= 10 else "%.1f" % v


def megabytes(v):
    return "–" if v is None else "%.1f MB" % (v / 1024.0)


def p99(xs):
    xs = sorted(xs)
    return xs[max(0, math.ceil(0.99 * len(xs)) - 1)]


def summary(xs, fmt):
    if not xs:
        return "–"
    if len(xs) == 1:
        return "%s (1 run)" % fmt(xs[0])
    return "%s [%s–%s] (%d)" % (fmt(statistics.median(xs)), fmt(min(xs)), fmt(max(xs)), len(xs))


def ratio(kazoo, rust):
    if not kazoo or not rust:
        return "–"
    k, r = statistics.median(kazoo), statistics.median(rust)
    if r <= 0:
        return "–"
    x = k / r
    return "%.0f×" % x if x >= 10 else "%.1f×" % x


def verdict(ok):
    return "–" if ok is None else ("✅ met" if ok else "❌ missed")


def median_or_none(xs):
    return statistics.median(xs) if xs else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--title", default="Benchmark results")
    parser.add_argument("--machine", default="")
    args = parser.parse_args()
    records = load(args.results)
    out = []
    w = out.append

    w("### %s" % args.title)
    w("")
    if args.machine:
        w(args.machine)
        w("")
    w("Median [min–max] (number of runs or samples); ratio = kazoo ÷ zk-partitioner of the medians.")
    w("")

    # --- Time to ACQUIRED -------------------------------------------------------------------------------------------
    w("#### Time to ACQUIRED, net of time_boundary (raw − time_boundary)")
    w("")
    w("| Scenario | zk-partitioner | kazoo 2.11 | kazoo ÷ rust | Target (zk-partitioner) |")
    w("|---|---|---|---|---|")
    targets = []
    raw_rows = []
    sizes = sorted({r["n"] for r in records if r["scenario"] == "single"})
    for n in sizes:
        for mode in ("fresh", "reused"):
            rust = select(records, "rust", scenario="single", n=n, mode=mode)
            kazoo = select(records, "kazoo", scenario="single", n=n, mode=mode)
            if not rust and not kazoo:
                continue
            rn, kn = values(rust, "net_s"), values(kazoo, "net_s")
            target, ok = "", None
            m = median_or_none(rn)
            km = median_or_none(kn)
            if n == 1000 and mode == "reused":
                target = "≥ 20× faster than kazoo, ≤ ~0.1 s"
                ok = None if m is None or km is None else (km / m >= 20 and m <= 0.1)
            elif n == 5000:
                target = "≤ 0.5 s"
                ok = None if m is None else m <= 0.5
            elif n == 20000:
                target = "≤ 2 s"
                ok = None if m is None else m <= 2.0
            label = "1 member, {:,} items, {} path".format(n, mode)
            if target:
                targets.append((label + " (net)", target, ok))
            w("| %s | %s | %s | %s | %s |" % (label, summary(rn, seconds), summary(kn, seconds), ratio(kn, rn),
                                          ("%s: %s" % (target, verdict(ok))) if target else ""))
            raw_rows.append((label, values(rust, "raw_s"), values(kazoo, "raw_s"), rust or kazoo))
    for scenario, label in (("start4", "4 members (separate processes), {:,} items: last join → all 4 ACQUIRED"),
                            ("join5", "5th member joins: its join → all 5 ACQUIRED (disjoint cover)")):
        rust = select(records, "rust", scenario=scenario)
        kazoo = select(records, "kazoo", scenario=scenario)
        if not rust and not kazoo:
            continue
        n = (rust or kazoo)[0]["n"]
        rn, kn = values(rust, "net_s"), values(kazoo, "net_s")
        target, ok = "", None
        if scenario == "join5":
            target = "≥ 10× faster than kazoo"
            ok = None if not rn or not kn else statistics.median(kn) / statistics.median(rn) >= 10
            targets.append((label + " (net)", target, ok))
        w("| %s | %s | %s | %s | %s |" % (label.format(n), summary(rn, seconds), summary(kn, seconds), ratio(kn, rn),
                                      ("%s: %s" % (target, verdict(ok))) if target else ""))
        raw_rows.append((label.format(n), values(rust, "raw_s"), values(kazoo, "raw_s"), rust or kazoo))
    w("")
    w("#### Raw time (from build/join to ACQUIRED, including time_boundary)")
    w("")
    w("| Scenario | time_boundary | zk-partitioner | kazoo 2.11 | kazoo ÷ rust |")
    w("|---|---|---|---|---|")
    for label, rr, kr, recs in raw_rows:
        w("| %s | %s | %s | %s | %s |" % (label, seconds(recs[0]["tb_s"]), summary(rr, seconds), summary(kr, seconds),
                                       ratio(kr, rr)))
    w("")

    # --- Reaction -------------------------------------------------------------------------------------------------
    w("#### Reaction to a party change (1 member, 1,000 items, max_reaction_time 1 s)")
    w("")
    w("| Measure | zk-partitioner median | p99 | min–max | kazoo 2.11 median | p99 | min–max | kazoo ÷ rust (p99) "
      "| Target |")
    w("|---|---|---|---|---|---|---|---|---|")
    for scenario, label in (
            ("abort", "party change → member mid-allocation gives up (first lock node deleted)"),
            ("release", "party change → RELEASE reported by an ACQUIRED member")):
        rn = values(select(records, "rust", scenario=scenario), "latency_s")
        kn = values(select(records, "kazoo", scenario=scenario), "latency_s")
        if not rn and not kn:
            continue
        target, ok = "", None
        if scenario == "abort":
            target = "p99 ≤ 50 ms"
            ok = None if not rn else p99(rn) <= 0.05
            targets.append(("party change → reaction mid-allocation (p99)", target, ok))

        def cells(xs):
            if not xs:
                return "–", "–", "–"
            return ("%s (%d)" % (seconds(statistics.median(xs)), len(xs)), seconds(p99(xs)),
                    "%s–%s" % (seconds(min(xs)), seconds(max(xs))))

        kp = "–" if not rn or not kn else ratio([p99(kn)], [p99(rn)])
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % ((label,) + cells(rn) + cells(kn) + (
            kp, ("%s: %s" % (target, verdict(ok))) if target else "")))
    w("")
    w("p99 is the nearest-rank 99th percentile: with fewer than 100 samples, the largest one.")
    w("")

    # --- Requests -------------------------------------------------------------------------------------------------
    w("#### ZooKeeper requests (server `mntr` deltas)")
    w("")
    w("| Scenario | zk-partitioner requests (per item) | writes / reads | kazoo 2.11 requests (per item) "
      "| writes / reads | kazoo ÷ rust | Target |")
    w("|---|---|---|---|---|---|---|")
    rows = [("single", dict(n=n, mode=mode), "1 member, {:,} items, {} path (acquisition)".format(n, mode), n)
            for n in sizes for mode in ("fresh", "reused")]
    for scenario, label in (("start4", "4 members start, {:,} items (fresh path)"),
                            ("join5", "5th member joins: whole rebalance, {:,} items (reused path)")):
        recs = select(records, "rust", scenario=scenario) or select(records, "kazoo", scenario=scenario)
        if recs:
            rows.append((scenario, {}, label.format(recs[0]["n"]), recs[0]["n"]))
    for scenario, match, label, n in rows:
        rust = select(records, "rust", scenario=scenario, **match)
        kazoo = select(records, "kazoo", scenario=scenario, **match)
        if not rust and not kazoo:
            continue
        rq, kq = values(rust, "requests"), values(kazoo, "requests")

        def cell(xs):
            if not xs:
                return "–"
            m = statistics.median(xs)
            return "%s (%s)" % (count(m), "%.2f" % (m / n))

        def split(recs):
            wr, rd = values(recs, "writes"), values(recs, "reads")
            if not wr:
                return "–"
            return "%s / %s" % (count(statistics.median(wr)), count(statistics.median(rd)))

        target, ok = "", None
        if scenario == "join5":
            target = "≤ 2 per item per rebalance"
            ok = None if not rq else statistics.median(rq) / n <= 2
            targets.append(("requests per item per rebalance, reused path", target, ok))
        w("| %s | %s | %s | %s | %s | %s | %s |" % (label, cell(rq), split(rust), cell(kq), split(kazoo),
                                                 ratio(kq, rq), ("%s: %s" % (target, verdict(ok))) if target else ""))
    w("")

    # --- Memory ---------------------------------------------------------------------------------------------------
    big = max(sizes) if sizes else None
    if big:
        w("#### Peak RSS of a process holding {:,} items (VmHWM)".format(big))
        w("")
        w("| Measure | zk-partitioner | kazoo 2.11 | kazoo ÷ rust | Target |")
        w("|---|---|---|---|---|")
        rust = select(records, "rust", scenario="single", n=big)
        kazoo = select(records, "kazoo", scenario="single", n=big)
        ri, ki = values(rust, "rss_idle_kb"), values(kazoo, "rss_idle_kb")
        rp, kp = values(rust, "rss_peak_kb"), values(kazoo, "rss_peak_kb")
        rd = [r["rss_peak_kb"] - r["rss_idle_kb"] for r in rust]
        kd = [r["rss_peak_kb"] - r["rss_idle_kb"] for r in kazoo]
        ok = None if not rd or big < 20000 else statistics.median(rd) <= 20 * 1024
        if big >= 20000:
            targets.append(("peak RSS holding {:,} items above an idle client".format(big), "≤ 20 MB", ok))
        w("| idle client (connected, before building) | %s | %s | %s | |" % (
            summary(ri, megabytes), summary(ki, megabytes), ratio(ki, ri)))
        w("| holding the items (peak) | %s | %s | %s | |" % (summary(rp, megabytes), summary(kp, megabytes),
                                                            ratio(kp, rp)))
        w("| **above the idle client** | %s | %s | %s | %s |" % (
            summary(rd, megabytes), summary(kd, megabytes), ratio(kd, rd),
            "≤ 20 MB at 20,000 items: %s" % verdict(ok) if big >= 20000 else ""))
        w("")

    w("#### Targets (judged on the zk-partitioner medians above)")
    w("")
    w("| Target | Goal | Result |")
    w("|---|---|---|")
    for label, goal, ok in targets:
        w("| %s | %s | %s |" % (label, goal, verdict(ok)))
    print("\n".join(out))


if __name__ == "__main__":
    main()
