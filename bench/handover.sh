#!/usr/bin/env bash
# The hand-over benchmark: how long a departed member's items go unprocessed after a crash (SIGKILL) and a graceful
# leave (SIGTERM), and what a burst (a join or a second crash within time_boundary) costs, in a party of 10 members
# over 1,000 items: kazoo 2.11, this crate without the departure fast path (the commit before it) and with it, side
# by side on one local ZooKeeper (see bench/handover.py for the definitions).
#
#   bash bench/handover.sh          # ~25 minutes on 2 cores: 10 runs of every phase for every mode
#   RUNS=3 MODES=incremental-rendezvous bash bench/handover.sh
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: built locally if missing, never pulled) and kazoo 2.11
# (pip), builds zkp in release mode for this tree and for BEFORE (git archive of that commit), starts ONE ZooKeeper
# container with a 50 ms tick (so that a session expires within 50 ms of its timeout; removed on exit), runs
# bench/handover.py against it, and writes bench/results/handover.md and bench/results/handover.jsonl, then the plot
# bench/results/handover.svg (bench/plot.py).
#
# Knobs (environment): RUNS (10), MEMBERS (10), ITEMS (1000), TIME_BOUNDARY (5 s), SESSION_TIMEOUT (4 s), MODES
# (kazoo,before,incremental-rendezvous,incremental-weighted), BEFORE (5858310, the commit before the fast path),
# ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8), MACHINE_NOTE, KEEP_LOGS (a directory to keep every member's stderr
# in, run with RUST_LOG=info,zk_partitioner_proto=debug: a departure that waits the quiet period says why), PHASES
# (crash,leave,crash-join,crash-crash,crash-pair: a phase starts from the party the phases before it left), ZOO_HEAP_MB
# (the server's heap; the image's default, 256 MB, if unset), OUT (handover: bench/results/$OUT.{md,jsonl,svg}),
# SETTLE_S and PHASE_S (how long the cold start and each phase may take to settle; if unset, a phase 240 s for kazoo
# and 90 s for the crate, beyond the session timeout, and the cold start twice that). At 100 x 100,000 kazoo needs
# about 7 minutes for each (its members are CPU-bound on 2 cores), hence SETTLE_S=1800 PHASE_S=1500 in that command.
#
#   RUNS=1 MEMBERS=100 ITEMS=100000 SESSION_TIMEOUT=10 TIME_BOUNDARY=2 ZOO_HEAP_MB=256 PHASES=crash,leave \
#     SETTLE_S=1800 PHASE_S=1500 MODES=kazoo,incremental-rendezvous OUT=handover-100x100k bash bench/handover.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
    "") ;;
    *) echo "usage: bash bench/handover.sh   (knobs: RUNS, MEMBERS, ITEMS, TIME_BOUNDARY, SESSION_TIMEOUT, MODES, BEFORE)" >&2
       exit 2 ;;
esac
RUNS=${RUNS:-10}
MEMBERS=${MEMBERS:-10}
ITEMS=${ITEMS:-1000}
TIME_BOUNDARY=${TIME_BOUNDARY:-5}
SESSION_TIMEOUT=${SESSION_TIMEOUT:-4}
MODES=${MODES:-kazoo,before,incremental-rendezvous,incremental-weighted}
BEFORE=${BEFORE:-5858310}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}
PHASES=${PHASES:-crash,leave,crash-join,crash-crash,crash-pair}
OUT=${OUT:-handover}

