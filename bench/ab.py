#!/usr/bin/env python3
"""The A/B bench's own scenario and its report (bench/ab.sh runs them; BENCHMARKS.md, "A/B against any commit").

    python3 bench/ab.py warm --worker BIN --label L --connect HOST:PORT --path P --items N [--time-boundary 0.5]
        [--impl rust|kazoo] [--run I]
    python3 bench/ab.py report --jsonl FILE --a LABEL --b LABEL [--kazoo]

warm: one member over N integer items on path P, whose lock directories exist already (an earlier member made them:
the path is warm, as a restarted worker finds it). Measured, on the worker's own clock: from its first ALLOCATING
line to its ACQUIRED line, minus time_boundary (the debounce every allocation waits). The worker then gets SIGTERM
(finish(): its lock nodes go, the directories stay) and must exit cleanly. One JSON line on stdout.

report: medians, minimums and the ratio B / A of the medians for every scenario and size in FILE (JSON lines of this
script and of bench/multi.py, each with a "label"), as a markdown table on stdout.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker_command(args, items_file):
    common = ["--connect", args.connect, "--path", args.path, "--items-file", items_file, "--int-items",
              "--time-boundary", str(args.time_boundary), "--session-timeout", "10", "--json"]
    if args.impl == "rust":
        return shlex.split(args.worker) + common
    return [sys.executable, os.path.join(HERE, "kazoo_bench.py"), "worker"] + common


def allocation(args, prefix=(), check_exit=True):
    """Runs one member (`prefix` before its command, e.g. strace) over `args.items` integer items on `args.path`;
    returns the times of its first ALLOCATING and of its ACQUIRED line (all the items listed), on its own clock. It
    then gets SIGTERM (its whole process group) and, with `check_exit`, must exit cleanly."""
    fd, items_file = tempfile.mkstemp(prefix="ab-items-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(str(i) for i in range(args.items)) + "\n")
    # A session (process group) of its own, so that the signals reach the member under a prefix such as strace too.
    proc = subprocess.Popen(list(prefix) + worker_command(args, items_file), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
    allocating = acquired = None
    deadline = time.time() + 600
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if record["state"] == "ALLOCATING" and allocating is None:
                allocating = record["ts"]
            elif record["state"] == "ACQUIRED":
                if len(record["items"]) != args.items:
                    raise SystemExit("%s ACQUIRED %d of %d items" % (args.label, len(record["items"]), args.items))
                acquired = record["ts"]
                break
            elif record["state"] == "FAILURE":
                raise SystemExit("%s failed: %s" % (args.label, record.get("cause")))
            if time.time() > deadline:
                raise SystemExit("%s: no ACQUIRED within 600 s" % args.label)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
        os.unlink(items_file)
    if acquired is None or allocating is None:
        raise SystemExit("%s exited with %s before ACQUIRED: %s" % (args.label, proc.returncode, stderr[-2000:]))
    if check_exit and proc.returncode != 0:
        raise SystemExit("%s did not finish cleanly (exit %s): %s" % (args.label, proc.returncode, stderr[-2000:]))
    return allocating, acquired


def warm(args):
    allocating, acquired = allocation(args)
    raw = acquired - allocating
    print(json.dumps({"label": args.label, "impl": args.impl, "scenario": "warm", "n": args.items, "run": args.run,
                      "tb_s": args.time_boundary, "raw_s": round(raw, 6),
                      "net_s": round(raw - args.time_boundary, 6)}), flush=True)


# What each scenario's figure is, and the key that holds it.
FIGURES = [
    ("warm", "net_s", "warm allocation, one member (net of time_boundary)"),
    ("join5", "net_s", "the fifth member's join, until all 5 ACQUIRED (net of time_boundary)"),
    ("release", "latency_s", "reaction to a party change: the party node's ctime to RELEASE"),
    ("abort", "latency_s", "reaction mid-allocation: the party node's ctime to the first lock given up"),
]


def report(args):
    records = []
    with open(args.jsonl) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                records.append(json.loads(line))
    labels = [args.a, args.b] + (["kazoo"] if args.kazoo else [])

    def values(label, scenario, n, key):
        return [r[key] for r in records if r.get("label") == label and r["scenario"] == scenario and r["n"] == n]

    def ms(xs):
        return "%.0f ms (%.0f)" % (1000 * statistics.median(xs), 1000 * min(xs)) if xs else "-"

    head = "| scenario | items | runs | %s | B / A |%s" % (" | ".join("%s median (min)" % l for l in labels[:2]),
                                                           " kazoo median (min) | kazoo / B |" if args.kazoo else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for scenario, key, _ in FIGURES:
        for n in sorted({r["n"] for r in records if r["scenario"] == scenario}):
            a, b = values(args.a, scenario, n, key), values(args.b, scenario, n, key)
            ratio = "%.2f×" % (statistics.median(b) / statistics.median(a)) if a and b and statistics.median(a) else "-"
            row = "| %s | %s | %d + %d | %s | %s | %s |" % (scenario, "{:,}".format(n), len(a), len(b), ms(a), ms(b), ratio)
            if args.kazoo:
                k = values("kazoo", scenario, n, key)
                kratio = ("%.1f×" % (statistics.median(k) / statistics.median(b))) if k and b and statistics.median(b) else "-"
                row += " %s | %s |" % (ms(k), kratio)
            print(row)
    print()
    for scenario, key, meaning in FIGURES:
        print("- **%s**: %s (`%s`)." % (scenario, meaning, key))
    floors = [r for r in records if r["scenario"] == "floor"]
    if floors:
        print()
        print("The floor (`partitioner floor`: a bare client sends what a warm allocation needs, no partitioner; "
              "medians): the latency of one create `multi` and of one read `multi` alone at each batch size, the "
              "requests times that latency, and the whole allocation pipelined; the distance of each side's warm "
              "median to the fastest pipelined floor.")
        print()
        print("| items | ops per multi | requests | create multi | read multi | requests × latency | pipelined "
              "median (min) | %s − floor | %s − floor |" % (args.a, args.b))
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sorted({r["n"] for r in floors}):
            mine = sorted((r for r in floors if r["n"] == n), key=lambda r: r["batch"])
            best = min(r["pipelined_ms"] for r in mine)
            for r in mine:
                gaps = []
                for label in (args.a, args.b):
                    warm = values(label, "warm", n, "net_s")
                    gaps.append("%+.0f ms" % (1000 * statistics.median(warm) - best) if warm else "-")
                print("| %s | %d | %d | %.1f ms | %.1f ms | %.0f ms | %.0f ms (%.0f) | %s | %s |" % (
                    "{:,}".format(n), r["batch"], r["requests"], r["create_ms"], r["read_ms"], r["serial_ms"],
                    r["pipelined_ms"], r["pipelined_min_ms"], gaps[0], gaps[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warm")
    w.add_argument("--worker", help="the command that runs one rust member, e.g. \"target/release/zkp worker\"")
    w.add_argument("--label", required=True)
    w.add_argument("--impl", choices=["rust", "kazoo"], default="rust")
    w.add_argument("--connect", required=True)
    w.add_argument("--path", required=True)
    w.add_argument("--items", type=int, required=True)
    w.add_argument("--time-boundary", type=float, default=0.5)
    w.add_argument("--run", type=int, default=0)
    r = sub.add_parser("report")
    r.add_argument("--jsonl", required=True)
    r.add_argument("--a", required=True)
    r.add_argument("--b", required=True)
    r.add_argument("--kazoo", action="store_true")
    args = parser.parse_args()
    if args.command == "warm":
        if args.impl == "rust" and not args.worker:
            parser.error("--worker is required for --impl rust")
        warm(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
