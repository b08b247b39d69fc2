# Sourced by the benchmark scripts: how busy the machine is, and which revision a run measures.

# The CPU in use over one second, in percent. Other work on the machine is judged by it, before and after a run: the
# load average cannot tell, as it still holds a previous run's load at the start and the run's own at the end.
cpu_busy_pct() {
    local a b
    read -r _ a < /proc/stat; sleep 1; read -r _ b < /proc/stat
    # user nice system idle iowait irq softirq steal guest guest_nice: the first sample is $1-$10, the second $11-$20
    echo "$a" "$b" | awk '{ busy = ($11 + $12 + $13 + $16 + $17 + $18) - ($1 + $2 + $3 + $6 + $7 + $8);
                            idle = ($14 + $15) - ($4 + $5); total = busy + idle;
                            printf "%d", (total > 0 ? 100 * busy / total : 0) }'
}

# Whether other work was running: more than a quarter of the CPU in use before ($1) or after ($2) the run.
machine_busy() {
    [ "$1" -gt 25 ] || [ "$2" -gt 25 ]
}

# What a run measures: the commit, and the uncommitted changes to the paths given ("abc1234", or "abc1234 +
# uncommitted changes to src/a.rs,src/b.rs"), noted before building.
measured_revision() {
    local revision uncommitted
    revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    uncommitted=$(git status --porcelain -- "$@" 2>/dev/null | awk '{print $2}' | paste -sd, -)
    if [ -n "$uncommitted" ]; then echo "$revision + uncommitted changes to $uncommitted"; else echo "$revision"; fi
}
