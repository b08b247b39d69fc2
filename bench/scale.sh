#!/usr/bin/env bash
# The scale benchmark (BENCHMARKS.md, "The scale benchmark"): P members over N items, as separate processes and all in
# one process; cold start, a join, a leave and a crash, for the default and the low-movement modes: time to a full
# disjoint cover, ZooKeeper requests, bytes, latency and heap, lock nodes touched, sessions lost, and each member's
# CPU time (in the partition function too) and RSS. See bench/scale.py for the definitions (the results section it
# writes explains them too).
#
#   bash bench/scale.sh                               # 10 members × 10,000 items, every mode and hosting, 1 run
#   MEMBERS=100 ITEMS=100000 bash bench/scale.sh      # the issue's size
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls), builds
# zkp and the bench binaries (benches/scale.rs: the in-process host; benches/partitioner.rs: delete-tree
# between runs) in release mode, starts ONE ZooKeeper container with a ZOO_HEAP_MB heap, its transaction log and GC
# log on the host (removed on exit, however the script ends, with every member process), runs bench/scale.py against
# it and writes bench/results/$OUT.md (the markdown section) and bench/results/$OUT.jsonl (one JSON line per phase),
# then the plots drawn from that file, if any (bench/plot.py --list: scale.svg, scale-100x100k.svg, join-moves.svg).
#
# Knobs (environment): MEMBERS (10), ITEMS (10000), RUNS (1), WARMUP (1: untimed rounds of every mode, in the first
# hosting, before the runs: they warm the fresh server's JVM; their lines carry "warmup": true), MODES
# ("eager-stride,incremental-rendezvous"; also incremental-rendezvous-session-aware), HOSTINGS
# ("processes,inprocess"; INPROCESS=0 drops inprocess, INPROCESS=only keeps only it), QUIET_S (8: seconds without a
# member line that end a phase), KEEP_LOGS (a directory to keep the members' stderr and the GC log in),
# INPROCESS_THREADS (the in-process host's Tokio worker threads; default one per core), TIME_BOUNDARY (2 s),
# SESSION_TIMEOUT (10 s), ZOO_HEAP_MB (256), PHASE_TIMEOUT (300 s), OUT (scale), ZOOKEEPER_IMAGE
# (zk-partitioner/zookeeper:3.8), JOIN_AFTER_S (the cold start ends that long after its cover, not after QUIET_S of
# silence: the join right after a cold start), WORKER (a worker command to run instead of this tree's `zkp worker`), MACHINE_NOTE
# (a sentence added to the machine line), ZK_ROUTE (bridge: the container's address; proxy: the published port, through
# docker-proxy), ZK_HOST (docker; process: ZooKeeper as a plain Java process from Debian's libzookeeper-java on
# loopback, no container), ZK_MAX_SESSION_TIMEOUT (60000 ms: the server's cap on session timeouts; ZooKeeper's own
# default at tickTime 200 ms would be 20 ticks, 4 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The whole script is one function, called on the last line: bash parses it entirely before running it, so editing
# this file during a run (bash otherwise reads a script as it goes) cannot break the run.
main() {

case "${1:-}" in
    "") ;;
    *) echo "usage: bash bench/scale.sh   (knobs: MEMBERS, ITEMS, RUNS, MODES, HOSTINGS, INPROCESS, TIME_BOUNDARY," \
            "SESSION_TIMEOUT, ZOO_HEAP_MB, PHASE_TIMEOUT, OUT)" >&2
       exit 2 ;;
esac
MEMBERS=${MEMBERS:-10}
ITEMS=${ITEMS:-10000}
RUNS=${RUNS:-1}
WARMUP=${WARMUP:-1}
MODES=${MODES:-eager-stride,incremental-rendezvous}
HOSTINGS=${HOSTINGS:-processes,inprocess}
case "${INPROCESS:-1}" in
    0) HOSTINGS=processes ;;
    only) HOSTINGS=inprocess ;;
esac
TIME_BOUNDARY=${TIME_BOUNDARY:-2}
SESSION_TIMEOUT=${SESSION_TIMEOUT:-10}
ZOO_HEAP_MB=${ZOO_HEAP_MB:-256}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-300}
OUT=${OUT:-scale}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}

