#!/usr/bin/env bash
# The lineage benchmark of BENCHMARKS.md ("Splitting shards"): 10 members over 10,000 items; an admin splits 1,000 of
# them into two children each; then the members finish the parents they hold. Requests per split and per finish, the
# time from each finish to both children ACQUIRED by their owners, and items taken again: moved by the partition
# function, or stopped although their owner kept them.
#
#   bash bench/lineage.sh        # ~2 minutes on 2 cores
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls), builds the
# bench binary in release mode, starts ONE ZooKeeper container (removed on exit), and runs benches/lineage.rs for each
# rebalance mode. Knobs (environment): MODES ("incremental eager"), MEMBERS (10), ITEMS (10000), SPLITS (1000),
# TIME_BOUNDARY (1), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8). Output: a markdown table on stdout, JSON lines in
# bench/results/lineage.jsonl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODES=${MODES:-incremental eager}
MEMBERS=${MEMBERS:-10}
ITEMS=${ITEMS:-10000}
SPLITS=${SPLITS:-1000}
TIME_BOUNDARY=${TIME_BOUNDARY:-1}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}
container="zkp-lineage-$$"
trap 'docker rm -f -v "$container" >/dev/null 2>&1 || true' EXIT

bash docker/zookeeper/build.sh "$image" >&2
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
bench=$(cargo_exe lineage bench --bench lineage --no-run)

docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 -e 'JVMFLAGS=-Xmx1g' \
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
out=bench/results/lineage.jsonl
: >"$out"
for mode in $MODES; do
    echo "[lineage.sh] $MEMBERS members, $ITEMS items, $SPLITS splits, $mode" >&2
    "$bench" --connect "$connect" --members "$MEMBERS" --items "$ITEMS" --splits "$SPLITS" --rebalance "$mode" \
        --time-boundary "$TIME_BOUNDARY" --path "/bench/$mode" | tee -a "$out" >&2
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| rebalance | splits (s) | requests per split | paced: finish to children ACQUIRED, median / max (s) | all finishes (s) | requests per finish | burst: finish to children ACQUIRED, median / p99 / max (s) | burst: over time_boundary + 1 s | moved by the function | kept but stopped |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    p, b = r["paced_finish_to_children_acquired_s"], r["burst_finish_to_children_acquired_s"]
    print(f"| {r['rebalance']} | {r['split_s']:.1f} | {r['requests_per_split']:.1f} | {p['median']:.2f} / {p['max']:.2f} | "
          f"{r['finish_s']:.1f} | {r['requests_per_finish']:.1f} | {b['median']:.2f} / {b['p99']:.2f} / {b['max']:.2f} | "
          f"{r['over_target']} of {r['measured']} | {r['moved_by_function']} | {r['kept_but_stopped']:,} |")
r = rows[0]
print(f"\n{r['members']} members, {r['items']:,} items, {r['splits']:,} split into two, time_boundary {r['time_boundary_s']} s, "
      "ZooKeeper in Docker on the same machine.")
PY
