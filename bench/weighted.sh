#!/usr/bin/env bash
# The weighted benchmark of BENCHMARKS.md ("Weighted items and capacities"): 100 members of capacities 1 to 8 over
# 100,000 items with Zipf(1.1) weights, on a real ZooKeeper; a member of capacity 4 joins, leaves, and the hottest
# item's weight doubles. For WeightedRendezvous and for Rendezvous (which ignores weights): time to converge, the
# heaviest member against its ideal share, weight moved against the least that must move, items stopped that kept
# their owner, and CPU per member: in the partition function, and the whole process's over the phase.
#
#   bash bench/weighted.sh        # ~10 minutes on 2 cores
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls), builds the
# bench binary in release mode, starts ONE ZooKeeper container (removed on exit), and runs benches/weighted.rs for
# each function. Knobs (environment): MEMBERS (100), ITEMS (100000), ZIPF (1.1), FUNCTIONS ("weighted rendezvous"; also "sticky", WeightedRendezvous::sticky()),
# TIME_BOUNDARY (2), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8). Output: a markdown table on stdout, JSON lines in
# bench/results/weighted.jsonl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MEMBERS=${MEMBERS:-100}
ITEMS=${ITEMS:-100000}
ZIPF=${ZIPF:-1.1}
FUNCTIONS=${FUNCTIONS:-weighted rendezvous}
TIME_BOUNDARY=${TIME_BOUNDARY:-2}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}
container="zkp-weighted-$$"
trap 'docker rm -f -v "$container" >/dev/null 2>&1 || true' EXIT

bash docker/zookeeper/build.sh "$image" >&2
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
bench=$(cargo_exe weighted bench --bench weighted --no-run)

# A 2 GB heap: 100,000 items' set children, lock directories and lock nodes, and the weight tables. Sessions of up to
# 60 s (tickTime 200 ms would cap them at 4 s): 100 members in one process on 2 cores compute their first placement
# at once, and the benchmark measures the function, not how a starved client keeps its session.
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 -e 'JVMFLAGS=-Xmx2g' \
    -e ZOO_MAX_SESSION_TIMEOUT=60000 \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
for _ in $(seq 1 90); do
    if echo ruok | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3" 2>/dev/null | grep -q imok; then
        break
    fi
    sleep 1
done

mkdir -p bench/results
out=bench/results/weighted.jsonl
: >"$out"
for function in $FUNCTIONS; do
    echo "[weighted.sh] $MEMBERS members, $ITEMS items, Zipf($ZIPF), $function" >&2
    "$bench" --connect "$connect" --members "$MEMBERS" --items "$ITEMS" --zipf "$ZIPF" --partition "$function" \
        --time-boundary "$TIME_BOUNDARY" | tee -a "$out" >&2
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| function | phase | converged (s) | heaviest / ideal | left out | weight moved / least | items moved | kept but stopped | function CPU per member, mean / max (ms) | process CPU per member (ms) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    moved = "" if r["phase"] == "formed" else f"{r['moved_over_least']:.2f}"
    print(f"| {r['function']} | {r['phase']} | {r['converged_s']:.1f} | {r['heaviest_over_ideal']:.3f} | "
          f"{r['left_out']} | {moved} | {r['moved_items']:,} | {r['kept_but_stopped']:,} | "
          f"{r['cpu_ms_mean']:.1f} / {r['cpu_ms_max']:.1f} | {r.get('process_cpu_ms_per_member', float('nan')):.1f} |")
if rows:
    r = rows[0]
    print(f"\n{r['members']} members (capacities 1 to 8), {r['items']:,} items with Zipf({r['zipf']}) weights, "
          f"time_boundary {r['time_boundary_s']} s, incremental rebalancing, ZooKeeper in Docker on the same machine. "
          "'left out': members holding a single item heavier than their own ideal share, not counted in 'heaviest'. "
          "For 'hot item doubles', 'items moved' and the weight are those besides the hot item, against its new weight.")
PY