t0=$(date +%s)
say() { printf '[scale.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
busy_start=$(cpu_busy_pct)

work=$(mktemp -d /tmp/zkp-scale.XXXXXX)
container="zkp-scale-$$"
runner=""
cleanup() {
    # bench/scale.py runs in a process group of its own (--own-process-group), with every member process: end it.
    if [ -n "$runner" ] && kill -0 "$runner" 2>/dev/null; then
        kill -TERM -- "-$runner" 2>/dev/null || kill -TERM "$runner" 2>/dev/null || true
        sleep 2
        kill -KILL -- "-$runner" 2>/dev/null || kill -KILL "$runner" 2>/dev/null || true
    fi
    docker rm -f -v "$container" >/dev/null 2>&1 || true
    [ -z "${zk_pid:-}" ] || { kill "$zk_pid" 2>/dev/null; wait "$zk_pid" 2>/dev/null; } || true
    # KEEP_LOGS=DIR: the members' stderr (RUST_LOG=zk_partitioner=debug for the library's logs) and ZooKeeper's GC log.
    if [ -n "${KEEP_LOGS:-}" ]; then
        mkdir -p "$KEEP_LOGS" && cp -r "$work/logs" "$work/zklog" "$KEEP_LOGS"/ 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${ZK_HOST:-docker}" != process ]; then
    say "ZooKeeper image $image"
    bash docker/zookeeper/build.sh "$image"
fi

python3 -c 'import kazoo' 2>/dev/null || {
    python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
}

# What is measured: HEAD plus any uncommitted change to the library or the worker (noted before building).
revision=$(measured_revision src crates/proto crates/cli benches/scale.rs Cargo.toml)
[ -z "${WORKER:-}" ] || revision="the worker $WORKER (the in-process host and tools: $revision)"

say "building zkp and the bench binaries (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
host_bin=$(cargo_exe scale bench --bench scale --no-run)
bench_bin=$(cargo_exe partitioner bench --bench partitioner --no-run)
# Private copies: a rebuild in this tree during the run must not swap the binaries under us.
# WORKER=COMMAND: another worker for the separate processes (e.g. another commit's, built by bench/ab.sh under
# ${CARGO_TARGET_DIR:-target}/ab: "BIN worker" for a zkp, "BIN" for an older worker example), to compare commits.
worker=${WORKER:-$(worker_command . "$work/worker")}
cp "$host_bin" "$work/scale-host"
cp "$bench_bin" "$work/partitioner"

mkdir -p "$work/zkdata" "$work/zklog" "$work/logs"
zk_args=(--container "$container")
if [ "${ZK_HOST:-docker}" = process ]; then
    # ZooKeeper as a plain Java process from Debian's libzookeeper-java (apt-get install libzookeeper-java), on a free
    # loopback port: no container, no bridge, no docker-proxy. The same configuration as the container's.
    [ -f /usr/share/java/zookeeper.jar ] || { echo "ZK_HOST=process needs Debian's libzookeeper-java" >&2; exit 1; }
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$work/zksnap"
    cat >"$work/zoo.cfg" <<CFG
dataDir=$work/zksnap
dataLogDir=$work/zkdata
tickTime=200
maxSessionTimeout=${ZK_MAX_SESSION_TIMEOUT:-60000}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
clientPort=$port
clientPortAddress=127.0.0.1
CFG
    say "starting ZooKeeper as a process (heap ${ZOO_HEAP_MB} MB, port $port)"
    java "-Xmx${ZOO_HEAP_MB}m" "-Xlog:gc:file=$work/zklog/gc.log:time,uptime" \
        -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" >"$work/zklog/server.log" 2>&1 &
    zk_pid=$!
    zk_args=(--zk-pid "$zk_pid")
    connect="127.0.0.1:$port"
    zk_version=$(python3 bench/wait_serving.py "$connect")
    route="loopback (ZooKeeper as a plain process, Debian's libzookeeper-java)"
else
    say "starting ZooKeeper ($container, heap ${ZOO_HEAP_MB} MB)"
    docker run -d --rm --name "$container" \
        -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 \
        -e "ZOO_MAX_SESSION_TIMEOUT=${ZK_MAX_SESSION_TIMEOUT:-60000}" \
        -e "ZOO_HEAP_MB=$ZOO_HEAP_MB" -e 'JVMFLAGS=-Xlog:gc:file=/zklog/gc.log:time,uptime' \
        -v "$work/zkdata:/datalog" -v "$work/zklog:/zklog" \
        -p 127.0.0.1::2181 "$image" >/dev/null
    port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
    connect="127.0.0.1:$port"
    zk_version=$(python3 bench/wait_serving.py "$connect")
    # Clients reach the server at the container's address on Docker's bridge where the host can (Linux): through the
    # published port every byte also crosses docker-proxy, a userland copy that took 4% of the 2 cores in a 100-member
    # cold start (perf). The published port stays as the fallback.
    route="the published port (through docker-proxy)"
    bridge_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$container" 2>/dev/null || true)
    if [ "${ZK_ROUTE:-bridge}" = bridge ] && [ -n "$bridge_ip" ] && python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], 2181), 2).close()' \
        "$bridge_ip" 2>/dev/null; then
        connect="$bridge_ip:2181"
        route="the container's bridge address (no docker-proxy)"
    fi
fi
say "ZooKeeper $zk_version serving on $connect: $MEMBERS members × $ITEMS items, modes $MODES, hostings $HOSTINGS"