t0=$(date +%s)
say() { printf '[handover.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
busy_start=$(cpu_busy_pct)

work=$(mktemp -d /tmp/zkp-handover.XXXXXX)
container="zkp-handover-$$"
cleanup() {
    docker rm -f -v "$container" >/dev/null 2>&1 || true
    if [ -n "${KEEP_LOGS:-}" ] && [ -d "$work/logs" ]; then
        mkdir -p "$KEEP_LOGS" && cp -r "$work/logs/." "$KEEP_LOGS/"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "ZooKeeper image $image"
bash docker/zookeeper/build.sh "$image"

if [[ ",$MODES," == *,kazoo,* ]]; then
    say "kazoo 2.11 for $(command -v python3)"
    if ! python3 -c 'import kazoo.version as v, sys; sys.exit(not v.__version__.startswith("2.11."))' 2>/dev/null; then
        python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
            || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
    fi
elif ! python3 -c 'import kazoo' 2>/dev/null; then
    # The script's observer is a kazoo client in every case.
    python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
fi
kazoo_version=$(python3 -c 'import kazoo.version as v; print(v.__version__)')

revision=$(measured_revision src crates/proto crates/cli Cargo.toml)
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
say "building zkp (release) for this tree"
worker=$(worker_command . "$work/worker")
before_worker=""
if [[ ",$MODES," == *,before,* ]]; then
    say "building zkp (release) for $BEFORE"
    before_src="${CARGO_TARGET_DIR:-target}/ab/$(git rev-parse --short "$BEFORE")/src"
    if [ ! -f "$before_src/Cargo.toml" ]; then
        mkdir -p "$before_src"
        git archive "$BEFORE" | tar -x -C "$before_src"
    fi
    before_worker=$(CARGO_TARGET_DIR="$(pwd)/${CARGO_TARGET_DIR:-target}/ab/target" worker_command "$before_src" "$work/before")
fi

say "starting ZooKeeper ($container, tickTime 50 ms)"
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=50 -e ZOO_MAX_SESSION_TIMEOUT=60000 \
    ${ZOO_HEAP_MB:+-e "ZOO_HEAP_MB=$ZOO_HEAP_MB"} \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
zk_version=$(python3 bench/wait_serving.py "$connect")
say "ZooKeeper $zk_version serving on $connect"

results="$work/handover.jsonl"
run_status=0
RUST_LOG=${RUST_LOG:-info,zk_partitioner_proto=debug} \
python3 bench/handover.py run --connect "$connect" --rust-worker "$worker" --before-worker "$before_worker" \
    --runs "$RUNS" --modes "$MODES" --members "$MEMBERS" --items "$ITEMS" --time-boundary "$TIME_BOUNDARY" \
    --session-timeout "$SESSION_TIMEOUT" --phases "$PHASES" --settle-timeout "${SETTLE_S:-0}" \
    --phase-timeout "${PHASE_S:-0}" --log-dir "$work/logs" \
    >"$results" || run_status=$?

elapsed=$(( $(date +%s) - t0 ))
busy_end=$(cpu_busy_pct)
busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work during this run (CPU in use before or after it), so absolute \
times are inflated."
fi
machine="Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${elapsed} s in all; crate at ${revision}, the commit before the fast \
path ${BEFORE}. Machine: $(nproc) × $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), load average \
${load_start} at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; CPU in use before ${busy_start}%, after \
${busy_end}%.${busy} ZooKeeper ${zk_version} (image ${image}, standalone, tickTime 50 ms, in Docker on the same \
machine), kazoo ${kazoo_version}, $(rustc --version | cut -d' ' -f1-2). Runs: ${RUNS}; time_boundary \
${TIME_BOUNDARY} s, session timeout ${SESSION_TIMEOUT} s${ZOO_HEAP_MB:+, ZooKeeper heap ${ZOO_HEAP_MB} MB}.${MACHINE_NOTE:+ $MACHINE_NOTE}"

mkdir -p bench/results
cp "$results" "bench/results/$OUT.jsonl"
python3 bench/handover.py report "bench/results/$OUT.jsonl" --machine "$machine" \
    --command "bash bench/handover.sh    # RUNS=$RUNS MEMBERS=$MEMBERS ITEMS=$ITEMS PHASES=$PHASES MODES=$MODES" \
    | tee "bench/results/$OUT.md"
failed=$(python3 -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if l.strip() and not json.loads(l)["ok"]))' \
    "bench/results/$OUT.jsonl")
say "written bench/results/$OUT.md and bench/results/$OUT.jsonl ($failed failed phases)"
# The plot of the run's file, if bench/plot.py knows it by name (handover, handover-100x100k).
python3 bench/plot.py --from "bench/results/$OUT.jsonl"
[ "$run_status" = 0 ] || { say "bench/handover.py stopped early (exit $run_status): the results are partial"; exit 1; }
[ "$failed" = 0 ]
