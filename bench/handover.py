#!/usr/bin/env python3
"""Hand-over benchmark: how long a departed member's items go unprocessed, for a crash and a graceful leave, with
kazoo 2.11 and this crate side by side on one ZooKeeper.

    python3 bench/handover.py run --connect HOST:PORT [--rust-worker CMD] [--before-worker CMD] [--runs 10]
        [--modes kazoo,before,incremental-rendezvous,incremental-weighted] [--items 1000] [--members 10]
        [--time-boundary 5] [--session-timeout 4] [--log-dir DIR]   # one JSON line per phase on stdout
    python3 bench/handover.py report FILE.jsonl [--machine TEXT]      # the markdown section on stdout

`bash bench/handover.sh` runs both. Every member is a separate process (`zkp worker`, or kazoo through
bench/kazoo_bench.py worker), as in bench/rebalance.py, whose Party class this script reuses: each prints a JSON
line, stamped with the wall clock, at every state change.

Phases, each from a stable party of --members over the integers 0..--items-1, on a fresh path per run:

- crash: one member gets SIGKILL. Its session, party node and locks stay until ZooKeeper expires the session (the
  session timeout S after the server last heard from it, rounded up to the server's tick).
- leave: one member gets SIGTERM: the worker calls finish(), which releases its locks and leaves the party, and
  exits.
- crash-join: one member gets SIGKILL, and a new member is started once its items are taken again (or S + 1 s
  after the kill): a burst, in which a join within `time_boundary` of the departure may move an orphan again.
- crash-crash: two members get SIGKILL one second apart.
- crash-pair: two members get SIGKILL at once: their sessions end within a tick of each other, so some survivors
  read both gone in one party read and others in two (the survivors must agree on who takes what either way).

Figures per phase:

- orphans: the items the departed member(s) listed when signalled;
- *taken after kill* (crash phases) and *taken after exit* (leave): from the SIGKILL, or from the leaver's exit, to
  the first moment every orphan is listed by a live member whose latest line is ACQUIRED (kazoo lists nothing in
  any other state; this crate lists an item only while it may be processed); the leave also gives the time from the
  SIGTERM;
- *kept stopped*: items that a survivor listed at the fault and still listed at the end, but not in some line in
  between (an item its owner keeps must never stop: must be 0);
- *orphans moved again*: orphans listed by one survivor after the fault and owned by another at the end (a burst's
  cost);
- *double-owned item-seconds*: items listed by two members at once (a safety check: must be 0);
- *after the node went*: from the moment the observer (a kazoo client of this script) was told that the last
  departed member's party node was gone (the session's end, or the leaver's delete) until every orphan was taken:
  what the survivors themselves spend (a notification, a party read, a create and a listing per item), and so the
  most that a standby contender queued in each lock ahead of time could save.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rebalance  # noqa: E402  (the Party class, analyze, say)

MODES = {
    "kazoo": {"impl": "kazoo", "flags": [], "label": "kazoo 2.11 (eager, stride)"},
    "before": {"impl": "rust", "flags": ["--partition", "rendezvous", "--rebalance", "incremental"],
               "label": "Incremental + Rendezvous, without the fast path (the commit before it)"},
    "incremental-rendezvous": {"impl": "rust", "flags": ["--partition", "rendezvous", "--rebalance", "incremental"],
                               "label": "Incremental + Rendezvous"},
    "incremental-weighted": {"impl": "rust", "flags": ["--partition", "weighted", "--rebalance", "incremental"],
                             "label": "Incremental + WeightedRendezvous"},
}
PHASES = ["crash", "leave", "crash-join", "crash-crash", "crash-pair"]
PHASE_TITLES = {
    "crash": "A member is killed (SIGKILL): from the kill until its items are processed again",
    "leave": "A member leaves (SIGTERM: finish()): from its exit until its items are processed again",
    "crash-join": "A member is killed and another joins once its items are taken (a burst within time_boundary)",
    "crash-crash": "Two members are killed one second apart",
    "crash-pair": "Two members are killed at once (their sessions end together, as after a server's pause)",
}


class Party(rebalance.Party):
    """rebalance.Party, with the `before` mode run by the worker of the commit before the fast path."""

    def command(self, key):
        command = super().command(key)
        if self.mode == "before":
            worker = shlex.split(self.args.rust_worker)
            return shlex.split(self.args.before_worker) + command[len(worker):]
        return command


class PartyWatch:
    """When the observer was told that each node of `<path>/party` was gone (a kazoo ChildrenWatch: the survivors
    are told in the same round of notifications)."""

    def __init__(self, observer, party_path):
        self.lock = threading.Lock()
        self.seen = set()
        self.gone = {}
        observer.ChildrenWatch(party_path, self.on_children)

    def on_children(self, children):
        now = time.time()
        with self.lock:
            for node in self.seen - set(children):
                self.gone.setdefault(node, now)
            self.seen |= set(children)

    def gone_at(self, identifier):
        """When the node of member `identifier` (`<hex32>-<identifier>[-<seq>]`) was seen gone, or None."""
        with self.lock:
            times = [t for node, t in self.gone.items() if node[33:] == identifier or node[33:].startswith(identifier + "-")]
        return min(times) if times else None


def listed_at(party, identifier, t):
    """The items `identifier` lists at time `t` (its latest line at or before `t`, ACQUIRED only), or None."""
    latest = None
    for record in party.records.get(identifier, []):
        if record["ts"] <= t:
            latest = record
    if latest is None or latest["state"] != "ACQUIRED":
        return set()
    return set(latest["items"])


def orphan_figures(party, departed, survivors, tf, t_end, since=None):
    """When every orphan (what the `departed` listed at the fault `tf`) was first listed (ACQUIRED) by a live survivor,
    counted from `since` (default: `tf`), what survivors stopped of what they kept, and how many orphans moved again
    between survivors."""
    orphans = set()
    for identifier in departed:
        records = [r for r in party.records[identifier] if r["ts"] <= tf]
        if records:
            orphans |= set(records[-1]["items"])
    times = sorted({r["ts"] for s in survivors for r in party.records[s] if tf < r["ts"] <= t_end})
    taken_at = None
    first_taker = {}
    for t in times:
        listed = {s: listed_at(party, s, t) for s in survivors}
        for s, items in listed.items():
            for item in items & orphans:
                first_taker.setdefault(item, s)
        if taken_at is None and all(any(item in items for items in listed.values()) for item in orphans):
            taken_at = t
    at_fault = {s: listed_at(party, s, tf) for s in survivors}
    at_end = {s: listed_at(party, s, t_end) for s in survivors}
    kept_stopped = set()
    for s in survivors:
        kept = at_fault[s] & at_end[s]
        for record in party.records[s]:
            if tf < record["ts"] <= t_end and not kept <= set(record["items"]):
                kept_stopped |= kept - set(record["items"])
    final_owner = {item: s for s, items in at_end.items() for item in items}
    moved_again = sum(1 for item, s in first_taker.items() if final_owner.get(item) not in (None, s))
    return {
        "orphans": len(orphans),
        "taken_at": taken_at,
        "taken_s": None if taken_at is None else round(taken_at - (tf if since is None else since), 4),
        "kept_stopped": len(kept_stopped),
        "orphans_moved_again": moved_again,
    }


def run_once(args, observer, mode, run):
    """One run of `mode`: the four phases in turn, one JSON line each."""
    timeout = args.phase_timeout or (240 if mode == "kazoo" else 90)
    path = "/handover/%s-%d-%s" % (mode, run, uuid.uuid4().hex[:8])
    party = Party(args, mode, path, args.items_file)
    base = {"mode": mode, "impl": MODES[mode]["impl"], "run": run, "n": args.items, "members": args.members,
            "tb_s": args.time_boundary, "session_timeout_s": args.session_timeout, "path": path}
    members = ["w%02d" % i for i in range(args.members)]
    phase = "start"
    tb = args.time_boundary
    watch = None

    def measure(phase, departed, live_before, live_after, tf, extra, since=None):
        t_end = time.time()
        result = dict(base, phase=phase, ok=True)
        figures = rebalance.analyze(party, live_before, live_after, tf, t_end)
        result.update({k: figures[k] for k in ("time_to_stable_s", "items_paused", "double_owned_item_s")})
        result.update(orphan_figures(party, departed, sorted(live_after), tf, t_end, since))
        result.update(extra)
        gone = [watch.gone_at(identifier) for identifier in departed] if watch else [None]
        taken_at = result.pop("taken_at")
        result["taken_after_node_gone_s"] = (None if taken_at is None or None in gone
                                             else round(taken_at - max(gone), 4))
        print(json.dumps(result), flush=True)
        rebalance.say("%s run %d %s: %s orphans taken after %s s (stable after %.2f s, kept stopped %d, moved "
                      "again %d)" % (mode, run, phase, result["orphans"], result["taken_s"],
                                     result["time_to_stable_s"], result["kept_stopped"],
                                     result["orphans_moved_again"]))

    try:
        for identifier in members:
            party.spawn(identifier)
        live = party.settle(set(members), args.settle_timeout or timeout * 2)
        watch = PartyWatch(observer, path + "/party")
        # Every phase waits a full time_boundary of quiet after it settles: moves a load bound defers are done.
        if "crash" in args.phases:
            phase = "crash"
            victim = members[1]
            tf = party.signal(victim, signal.SIGKILL)
            after = party.settle(live - {victim}, timeout + args.session_timeout,
                                 not_before=tf + args.session_timeout + tb)
            measure(phase, [victim], live, after, tf, {})
            live = after

        if "leave" in args.phases:
            phase = "leave"
            leaver = members[2]
            signalled = party.signal(leaver, signal.SIGTERM)
            party.wait_exit(leaver, 60)
            exited = party.exited[leaver][0]
            after = party.settle(live - {leaver}, timeout, not_before=exited + tb)
            measure(phase, [leaver], live, after, signalled, {"exit_after_signal_s": round(exited - signalled, 4)},
                    since=exited)
            live = after

        if "crash-join" in args.phases:
            phase = "crash-join"
            victim, joiner = members[3], "w%02d" % args.members
            tf = party.signal(victim, signal.SIGKILL)
            deadline = tf + args.session_timeout + 1
            while time.time() < deadline:
                party.pump_events(0.02)
                figures = orphan_figures(party, [victim], sorted(live - {victim}), tf, time.time())
                if figures["taken_s"] is not None:
                    break
            joined = time.time()
            party.spawn(joiner)
            after = party.settle((live - {victim}) | {joiner}, timeout + args.session_timeout, not_before=joined + tb)
            measure(phase, [victim], live, after, tf, {"join_after_kill_s": round(joined - tf, 4)})
            live = after

        if "crash-crash" in args.phases:
            phase = "crash-crash"
            first, second = members[4], members[5]
            tf = party.signal(first, signal.SIGKILL)
            time.sleep(1.0)
            party.signal(second, signal.SIGKILL)
            after = party.settle(live - {first, second}, timeout + args.session_timeout,
                                 not_before=tf + 1 + args.session_timeout + tb)
            measure(phase, [first, second], live, after, tf, {})
            live = after

        if "crash-pair" in args.phases:
            phase = "crash-pair"
            first, second = members[6], members[7]
            tf = party.signal(first, signal.SIGKILL)
            party.signal(second, signal.SIGKILL)
            after = party.settle(live - {first, second}, timeout + args.session_timeout,
                                 not_before=tf + args.session_timeout + tb)
            measure(phase, [first, second], live, after, tf, {})
    except (rebalance.PhaseError, OSError) as err:
        rebalance.say("%s run %d %s FAILED: %s" % (mode, run, phase, err))
        print(json.dumps(dict(base, phase=phase, ok=False, error=str(err))), flush=True)
    finally:
        party.kill_all()


def run(args):
    from kazoo.client import KazooClient

    import logging
    logging.basicConfig(level=logging.CRITICAL)
    rebalance.MODES.update(MODES)  # the Party class looks its modes up there
    os.makedirs(args.log_dir, exist_ok=True)
    args.items_file = os.path.join(args.log_dir, "items-%d.txt" % args.items)
    with open(args.items_file, "w") as f:
        f.write("\n".join(str(i) for i in range(args.items)) + "\n")
    observer = KazooClient(hosts=args.connect, timeout=30)
    observer.start(timeout=30)
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            raise SystemExit("unknown mode %r (known: %s)" % (mode, ", ".join(MODES)))
        if mode == "before" and not args.before_worker:
            raise SystemExit("the mode `before` needs --before-worker")
    try:
        for run_index in range(1, args.runs + 1):
            for mode in modes:
                rebalance.say("run %d/%d: %s" % (run_index, args.runs, MODES[mode]["label"]))
                run_once(args, observer, mode, run_index)
    finally:
        observer.stop()
        observer.close()


def fmt(values, unit="s"):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return "%.3f %s" % (values[0], unit) if unit else str(values[0])
    if unit:
        return "%.3f / %.3f / %.3f %s" % (min(values), statistics.median(values), max(values), unit)
    return "%s / %s / %s" % (min(values), statistics.median(values), max(values))


def report(args):
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    ok = [r for r in rows if r["ok"]]
    failed = [r for r in rows if not r["ok"]]
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    out = []
    w = out.append
    w("### %s\n" % args.title)
    w("Command: `%s`. %s\n" % (args.command, args.machine))
    if ok:
        r0 = ok[0]
        w("%d members over %d items, `time_boundary` %s s, session timeout %s s. Figures are min / median / max over "
          "the runs; *taken* is the time until every orphan is listed ACQUIRED by a live member (see "
          "bench/handover.py for every definition).\n" % (r0["members"], r0["n"], r0["tb_s"], r0["session_timeout_s"]))
    for phase in PHASES:
        sample = [r for r in ok if r["phase"] == phase]
        if not sample:
            continue
        w("#### %s\n" % PHASE_TITLES[phase])
        extra = {"leave": " | from the SIGTERM", "crash-join": " | orphans moved again"}.get(phase, "")
        extra = extra or (" | orphans moved again" if phase in ("crash-crash", "crash-pair") else "")
        w("| implementation | runs | orphans | taken | after the node went | kept stopped | double-owned item-s%s |"
          % extra)
        w("|---|---|---|---|---|---|---|%s" % ("---|" if extra else ""))
        for mode in modes:
            s = [r for r in sample if r["mode"] == mode]
            if not s:
                continue
            cells = [MODES[mode]["label"], str(len(s)), fmt([r["orphans"] for r in s], ""),
                     fmt([r["taken_s"] for r in s]), fmt([r.get("taken_after_node_gone_s") for r in s]),
                     str(sum(r["kept_stopped"] for r in s)),
                     "%.3f" % sum(r["double_owned_item_s"] for r in s)]
            if phase == "leave":
                cells.append(fmt([(r["taken_s"] or 0) + r["exit_after_signal_s"] for r in s]))
            elif extra:
                cells.append(fmt([r["orphans_moved_again"] for r in s], ""))
            w("| " + " | ".join(cells) + " |")
        w("")
    if failed:
        w("Failed phases: " + "; ".join("%s run %d %s: %s" % (r["mode"], r["run"], r["phase"], r["error"])
                                        for r in failed) + "\n")
    print("\n".join(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--connect", required=True)
    r.add_argument("--rust-worker", default="target/release/zkp worker")
    r.add_argument("--before-worker", default="", help="the worker command of the commit before the fast path")
    r.add_argument("--runs", type=int, default=10)
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--items", type=int, default=1000)
    r.add_argument("--members", type=int, default=10)
    r.add_argument("--time-boundary", type=float, default=5.0)
    r.add_argument("--session-timeout", type=float, default=4.0)
    r.add_argument("--phases", default=",".join(PHASES), type=lambda v: v.split(","),
                   help="the phases to run, in their order (a phase starts from the party the phases before left)")
    r.add_argument("--quiet", type=float, default=1.0, help="seconds without a member line that end a phase")
    r.add_argument("--phase-timeout", type=float, default=0.0,
                   help="seconds a phase may take to settle, S more after a kill (0: 240 for kazoo, 90 for the crate)")
    r.add_argument("--settle-timeout", type=float, default=0.0,
                   help="seconds the cold start may take to settle (0: twice the phase's)")
    r.add_argument("--log-dir", default="/tmp/zkp-handover")
    p = sub.add_parser("report")
    p.add_argument("file")
    p.add_argument("--machine", default="")
    p.add_argument("--title", default="Hand-over: a departed member's items, against kazoo 2.11")
    p.add_argument("--command", default="bash bench/handover.sh")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
