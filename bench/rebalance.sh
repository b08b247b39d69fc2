#!/usr/bin/env bash
# The rebalance benchmark: join, leave, crash and a ZooKeeper stall in a party of 10 members over 1,000 items,
# kazoo 2.11 against this crate's modes, side by side on one local ZooKeeper (see bench/rebalance.py for the
# definitions; the results section it writes explains them too).
#
#   bash bench/rebalance.sh          # ~10 minutes on 2 cores: 3 runs of every scenario for every mode
#   SCENARIOS=restart bash bench/rebalance.sh   # ~8 minutes: rolling restarts (a deploy), 2 runs, static membership
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls) and kazoo 2.11
# (pip), builds zkp in release mode, starts ONE ZooKeeper container (removed on exit, however the script
# ends), runs bench/rebalance.py against it, and writes bench/results/rebalance.md (the markdown section: command,
# definitions, machine, tables) and bench/results/rebalance.jsonl (one JSON line per measured phase, with every
# member's state changes). With SCENARIOS=restart (run on its own) the files are bench/results/restart.md and
# bench/results/restart.jsonl instead, and the default modes are kazoo, eager-stride, incremental-rendezvous and
# incremental-rendezvous-static (`--static-membership`). Then it draws the plots of the JSON lines (bench/plot.py:
# bench/results/rebalance.svg and join-moves.svg from rebalance.jsonl).
#
# Knobs (environment): RUNS (3), TIME_BOUNDARY (1 s, every member), SESSION_TIMEOUT (6 s; the stall freezes
# ZooKeeper for half of it), MODES (all five), SCENARIOS ("churn,stall"), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8),
# MACHINE_NOTE (a sentence added to the machine line of the results, e.g. what else the machine was doing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
    "") ;;
    *) echo "usage: bash bench/rebalance.sh   (knobs: RUNS, TIME_BOUNDARY, SESSION_TIMEOUT, MODES, SCENARIOS)" >&2
       exit 2 ;;
esac
TIME_BOUNDARY=${TIME_BOUNDARY:-1}
SESSION_TIMEOUT=${SESSION_TIMEOUT:-6}
SCENARIOS=${SCENARIOS:-churn,stall}
if [ "$SCENARIOS" = restart ]; then
    RUNS=${RUNS:-2}
    MODES=${MODES:-kazoo,eager-stride,incremental-rendezvous,incremental-rendezvous-static}
    out=restart
    title="Rolling restart: 10 members restarted one by one, against kazoo 2.11"
    command="SCENARIOS=restart bash bench/rebalance.sh    # ~8 minutes on 2 cores (RUNS=2)"
else
    case ",$SCENARIOS," in *,restart,*)
        echo "run SCENARIOS=restart on its own (it writes bench/results/restart.md)" >&2; exit 2 ;;
    esac
    RUNS=${RUNS:-3}
    MODES=${MODES:-kazoo,eager-stride,eager-rendezvous,incremental-rendezvous,incremental-rendezvous-session-aware}
    out=rebalance
    title="Rebalance: join, leave, crash and a ZooKeeper stall, against kazoo 2.11"
    command="bash bench/rebalance.sh    # ~10 minutes on 2 cores (RUNS=3)"
fi
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}

t0=$(date +%s)
say() { printf '[rebalance.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
busy_start=$(cpu_busy_pct)

work=$(mktemp -d /tmp/zkp-rebalance.XXXXXX)
container="zkp-rebalance-$$"
cleanup() {
    docker unpause "$container" >/dev/null 2>&1 || true
    docker rm -f -v "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "ZooKeeper image $image"
bash docker/zookeeper/build.sh "$image"

say "kazoo 2.11 for $(command -v python3)"
if ! python3 -c 'import kazoo.version as v, sys; sys.exit(not v.__version__.startswith("2.11."))' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
fi
kazoo_version=$(python3 -c 'import kazoo.version as v; print(v.__version__)')

# What is measured: HEAD plus any uncommitted change to the library or the worker (noted before building).
revision=$(measured_revision src crates/proto crates/cli Cargo.toml)

say "building zkp (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
# A private copy: a rebuild in this tree during the run must not swap the binary under us.
worker=$(worker_command . "$work/worker")

say "starting ZooKeeper ($container)"
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 -e ZOO_MAX_SESSION_TIMEOUT=60000 \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
zk_version=$(python3 bench/wait_serving.py "$connect")
say "ZooKeeper $zk_version serving on $connect"

results="$work/rebalance.jsonl"
run_status=0
python3 bench/rebalance.py run --connect "$connect" --container "$container" --rust-worker "$worker" \
    --runs "$RUNS" --modes "$MODES" --scenarios "$SCENARIOS" --time-boundary "$TIME_BOUNDARY" \
    --session-timeout "$SESSION_TIMEOUT" --log-dir "$work/logs" >"$results" || run_status=$?

elapsed=$(( $(date +%s) - t0 ))
cores=$(nproc)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
busy_end=$(cpu_busy_pct)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work during this run (CPU in use before or after it), so absolute \
times are inflated; every mode ran under the same load, modes alternating run after run."
fi
machine="Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${elapsed} s in all; crate at ${revision}. Machine: ${cores} × ${cpu}, \
$(free -g | awk '/^Mem:/ {print $2}') GB RAM, Linux $(uname -r); load average ${load_start} at the start, ${load_end} \
at the end; CPU in use before the run ${busy_start}%, after it ${busy_end}%.${busy} ZooKeeper ${zk_version} (image \
${image}, standalone, tickTime 200 ms, in Docker on the same machine), kazoo ${kazoo_version} on Python $(python3 -c 'import platform; print(platform.python_version())'), \
$(rustc --version | cut -d' ' -f1-2). Runs: ${RUNS}; time_boundary ${TIME_BOUNDARY} s, session timeout ${SESSION_TIMEOUT} s.\
${MACHINE_NOTE:+ $MACHINE_NOTE}"

mkdir -p bench/results
cp "$results" "bench/results/$out.jsonl"
python3 bench/rebalance.py report "bench/results/$out.jsonl" --machine "$machine" --title "$title" --command "$command" \
    | tee "bench/results/$out.md"
failed=$(python3 -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if l.strip() and not json.loads(l)["ok"]))' \
    "bench/results/$out.jsonl")
say "written bench/results/$out.md and bench/results/$out.jsonl ($failed failed phases)"
# The plots of these JSON lines (rebalance.jsonl: bench/results/rebalance.svg, join-moves.svg; bench/plot.py --list).
python3 bench/plot.py --from "bench/results/$out.jsonl"
[ "$run_status" = 0 ] || { say "bench/rebalance.py stopped early (exit $run_status): the results are partial"; exit 1; }
[ "$failed" = 0 ]
