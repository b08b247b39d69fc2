#!/usr/bin/env bash
# The rolling restart of the compose ensemble (RELIABILITY.md, "Rolling restart of the compose ensemble"): the
# ensemble of docker-compose.yml (zk1-zk3 on 127.0.0.1:2191-2193) brought up, five members on it, each server stopped
# for 2 s and started again in turn, ROUNDS rounds, the safety checker throughout (tests/restart.rs,
# rolling_restart_of_the_compose_ensemble); then the ensemble is taken down.
#
#   bash bench/rolling.sh               # 3 rounds (9 restarts), about 3 minutes once built
#   ROUNDS=10 bash bench/rolling.sh     # 30 restarts
#
# Writes bench/results/rolling.jsonl (one JSON line per restart: round, server, its role, members that lost their
# connection, recovery seconds) and bench/results/rolling.md (the run's line and the test's summary). Knobs:
# ROUNDS (3), ZOOKEEPER_IMAGE (the compose file's image: the official zookeeper:3.9 if present, else the one
# docker/zookeeper/build.sh builds, built if absent), MACHINE_NOTE (a sentence added to the run's line).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROUNDS=${ROUNDS:-3}
t0=$(date +%s)
say() { printf '[rolling.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision

if [ -z "${ZOOKEEPER_IMAGE:-}" ]; then
    if docker image inspect zookeeper:3.9 >/dev/null 2>&1; then
        ZOOKEEPER_IMAGE=zookeeper:3.9
    else
        ZOOKEEPER_IMAGE=zk-partitioner/zookeeper:3.8
        docker image inspect "$ZOOKEEPER_IMAGE" >/dev/null 2>&1 || bash docker/zookeeper/build.sh "$ZOOKEEPER_IMAGE"
    fi
fi
export ZOOKEEPER_IMAGE
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
project="zkp-rolling-$$"
compose+=(-p "$project" --profile ensemble)

work=$(mktemp -d /tmp/zkp-rolling.XXXXXX)
cleanup() { "${compose[@]}" down -v >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

revision=$(measured_revision src crates tests Cargo.toml)

say "building the restart tests (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
restart_exe=$(cargo_exe restart test --release --test restart --no-run)

say "starting the compose ensemble ($ZOOKEEPER_IMAGE, project $project)"
"${compose[@]}" up -d zk1 zk2 zk3 >&2
python3 - <<'PY'
import socket, sys, time

def mode(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return None
    lines = [line for line in data.decode(errors="replace").splitlines() if line.startswith("Mode:")]
    return lines[0].split(":", 1)[1].strip() if lines else None

deadline = time.time() + 120
while time.time() < deadline:
    if all(mode(port) in ("leader", "follower") for port in (2191, 2192, 2193)):
        sys.exit(0)
    time.sleep(0.5)
sys.exit("the compose ensemble did not serve within 120 s")
PY

busy_start=$(cpu_busy_pct)
start=$(date -u '+%Y-%m-%d %H:%M')
say "rolling restart: $ROUNDS round(s) of zk1, zk2, zk3"
set +e
ROLLING_COMPOSE="${compose[*]}" ROLLING_ROUNDS=$ROUNDS ROLLING_JSON="$work/rolling.jsonl" \
    "$restart_exe" --exact rolling_restart_of_the_compose_ensemble --ignored --nocapture 2>&1 \
    | tee "$work/rolling.log" >&2
status=${PIPESTATUS[0]}
set -e
end=$(date -u '+%H:%M')
busy_end=$(cpu_busy_pct)

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work (CPU in use before or after the run), so recovery times are inflated."
fi
mkdir -p bench/results
cp "$work/rolling.jsonl" bench/results/rolling.jsonl
{
    echo "### Rolling restart of the compose ensemble: ROUNDS=$ROUNDS"
    echo
    echo "Run $start-$end UTC; crate at ${revision}; ZooKeeper image $ZOOKEEPER_IMAGE. Machine: $(nproc) × ${cpu}, \
$(free -g | awk '/^Mem:/ {print $2}') GB RAM; CPU in use before the run ${busy_start}%, after it ${busy_end}%.${busy} \
Release build.${MACHINE_NOTE:+ $MACHINE_NOTE}"
    echo
    grep -E '^\[rolling\]' "$work/rolling.log" | sed 's/^\[rolling\] /- /' || true
} | tee bench/results/rolling.md
say "written bench/results/rolling.jsonl and rolling.md ($(wc -l <bench/results/rolling.jsonl) restarts)"
[ "$status" = 0 ] || { say "the rolling restart test failed (exit $status): see the log above"; exit 1; }