# The JSON lines go straight to bench/results (one line per phase, as each ends): they survive a run that stops early.
mkdir -p bench/results
results="bench/results/$OUT.jsonl"
: >"$results"
run_status=0
python3 bench/scale.py run --own-process-group --connect "$connect" "${zk_args[@]}" --zk-data "$work/zkdata" \
    --zk-gc-log "$work/zklog/gc.log" --zk-heap-mb "$ZOO_HEAP_MB" --rust-worker "$worker" \
    --host-bin "$work/scale-host" --bench-bin "$work/partitioner" --runs "$RUNS" --warmup "$WARMUP" --modes "$MODES" \
    --hostings "$HOSTINGS" --members "$MEMBERS" --items "$ITEMS" --time-boundary "$TIME_BOUNDARY" \
    --session-timeout "$SESSION_TIMEOUT" --phase-timeout "$PHASE_TIMEOUT" --host-threads "${INPROCESS_THREADS:-0}" \
    --log-dir "$work/logs" --quiet-s "${QUIET_S:-8}" ${JOIN_AFTER_S:+--join-after-s "$JOIN_AFTER_S"} >"$results" &
runner=$!
wait "$runner" || run_status=$?
runner=""

elapsed=$(( $(date +%s) - t0 ))
cores=$(nproc)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
busy_end=$(cpu_busy_pct)
zk_where="image ${image}, in Docker"
[ "${ZK_HOST:-docker}" != process ] || zk_where="a plain Java process"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work during this run (CPU in use before or after it), so absolute \
times are inflated."
fi
machine="Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${elapsed} s in all; crate at ${revision}. Machine: ${cores} × ${cpu}, \
$(free -g | awk '/^Mem:/ {print $2}') GB RAM, Linux $(uname -r); load average ${load_start} at the start, ${load_end} \
at the end; CPU in use before the run ${busy_start}%, after it ${busy_end}%.${busy} ZooKeeper ${zk_version} (image \
${zk_where}, standalone, tickTime 200 ms, maxSessionTimeout ${ZK_MAX_SESSION_TIMEOUT:-60000} ms, heap \
-Xmx${ZOO_HEAP_MB}m, on the same machine, clients connected through ${route}), Python $(python3 -c 'import platform; print(platform.python_version())'), \
$(rustc --version | cut -d' ' -f1-2). ${MEMBERS} members, ${ITEMS} items, runs: ${RUNS}, after ${WARMUP} warm-up round(s); time_boundary \
${TIME_BOUNDARY} s, session timeout ${SESSION_TIMEOUT} s.${MACHINE_NOTE:+ $MACHINE_NOTE}"

command="MEMBERS=$MEMBERS ITEMS=$ITEMS bash bench/scale.sh"
[ "$MODES" = eager-stride,incremental-rendezvous ] || command="MODES=$MODES $command"
[ "$HOSTINGS" = processes,inprocess ] || command="HOSTINGS=$HOSTINGS $command"
[ "$RUNS" = 1 ] || command="RUNS=$RUNS $command"
[ "$WARMUP" = 1 ] || command="WARMUP=$WARMUP $command"
[ -z "${INPROCESS_THREADS:-}" ] || command="INPROCESS_THREADS=$INPROCESS_THREADS $command"
[ "${ZK_HOST:-docker}" = docker ] || command="ZK_HOST=$ZK_HOST $command"
[ -z "${ZK_MAX_SESSION_TIMEOUT:-}" ] || command="ZK_MAX_SESSION_TIMEOUT=$ZK_MAX_SESSION_TIMEOUT $command"
[ -z "${WORKER:-}" ] || command="WORKER=$WORKER $command"
[ "$ZOO_HEAP_MB" = 256 ] || command="ZOO_HEAP_MB=$ZOO_HEAP_MB $command"
[ -z "${JOIN_AFTER_S:-}" ] || command="JOIN_AFTER_S=$JOIN_AFTER_S $command"
[ "$OUT" = scale ] || command="$command  # OUT=$OUT"
python3 bench/scale.py report "bench/results/$OUT.jsonl" --machine "$machine" --command "$command" \
    --title "Scale: $MEMBERS members over $ITEMS items" | tee "bench/results/$OUT.md"
failed=$(python3 -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if l.strip() and not json.loads(l)["ok"]))' \
    "bench/results/$OUT.jsonl")
say "written bench/results/$OUT.md and bench/results/$OUT.jsonl ($failed failed phases)"
# The plots of these JSON lines (scale.jsonl: scale.svg, join-moves.svg; scale-100x100k*.jsonl: scale-100x100k.svg).
python3 bench/plot.py --from "bench/results/$OUT.jsonl"
[ "$run_status" = 0 ] || { say "bench/scale.py stopped with exit $run_status: see the failed phases"; exit 1; }
[ "$failed" = 0 ]
}

main "$@"; exit  # one line: bash has read it whole before main runs, so an edit during the run cannot split it
