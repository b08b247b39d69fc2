#!/usr/bin/env bash
# Reconnection after a server restart (RELIABILITY.md, "Reconnection after a server restart"): benches/reconnect.rs
# for each server kind, a bare zookeeper-client session (the minimal reproduction of its back-off) beside a session
# opened by the crate's connect_with_options, each with a member; then the table.
#
#   bash bench/reconnect.sh                              # process, container and ensemble: about 8 minutes
#   SERVERS=process OUTAGES=1,2,4,6 RUNS=3 bash bench/reconnect.sh
#
# Writes bench/results/reconnect.jsonl (one JSON line per session and restart) and bench/results/reconnect.md (the
# run's line and the table). Knobs: SERVERS (process,container,ensemble; process needs Debian's libzookeeper-java),
# OUTAGES (1,2,4,6 seconds down; the ensemble uses the first two), RUNS (3; the ensemble 1), SESSION (20 s: every
# session outlives the outage), TIME_BOUNDARY (0.5 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SERVERS=${SERVERS:-process,container,ensemble}
OUTAGES=${OUTAGES:-1,2,4,6}
RUNS=${RUNS:-3}
SESSION=${SESSION:-20}
TIME_BOUNDARY=${TIME_BOUNDARY:-0.5}
t0=$(date +%s)
say() { printf '[reconnect.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision

work=$(mktemp -d /tmp/zkp-reconnect.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

revision=$(measured_revision src benches Cargo.toml)

say "building benches/reconnect.rs (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
bench_exe=$(cargo_exe reconnect bench --bench reconnect --no-run)

busy_start=$(cpu_busy_pct)
start=$(date -u '+%Y-%m-%d %H:%M')
for server in ${SERVERS//,/ }; do
    outages=$OUTAGES runs=$RUNS
    if [ "$server" = ensemble ]; then
        outages=$(echo "$OUTAGES" | cut -d, -f1-2) runs=1
    fi
    say "$server: outages $outages s, $runs run(s)"
    "$bench_exe" --server "$server" --outages "$outages" --runs "$runs" --session "$SESSION" \
        --time-boundary "$TIME_BOUNDARY" | tee -a "$work/reconnect.jsonl"
done
end=$(date -u '+%H:%M')
busy_end=$(cpu_busy_pct)

busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work (CPU in use before or after the run), so times are inflated."
fi
mkdir -p bench/results
cp "$work/reconnect.jsonl" bench/results/reconnect.jsonl
{
    echo "### Reconnection after a server restart"
    echo
    echo "Run $start-$end UTC; crate at ${revision}; session timeout ${SESSION} s, time_boundary ${TIME_BOUNDARY} s. \
Machine: $(nproc) cores; CPU in use before the run ${busy_start}%, after it ${busy_end}%.${busy}"
    echo
    python3 - "$work/reconnect.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
groups = {}
for r in rows:
    groups.setdefault((r["server"], r["outage_s"], r["mode"]), []).append(r)
print("| server | down | client | restarts | connected after the server serves: median | worst "
      "| ACQUIRED after: median | worst |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
order = {"process": 0, "container": 1, "ensemble": 2}
for (server, outage, mode), rs in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1], kv[0][2])):
    conn = [r["connected_after_back_ms"] for r in rs if r["connected_after_back_ms"] is not None]
    acq = [r["acquired_after_back_ms"] for r in rs if r["acquired_after_back_ms"] is not None]
    fmt = lambda v: f"{v:,.0f} ms"
    client = "zookeeper-client alone" if mode == "direct" else ("zk_partitioner::connect" if mode == "connect" else "through the relay")
    print(f"| {server} | {outage:g} s | {client} | {len(rs)} | {fmt(statistics.median(conn))} | {fmt(max(conn))} | "
          f"{fmt(statistics.median(acq))} | {fmt(max(acq))} |")
PY
} | tee bench/results/reconnect.md
say "written bench/results/reconnect.jsonl and reconnect.md"
