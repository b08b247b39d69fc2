#!/bin/sh
# Entrypoint of the locally built ZooKeeper image. It honours the official `zookeeper` image's environment
# interface, so docker-compose.yml and the test harness work the same with either image.
set -eu

CONF_DIR=${ZOO_CONF_DIR:-/conf}
DATA_DIR=${ZOO_DATA_DIR:-/data}
DATA_LOG_DIR=${ZOO_DATA_LOG_DIR:-/datalog}
mkdir -p "$CONF_DIR" "$DATA_DIR" "$DATA_LOG_DIR"

# Like the official image: write a config only when none was mounted.
if [ ! -f "$CONF_DIR/zoo.cfg" ]; then
    {
        echo "dataDir=$DATA_DIR"
        echo "dataLogDir=$DATA_LOG_DIR"
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-5}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
        echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
        echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
        if [ -n "${ZOO_MAX_SESSION_TIMEOUT:-}" ]; then echo "maxSessionTimeout=$ZOO_MAX_SESSION_TIMEOUT"; fi
        if [ -n "${ZOO_MIN_SESSION_TIMEOUT:-}" ]; then echo "minSessionTimeout=$ZOO_MIN_SESSION_TIMEOUT"; fi
        # The official image's ZOO_SERVERS: "server.1=zk1:2888:3888;2181 server.2=...". With no servers the
        # client port is given directly and QuorumPeerMain runs standalone.
        if [ -n "${ZOO_SERVERS:-}" ]; then
            for server in $ZOO_SERVERS; do echo "$server"; done
        else
            echo "clientPort=2181"
        fi
        for cfg_extra_entry in ${ZOO_CFG_EXTRA:-}; do echo "$cfg_extra_entry"; done
    } > "$CONF_DIR/zoo.cfg"
fi

if [ -n "${ZOO_MY_ID:-}" ] && [ ! -f "$DATA_DIR/myid" ]; then
    echo "$ZOO_MY_ID" > "$DATA_DIR/myid"
fi

# shellcheck disable=SC2086 # JVMFLAGS/SERVER_JVMFLAGS are word lists by design, as in the official image.
exec java -Xmx${ZOO_HEAP_MB:-256}m ${JVMFLAGS:-} ${SERVER_JVMFLAGS:-} \
    -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$CONF_DIR/zoo.cfg"
