#!/usr/bin/env python3
"""Rebalance benchmark: what a party change costs the items, for kazoo 2.11 and for this crate's modes.

    python3 bench/rebalance.py run --connect HOST:PORT --container NAME [--rust-worker BIN] [--runs 3]
        [--modes kazoo,eager-stride,eager-rendezvous,incremental-rendezvous,incremental-rendezvous-session-aware]
        [--scenarios churn,stall|restart] [--items 1000] [--members 10] [--time-boundary 1] [--session-timeout 6]
        [--log-dir DIR]                     # one JSON line per measured phase on stdout, progress on stderr
    python3 bench/rebalance.py report FILE.jsonl [--machine TEXT]    # the markdown tables on stdout

`bash bench/rebalance.sh` runs both (it starts the ZooKeeper container NAME, which `stall` pauses).

Scenarios (every member is a separate process: this crate's `zkp worker`, or kazoo through
bench/kazoo_bench.py worker; both print a JSON line, stamped with the wall clock, at every state change):

- churn: 10 members start on a fresh path over the integers 0..999 and settle; then (join) an 11th process joins;
  (leave) one member gets SIGTERM (it calls finish() and exits); (crash) another gets SIGKILL (its session, and with
  it its party node and locks, lingers until the session timeout). Each phase starts once the party is stable.
- stall: 10 members settle; the ZooKeeper container is frozen (`docker pause`) for half the session timeout, then
  thawed (`docker unpause`).
- restart: a rolling restart (a deploy). 10 members settle; then each in turn gets SIGTERM (it calls finish() and
  exits), a new process starts at once with the same --identifier, and the next member is restarted once the party
  is stable and quiet again. The whole roll is one measured phase; the static mode (`--static-membership`) runs only
  in this scenario.

Per phase, from the member lines:

- an item has an *active owner* at time t if the latest line (at or before t) of some member lists it in `items`:
  this crate lists an item only while the worker may process it (ACQUIRED; under Rebalance::Incremental also the
  kept items in RELEASE/ALLOCATING; never while suspended); kazoo's worker lists its items only in ACQUIRED. A member
  stops owning anything at the moment it is sent SIGTERM/SIGKILL (its worker loop stops there) or exits;
- the party is *stable* when every live member's latest line is ACQUIRED and their items form a disjoint cover of the
  1,000 items; *time to stable* runs from the fault (the joiner's party node creation, as stamped by ZooKeeper; the
  signal; the moment `docker pause` returned) to the start of the final stable period (0 if nobody changed state);
- *paused item-seconds*: the integral of the number of items without an active owner from the fault to the end of
  the observation; *items paused*: how many items had no active owner at some point; *longest pause*: the largest
  such total for one item;
- *items moved*: items whose owner (by member) differs between the stable state before the fault and after;
- *double-owned item-seconds*: the integral of the items listed by two members at once (a safety check: must be 0).

A phase ends when the party is stable and no member has printed anything for --quiet seconds (and, for the stall,
not before the container was thawed plus --quiet).
"""
import argparse
import json
import logging
import os
import queue
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))

MODES = {
    "kazoo": {"impl": "kazoo", "flags": [], "label": "kazoo 2.11 (eager, stride)"},
    "eager-stride": {"impl": "rust", "flags": ["--partition", "stride", "--rebalance", "eager"],
                     "label": "Eager + KazooStride (default, kazoo parity)"},
    "eager-rendezvous": {"impl": "rust", "flags": ["--partition", "rendezvous", "--rebalance", "eager"],
                         "label": "Eager + Rendezvous"},
    "incremental-rendezvous": {"impl": "rust", "flags": ["--partition", "rendezvous", "--rebalance", "incremental"],
                               "label": "Incremental + Rendezvous"},
    "incremental-rendezvous-session-aware": {
        "impl": "rust",
        "flags": ["--partition", "rendezvous", "--rebalance", "incremental", "--session-policy", "session-aware"],
        "label": "Incremental + Rendezvous + SessionAware",
        "stall_only": True,
    },
    "incremental-rendezvous-static": {
        "impl": "rust",
        "flags": ["--partition", "rendezvous", "--rebalance", "incremental", "--static-membership"],
        "label": "Incremental + Rendezvous + static membership",
        "restart_only": True,
    },
}
SCENARIOS = ["join", "leave", "crash", "stall", "restart"]
SCENARIO_TITLES = {
    "join": "An 11th member joins a party of 10",
    "leave": "One member of 11 leaves (SIGTERM: finish())",
    "crash": "One member of 10 crashes (SIGKILL: its session lingers until the session timeout)",
    "stall": "ZooKeeper stalls for half the session timeout (`docker pause`), 10 members",
    "restart": "Rolling restart: each of 10 members in turn gets SIGTERM and starts again with the same identifier",
}


def runs_in(mode, scenario_set):
    """Whether `mode` runs in the scenario set `scenario_set` (churn, stall or restart)."""
    if MODES[mode].get("stall_only"):
        return scenario_set == "stall"
    if MODES[mode].get("restart_only"):
        return scenario_set == "restart"
    return True


def identity(key):
    """The member identifier of a process key: a restarted process `w03#1` is member `w03`."""
    return key.split("#")[0]


def say(message):
    print("[rebalance %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


class PhaseError(Exception):
    pass


class Party:
    """The member processes of one run and their JSON lines."""

    def __init__(self, args, mode, path, items_file):
        self.args, self.mode, self.path, self.items_file = args, mode, path, items_file
        self.procs = {}
        self.records = {}  # identifier -> [record]
        self.events = queue.Queue()
        self.last_event = time.time()
        self.stopped = {}  # identifier -> when it stopped owning (signal or exit)
        self.exited = {}  # identifier -> (when, exit code)
        self.failed = []  # identifiers that exited without being told to

    def command(self, key):
        common = ["--connect", self.args.connect, "--path", self.path, "--items-file", self.items_file,
                  "--int-items", "--identifier", identity(key), "--time-boundary", str(self.args.time_boundary),
                  "--max-reaction-time", "1", "--session-timeout", str(self.args.session_timeout), "--json"]
        if MODES[self.mode]["impl"] == "rust":
            return shlex.split(self.args.rust_worker) + common + MODES[self.mode]["flags"]
        return [sys.executable, os.path.join(HERE, "kazoo_bench.py"), "worker"] + common

    def spawn(self, identifier):
        log_name = "%s-%s.stderr" % (self.path.strip("/").replace("/", "_"), identifier)
        log = open(os.path.join(self.args.log_dir, log_name), "w")
        proc = subprocess.Popen(self.command(identifier), stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
        log.close()
        self.procs[identifier] = proc
        self.records[identifier] = []

        def pump():
            for line in proc.stdout:
                line = line.strip()
                if line.startswith("{"):
                    self.events.put((identifier, json.loads(line)))
            self.events.put((identifier, None))

        threading.Thread(target=pump, daemon=True).start()

    def signal(self, identifier, sig):
        now = time.time()
        self.stopped.setdefault(identifier, now)
        self.procs[identifier].send_signal(sig)
        return now

    def pump_events(self, timeout):
        """Takes the member lines that arrived (waiting up to `timeout` for the first)."""
        try:
            identifier, record = self.events.get(timeout=max(timeout, 0))
        except queue.Empty:
            return
        while True:
            self.last_event = time.time()
            if record is None:
                code = self.procs[identifier].wait()
                self.exited[identifier] = (time.time(), code)
                if identifier not in self.stopped:
                    self.stopped[identifier] = time.time()
                    self.failed.append(identifier)
                    say("member %s exited on its own with %s" % (identifier, code))
            else:
                self.records[identifier].append(record)
            try:
                identifier, record = self.events.get_nowait()
            except queue.Empty:
                return

    def latest(self, identifier):
        records = self.records.get(identifier)
        return records[-1] if records else None

    def stable(self, live):
        held = set()
        total = 0
        for identifier in live:
            record = self.latest(identifier)
            if record is None or record["state"] != "ACQUIRED":
                return False
            held.update(record["items"])
            total += len(record["items"])
        return total == self.args.items and len(held) == self.args.items

    def settle(self, live, timeout, not_before=0.0):
        """Waits until the live members are stable and quiet. Members that exit on their own leave the live set."""
        deadline = time.time() + timeout
        report_at = time.time() + 60
        while True:
            self.pump_events(0.05)
            live -= set(self.failed)
            now = time.time()
            if self.stable(live) and now - self.last_event >= self.args.quiet and now >= not_before:
                return live
            if now >= report_at:
                # A long wait says how far it is: members by latest state, and state lines in the last minute
                # (a party that churns prints many; one that is merely slow, few).
                states = {}
                for identifier in live:
                    state = (self.latest(identifier) or {}).get("state", "nothing yet")
                    states[state] = states.get(state, 0) + 1
                lines = sum(1 for identifier in live for r in self.records.get(identifier, ()) if r["ts"] >= now - 60)
                say("not stable yet: %s; %d state lines in the last minute" % (
                    ", ".join("%d %s" % (n, state) for state, n in sorted(states.items())), lines))
                report_at = now + 60
            if now > deadline:
                latest = {i: (self.latest(i) or {}).get("state") for i in sorted(live)}
                raise PhaseError("not stable after %.0f s; latest states %s" % (timeout, latest))

    def wait_exit(self, identifier, timeout):
        """Waits until the process `identifier` (already signalled) has exited."""
        deadline = time.time() + timeout
        while identifier not in self.exited:
            if time.time() > deadline:
                raise PhaseError("member %s did not exit within %.0f s" % (identifier, timeout))
            self.pump_events(0.05)

    def wait_for_first_line(self, identifier, timeout):
        deadline = time.time() + timeout
        while not self.records[identifier]:
            if time.time() > deadline or identifier in self.exited:
                raise PhaseError("member %s printed nothing within %.0f s" % (identifier, timeout))
            self.pump_events(0.05)

    def kill_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait()


def analyze(party, live_before, live_after, tf, t_end):
    """The figures of one phase, from the member lines between the fault `tf` and `t_end` (see the module doc)."""
    n = party.args.items
    current = {}  # identifier -> latest record at the sweep's time (None: nothing yet, or stopped)
    events = []
    for identifier, records in party.records.items():
        initial = None
        for record in sorted(records, key=lambda r: r["ts"]):
            if record["ts"] <= tf:
                initial = record
            elif record["ts"] <= t_end:
                events.append((record["ts"], identifier, record))
        current[identifier] = initial
        stopped = party.stopped.get(identifier)
        if stopped is not None and stopped <= t_end:
            events.append((max(stopped, tf), identifier, "stopped"))
    events.sort(key=lambda e: e[0])
    dead = {i for i, t in party.stopped.items() if t < tf}

    def owned(identifier):
        record = current.get(identifier)
        if identifier in dead or record is None or record["state"] == "FAILURE":
            return ()
        return record["items"]

    def owner(key):
        return identity(key)

    before_owner = {}
    for identifier in live_before:
        for item in owned(identifier):
            before_owner[item] = owner(identifier)
    if len(before_owner) != n:
        raise PhaseError("the party was not stable before the fault (%d items owned)" % len(before_owner))

    count = [0] * n
    for identifier in current:
        for item in owned(identifier):
            count[item] += 1

    def is_stable():
        if any(current.get(i) is None or current[i]["state"] != "ACQUIRED" or i in dead for i in live_after):
            return False
        if any(owned(i) for i in current if i not in live_after):
            return False
        return all(c == 1 for c in count)

    paused = [0.0] * n
    unexplained = [0.0] * n  # paused while the item's previous owner was not suspended (session-aware check)
    double = 0.0
    t = tf
    stable_since = tf if is_stable() else None
    first_pause = last_unpause = None
    changed_members = set()
    pauses = []  # (ts, process key): a line of a live process that stops listing an item it listed
    ever_moved = set()  # items listed at some moment by a member other than their owner before the fault

    def advance(until):
        nonlocal double, t, first_pause, last_unpause
        dt = until - t
        if dt <= 0:
            return
        any_paused = False
        for item in range(n):
            c = count[item]
            if c == 0:
                any_paused = True
                paused[item] += dt
                owner = before_owner.get(item)
                record = current.get(owner)
                if not (record and record.get("suspended")) or owner in dead:
                    unexplained[item] += dt
            elif c > 1:
                double += (c - 1) * dt
        if any_paused:
            first_pause = t if first_pause is None else first_pause
            last_unpause = until
        t = until

    for ts, identifier, record in events:
        advance(ts)
        previous = set(owned(identifier))
        for item in owned(identifier):
            count[item] -= 1
        if record == "stopped":
            dead.add(identifier)
        else:
            current[identifier] = record
            changed_members.add(identifier)
            if identifier not in dead and not previous <= set(owned(identifier)):
                pauses.append((ts, identifier))
        for item in owned(identifier):
            count[item] += 1
            if before_owner.get(item) != owner(identifier):
                ever_moved.add(item)
        if is_stable():
            stable_since = ts if stable_since is None else stable_since
        else:
            stable_since = None
    advance(t_end)
    if stable_since is None:
        raise PhaseError("the party was not stable at the end of the observation")
    after_owner = {}
    for identifier in live_after:
        for item in owned(identifier):
            after_owner[item] = owner(identifier)
    moved = sum(1 for item in range(n) if before_owner.get(item) != after_owner.get(item))
    return {
        "time_to_stable_s": round(stable_since - tf, 6),
        "items_moved": moved,
        "items_paused": sum(1 for p in paused if p > 0),
        "paused_item_s": round(sum(paused), 3),
        "max_item_pause_s": round(max(paused), 6),
        "paused_not_suspended_item_s": round(sum(unexplained), 3),
        "double_owned_item_s": round(double, 6),
        "pause_window_s": [round(first_pause - tf, 6), round(last_unpause - tf, 6)] if first_pause else None,
        "members_changed": len(changed_members & (set(live_before) | set(live_after))),
        "suspended_members": sum(1 for i in party.records
                                 if any(r.get("suspended") and tf < r["ts"] <= t_end for r in party.records[i])),
        "lines": sum(1 for e in events if e[2] != "stopped"),
        "items_ever_moved": len(ever_moved),
        "pause_events": [[round(ts - tf, 4), key] for ts, key in pauses],
    }


def timeline(party, tf, t_end):
    """Compact record of what every member printed during the phase: [member, ts - tf, state, items, generation]."""
    rows = []
    for identifier, records in sorted(party.records.items()):
        for r in records:
            if tf - 0.001 < r["ts"] <= t_end:
                rows.append([identifier, round(r["ts"] - tf, 4), r["state"], len(r["items"]), r.get("generation"),
                             bool(r.get("suspended"))])
    for identifier, when in party.stopped.items():
        if tf - 0.001 < when <= t_end:
            rows.append([identifier, round(when - tf, 4), "STOPPED", 0, None, False])
    return sorted(rows, key=lambda r: r[1])


def new_party_node_ctime(observer, party_path, before, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = set(observer.get_children(party_path)) - before
        if new:
            return min(observer.exists(party_path + "/" + node).ctime for node in new) / 1000.0
        time.sleep(0.02)
    raise PhaseError("no new party node appeared")


def docker(*command):
    started = time.time()
    subprocess.run(["docker"] + list(command), check=True, stdout=subprocess.DEVNULL)
    return started, time.time()


def run_once(args, observer, mode, scenario_set, run, items_file):
    """One run of `mode`: the churn phases (join, leave, crash) or the stall. Emits one JSON line per phase."""
    tb, timeout = args.time_boundary, (240 if mode == "kazoo" else 90)
    path = "/rebalance/%s-%s-%d-%s" % (scenario_set, mode, run, uuid.uuid4().hex[:8])
    party = Party(args, mode, path, items_file)
    base = {"mode": mode, "impl": MODES[mode]["impl"], "run": run, "n": args.items, "tb_s": tb,
            "session_timeout_s": args.session_timeout, "path": path}
    members = ["w%02d" % i for i in range(args.members)]
    scenario = "start"
    try:
        started = time.time()
        for identifier in members:
            party.spawn(identifier)
        live = party.settle(set(members), timeout * 2)
        say("%s run %d: %d members stable after %.1f s" % (mode, run, len(live), time.time() - started))

        def measure(scenario, live_before, live_after, tf, extra=None):
            t_end = time.time()
            result = dict(base, scenario=scenario, ok=True, members_before=len(live_before),
                          members_after=len(live_after), failed_members=list(party.failed))
            result.update(analyze(party, live_before, live_after, tf, t_end))
            result.update(extra or {})
            result["timeline"] = timeline(party, tf, t_end)
            print(json.dumps(result), flush=True)
            say("%s run %d %s: stable after %.2f s, moved %d, paused %d items for %.1f item-s" % (
                mode, run, scenario, result["time_to_stable_s"], result["items_moved"], result["items_paused"],
                result["paused_item_s"]))

        if scenario_set == "restart":
            scenario = "restart"
            live_before, keys, roll = set(live), {m: m for m in members}, []
            tf = time.time()
            for identifier in members:
                old = keys[identifier]
                signalled = party.signal(old, signal.SIGTERM)
                party.wait_exit(old, 60)
                exited = party.exited[old][0]
                new = keys[identifier] = identifier + "#1"
                party.spawn(new)
                live = party.settle((live - {old}) | {new}, timeout)
                roll.append({"member": identifier, "old": old, "new": new, "signal_s": round(signalled - tf, 4),
                             "exited_s": round(exited - tf, 4), "stable_s": round(time.time() - tf, 4)})
                say("%s run %d: %s restarted (down %.2f s), stable again %.2f s after its SIGTERM" % (
                    mode, run, identifier, exited - signalled, time.time() - signalled))
            measure("restart", live_before, live, tf, {"restarts": roll})
        elif scenario_set == "churn":
            scenario = "join"
            joiner = "w%02d" % args.members
            before = set(observer.get_children(path + "/party"))
            party.spawn(joiner)
            party.wait_for_first_line(joiner, 60)
            tf = new_party_node_ctime(observer, path + "/party", before)
            after = party.settle(live | {joiner}, timeout)
            measure("join", live, after, tf)
            live = after

            scenario = "leave"
            leaver = members[4]
            tf = party.signal(leaver, signal.SIGTERM)
            after = party.settle(live - {leaver}, timeout)
            measure("leave", live, after, tf)
            live = after

            scenario = "crash"
            victim = members[7]
            tf = party.signal(victim, signal.SIGKILL)
            after = party.settle(live - {victim}, timeout + args.session_timeout)
            measure("crash", live, after, tf)
        else:
            scenario = "stall"
            pause_started, tf = docker("pause", args.container)
            try:
                time.sleep(max(0.0, tf + args.session_timeout / 2 - time.time()))
            finally:
                unpause_started, thawed = docker("unpause", args.container)
            after = party.settle(live, timeout, not_before=thawed + args.quiet)
            measure("stall", live, after, tf, {
                "pause_cmd_s": round(tf - pause_started, 4), "unpause_cmd_s": round(thawed - unpause_started, 4),
                "frozen_s": round(thawed - tf, 4), "thawed_at_s": round(thawed - tf, 4),
            })
    except (PhaseError, subprocess.CalledProcessError, OSError) as err:
        say("%s run %d %s FAILED: %s" % (mode, run, scenario, err))
        print(json.dumps(dict(base, scenario=scenario, ok=False, error=str(err),
                              timeline=timeline(party, time.time() - 120, time.time()))), flush=True)
    finally:
        party.kill_all()


def run(args):
    from kazoo.client import KazooClient

    logging.basicConfig(level=logging.CRITICAL)
    os.makedirs(args.log_dir, exist_ok=True)
    items_file = os.path.join(args.log_dir, "items-%d.txt" % args.items)
    with open(items_file, "w") as f:
        f.write("\n".join(str(i) for i in range(args.items)) + "\n")
    observer = KazooClient(hosts=args.connect, timeout=30)
    observer.start(timeout=30)
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            raise SystemExit("unknown mode %r (known: %s)" % (mode, ", ".join(MODES)))
    scenario_sets = args.scenarios.split(",")
    try:
        for run_index in range(1, args.runs + 1):
            for scenario_set in scenario_sets:
                for mode in modes:
                    if not runs_in(mode, scenario_set):
                        continue
                    say("run %d/%d, %s: %s" % (run_index, args.runs, scenario_set, MODES[mode]["label"]))
                    run_once(args, observer, mode, scenario_set, run_index, items_file)
    finally:
        observer.stop()
        observer.close()


# ---------------------------------------------------------------------------------------------------------- report


def fmt_s(value):
    if value is None:
        return "–"
    if value < 1:
        return "%.0f ms" % (value * 1000)
    if value < 10:
        return "%.2f s" % value
    return "%.1f s" % value


def fmt_num(value, unit=""):
    if value is None:
        return "–"
    if value == int(value) or abs(value) >= 100:
        text = "{:,.0f}".format(value)
    elif abs(value) >= 10:
        text = "%.1f" % value
    else:
        text = "%.2f" % value
    return text + unit


def summary(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    median = statistics.median(values)
    if min(values) == max(values):
        return fmt(median)
    return "%s [%s–%s]" % (fmt(median), fmt(min(values)), fmt(max(values)))


DEFINITIONS = """\
Every member is a separate process with its own ZooKeeper session: this crate's `zkp worker` (release build)
with the flags below, or kazoo 2.11's `SetPartitioner` through `bench/kazoo_bench.py worker` (which stamps each state
change when kazoo makes it, by wrapping `SetPartitioner._set_state`). Each prints a JSON line at every state change
(wall-clock `ts`, `state`, `items`); every figure below is computed from those lines. Items are the integers 0..999;
kazoo's partition function is its stride (`sorted(items)[i::P]`), the crate's `KazooStride` is the same function.

| Mode | Members |
|---|---|
| kazoo 2.11 (eager, stride) | `python3 bench/kazoo_bench.py worker ...` |
| Eager + KazooStride (default, kazoo parity) | `worker --partition stride --rebalance eager` (the defaults) |
| Eager + Rendezvous | `worker --partition rendezvous --rebalance eager` |
| Incremental + Rendezvous | `worker --partition rendezvous --rebalance incremental` |
| Incremental + Rendezvous + SessionAware (stall only) | `... --rebalance incremental --session-policy session-aware` |

Scenarios, each run on a fresh path: 10 members start and settle; then **join**: an 11th process starts; **leave**:
one member gets SIGTERM (the worker calls `finish()`, which gives up its locks and leaves the party, and exits);
**crash**: another member gets SIGKILL (its session, and with it its party node and lock nodes, lingers until the
session timeout). Each phase starts from a stable party. **Stall** (separate runs, 10 members): the ZooKeeper
container is frozen with `docker pause` for half the session timeout, then `docker unpause`. Every mode uses the same
settings: time_boundary {tb} for every member, session timeout {st} (ZooKeeper runs with tickTime 200 ms and
`maxSessionTimeout` raised to 60 s so that it grants it), `max_reaction_time` 1 s.

Definitions:

- An item has an **active owner** at time t if the latest line (at or before t) of some member lists it as
  processable: for this crate, the item is in the member's `items` (`Snapshot::items`: non-empty while ACQUIRED, and
  under `Rebalance::Incremental` also the kept items in RELEASE/ALLOCATING; empty while a session-aware member is
  suspended); for kazoo, the item is in the worker's items while its state is ACQUIRED. A member that is sent
  SIGTERM or SIGKILL stops owning anything at that moment (its worker loop stops there).
- The **fault** is: for a join, the creation time ZooKeeper stamped on the joiner's party node (`ctime`, the same
  clock; the members can only see the node once the server has committed it); for a leave or a crash, the moment
  the signal is sent; for the stall, the moment `docker pause` returned.
- The party is **stable** when every live member's latest line is ACQUIRED and their items form a disjoint cover of
  the 1,000 items. **Time to stable** (raw: the time_boundary wait is included) runs from the fault to the start of
  the final stable period (0 if nobody changed state).
- **Items paused**: how many items were without an active owner at some moment between the fault and stable;
  **paused item-s**: the integral over that time of the number of items without an active owner; **longest item
  pause**: the largest such time for one item.
- **Items moved**: items whose owner (by member) differs between the stable state before the fault and after it
  (a departed member's items always move: about 91 for the leave, 100 for the crash; ideal for the join: 1000/11).
- A phase ends once the party is stable and no member has printed anything for 2 s (for the stall, not before 2 s
  after the thaw).
"""

RESTART_DEFINITIONS = """Every member is a separate process with its own ZooKeeper session: this crate's `zkp worker` (release build)
with the flags below, or kazoo 2.11's `SetPartitioner` through `bench/kazoo_bench.py worker` (which stamps each state
change when kazoo makes it). Each prints a JSON line at every state change (wall-clock `ts`, `state`, `items`);
every figure below is computed from those lines. Items are the integers 0..999.

| Mode | Members |
|---|---|
| kazoo 2.11 (eager, stride) | `python3 bench/kazoo_bench.py worker ...` |
| Eager + KazooStride (default, kazoo parity) | `worker --partition stride --rebalance eager` (the defaults) |
| Incremental + Rendezvous | `worker --partition rendezvous --rebalance incremental` |
| Incremental + Rendezvous + static membership | `... --rebalance incremental --static-membership` |

The roll: 10 members (`--identifier w00` .. `w09`) start on a fresh path and settle. Then, for each member in turn:
SIGTERM (the worker calls `finish()`, which gives up its locks and leaves the party, and exits); as soon as the
process has exited, a new process starts with the same `--identifier`; the next member is restarted once the party
is stable (every live member ACQUIRED, their items a disjoint cover) and no member has printed anything for 2 s.
Every mode uses time_boundary {tb} and session timeout {st} (`max_reaction_time` 1 s). A restart (exit to the new
process's join) takes well under the time_boundary here.

Definitions (over the whole roll, from the first SIGTERM to the end of the last settle):

- an item has an **active owner** at time t if the latest line of some live member lists it as processable (this
  crate: `Snapshot::items`; kazoo: its items while ACQUIRED); a member stops owning anything at its SIGTERM;
- **items that changed owner**: items listed, at some moment during the roll, by a member (by identifier) other than
  their owner before the roll; **owner changed at the end**: items whose owner after the roll differs;
- **item-s without an owner**: the integral of the number of items without an active owner; **items paused**: how
  many items were without one at some moment;
- a **pause** is a line of a live member that no longer lists an item its previous line listed (the member stopped
  working on something). **Other members paused per restart**: for each of the 10 restarts, how many members other
  than the restarted one paused between its SIGTERM and the party being stable again (median [min–max] over the
  restarts of all runs; at most 9); **pauses per member**: how many times each member paused during the roll
  because of the others' restarts (median [min–max] over members); the restarted member itself stops once per
  restart, by design, and is not counted.
"""


def restart_rows(rows):
    """Per-restart and per-member pause counts of restart phases."""
    per_restart, per_member = [], []
    for r in rows:
        counts = {}
        for restart in r.get("restarts", []):
            lo, hi = restart["signal_s"], restart["stable_s"]
            paused = {identity(key) for ts, key in r["pause_events"]
                      if lo < ts <= hi and identity(key) != restart["member"]}
            per_restart.append(len(paused))
        for ts, key in r["pause_events"]:
            counts[identity(key)] = counts.get(identity(key), 0) + 1
        per_member.extend(counts.get("w%02d" % i, 0) for i in range(r["members_before"]))
    return per_restart, per_member


def report(args):
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    ok = [r for r in rows if r.get("ok")]
    failed = [r for r in rows if not r.get("ok")]
    tb = statistics.median([r["tb_s"] for r in rows]) if rows else 1.0
    st = statistics.median([r["session_timeout_s"] for r in rows]) if rows else 6.0
    out = []
    w = out.append
    restart_only = bool(rows) and all(r["scenario"] == "restart" for r in rows)
    w("## %s" % args.title)
    w("")
    if restart_only:
        w("What a deploy costs the items: a rolling restart of 10 members (separate processes) over 1,000 items, each "
          "member restarted in turn with the same identifier. kazoo 2.11 and this crate's modes, with and without "
          "static membership, side by side against the same ZooKeeper server in the same run.")
    else:
        w("What one party change costs the items: 10 members (separate processes) over 1,000 items; an 11th joins, "
          "then one leaves, then one crashes; and, separately, ZooKeeper stalls for half the session timeout. kazoo "
          "2.11 and this crate's modes, side by side against the same ZooKeeper server in the same run.")
    w("")
    w("```sh")
    w(args.command)
    w("```")
    w("")
    w("Needs Docker, Rust and Python 3 (kazoo 2.11 is installed with pip if missing). It builds the worker example "
      "in release mode, starts one ZooKeeper container (removed on exit), runs `bench/rebalance.py` (every scenario "
      "for every mode, modes alternating run after run) and writes this section to `bench/results/rebalance.md` "
      "(`restart.md` for `SCENARIOS=restart`), the raw measurements (one JSON line per phase, with every member's "
      "state changes) to `bench/results/rebalance.jsonl` (`restart.jsonl`). `python3 bench/rebalance.py report "
      "bench/results/<name>.jsonl` prints the tables again.")
    w("")
    w("### What is measured")
    w("")
    w((RESTART_DEFINITIONS if restart_only else DEFINITIONS).format(tb="%g s" % tb, st="%g s" % st))
    w("### Results")
    w("")
    if args.machine:
        w(args.machine)
        w("")
    w("Median [min–max] over the runs.")
    w("")
    for scenario in SCENARIOS:
        sample = [r for r in ok if r["scenario"] == scenario]
        if not sample and not any(r["scenario"] == scenario for r in failed):
            continue
        w("#### %s" % SCENARIO_TITLES[scenario])
        w("")
        if scenario == "restart":
            head = ["Mode", "runs", "items that changed owner", "owner changed at the end", "items paused",
                    "item-s without an owner", "other members paused per restart", "pauses per member",
                    "roll took"]
            w("| " + " | ".join(head) + " |")
            w("|" + "---|" * len(head))
            for mode in MODES:
                mine = [r for r in sample if r["mode"] == mode]
                bad = [r for r in failed if r["mode"] == mode and r["scenario"] in (scenario, "start")]
                if not mine and not bad:
                    continue
                per_restart, per_member = restart_rows(mine)
                runs = str(len(mine)) + (" (%d failed)" % len(bad) if bad else "")
                cells = [MODES[mode]["label"], runs,
                         summary([r["items_ever_moved"] for r in mine], fmt_num),
                         summary([r["items_moved"] for r in mine], fmt_num),
                         summary([r["items_paused"] for r in mine], fmt_num),
                         summary([r["paused_item_s"] for r in mine], fmt_num),
                         summary(per_restart, fmt_num), summary(per_member, fmt_num),
                         summary([r["restarts"][-1]["stable_s"] for r in mine if r.get("restarts")], fmt_s)]
                w("| " + " | ".join(cells) + " |")
            w("")
            continue
        head = ["Mode", "runs", "items moved", "items paused", "paused item-s", "longest item pause", "to stable"]
        if scenario == "stall":
            head.append("members that stopped")
        w("| " + " | ".join(head) + " |")
        w("|" + "---|" * len(head))
        for mode in MODES:
            if scenario != "stall" and MODES[mode].get("stall_only"):
                continue
            if MODES[mode].get("restart_only"):
                continue
            mine = [r for r in sample if r["mode"] == mode]
            bad = [r for r in failed if r["mode"] == mode and r["scenario"] in (scenario, "start")]
            if not mine and not bad:
                continue
            runs = str(len(mine)) + (" (%d failed)" % len(bad) if bad else "")
            cells = [MODES[mode]["label"], runs,
                     summary([r["items_moved"] for r in mine], fmt_num),
                     summary([r["items_paused"] for r in mine], fmt_num),
                     summary([r["paused_item_s"] for r in mine], fmt_num),
                     summary([r["max_item_pause_s"] for r in mine], fmt_s),
                     summary([r["time_to_stable_s"] for r in mine], fmt_s)]
            if scenario == "stall":
                cells.append(summary([r["members_changed"] for r in mine], fmt_num))
            w("| " + " | ".join(cells) + " |")
        w("")
        if scenario == "stall" and sample:
            w("The container was frozen for %s (from `docker pause` returning to `docker unpause` returning; the "
              "commands themselves took %s and %s). *Members that stopped*: members that changed state at all." % (
                  summary([r["frozen_s"] for r in sample], fmt_s),
                  summary([r["pause_cmd_s"] for r in sample], fmt_s),
                  summary([r["unpause_cmd_s"] for r in sample], fmt_s)))
            w("")
            aware = [r for r in sample if r["mode"] == "incremental-rendezvous-session-aware"]
            if aware:
                w("SessionAware check: items moved = 0 in %d of %d runs; item-seconds paused while the item's owner "
                  "had not reported a suspension: %s; members that reported a suspension (`suspended: true`): %s; "
                  "the last item resumed %s after the thaw (after `docker unpause` returned; the container may resume a "
                  "little before the command returns)." % (
                      sum(1 for r in aware if r["items_moved"] == 0), len(aware),
                      summary([r["paused_not_suspended_item_s"] for r in aware], fmt_num),
                      summary([r["suspended_members"] for r in aware], fmt_num),
                      summary([(r["pause_window_s"][1] - r["thawed_at_s"]) if r["pause_window_s"] else 0.0
                               for r in aware], fmt_s)))
                w("")
    doubles = [r for r in ok if r["double_owned_item_s"] > 0]
    w("Safety check: item-seconds during which two members listed the same item at once: %s over the %d measured "
      "phases." % ("0" if not doubles else "NOT 0 in %d phases (%s)" % (
          len(doubles), ", ".join("%s %s run %d" % (r["mode"], r["scenario"], r["run"]) for r in doubles)), len(ok)))
    unexpected = [(r["mode"], r["scenario"], r["run"], m) for r in ok for m in r.get("failed_members", [])]
    if unexpected:
        w("")
        w("Members that exited on their own: " + "; ".join("%s in %s %s run %d" % (m, mode, sc, run)
                                                             for mode, sc, run, m in unexpected) + ".")
    if failed:
        w("")
        w("Failed phases: " + "; ".join("%s %s run %d: %s" % (r["mode"], r["scenario"], r["run"], r["error"])
                                        for r in failed) + ".")
    print("\n".join(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--connect", required=True)
    r.add_argument("--container", required=True, help="the ZooKeeper container to pause for the stall")
    r.add_argument("--rust-worker", default="target/release/zkp worker")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--scenarios", default="churn,stall")
    r.add_argument("--items", type=int, default=1000)
    r.add_argument("--members", type=int, default=10)
    r.add_argument("--time-boundary", type=float, default=1.0)
    r.add_argument("--session-timeout", type=float, default=6.0)
    r.add_argument("--quiet", type=float, default=2.0, help="seconds without a member line that end a phase")
    r.add_argument("--log-dir", default="/tmp/zkp-rebalance")
    p = sub.add_parser("report")
    p.add_argument("file")
    p.add_argument("--machine", default="")
    p.add_argument("--title", default="Rebalance: join, leave, crash and a ZooKeeper stall, against kazoo 2.11")
    p.add_argument("--command", default="bash bench/rebalance.sh    # ~10 minutes on 2 cores (RUNS=3)")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
