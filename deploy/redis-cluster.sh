#!/bin/sh
# Start a local Redis Cluster for specgate: six redis-server processes with
# deploy/redis-cluster.conf on 127.0.0.1 ports BASE+1 … BASE+6 (default
# 7001-7006; cluster bus ports 17001-17006), joined by redis-cli into three
# primaries with one replica each. Idempotent: a cluster that already
# answers is left alone. Data lives in var/redis-cluster/.
#
# Then: REDIS_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
# (any node will do; every node is named for a start while some are down).
#
#   deploy/redis-cluster.sh          start (or find) the cluster, print its URL
#   deploy/redis-cluster.sh stop     stop its processes (data is kept)
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
conf="$root/deploy/redis-cluster.conf"
base=${REDIS_CLUSTER_BASE:-7000}
ports="$((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)) $((base + 5)) $((base + 6))"
url="redis+cluster://$(for p in $ports; do printf '127.0.0.1:%s,' "$p"; done | sed 's/,$//')"

for tool in redis-server redis-cli; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "redis-cluster.sh: $tool is not installed; run deploy/redis.sh once (it installs Redis)" >&2
		exit 1
	fi
done

if [ "${1:-}" = stop ]; then
	for p in $ports; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	echo "redis-cluster.sh: stopped"
	exit 0
fi

healthy() {
	redis-cli -p "$((base + 1))" cluster info 2>/dev/null | grep -q 'cluster_state:ok'
}

if healthy; then
	echo "redis-cluster.sh: cluster already running: $url"
	exit 0
fi

for p in $ports; do
	dir="$root/var/redis-cluster/$p"
	mkdir -p "$dir"
	if ! redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
		(cd "$dir" && redis-server "$conf" --port "$p" --dir "$dir" --daemonize yes \
			--pidfile "$dir/redis.pid" --logfile "$dir/redis.log")
	fi
done
for p in $ports; do
	i=0
	until redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; do
		i=$((i + 1))
		if [ $i -gt 50 ]; then
			echo "redis-cluster.sh: node $p did not answer; see var/redis-cluster/$p/redis.log" >&2
			exit 1
		fi
		sleep 0.1
	done
done

# Nodes that know no other node are new: join them. Nodes restarted from
# their nodes.conf find each other again on their own.
known=$(redis-cli -p "$((base + 1))" cluster info | awk -F: '/cluster_known_nodes/ { print $2 }' | tr -d '\r')
if [ "$known" = 1 ]; then
	redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) \
		--cluster-replicas 1 --cluster-yes >/dev/null
fi

i=0
until healthy; do
	i=$((i + 1))
	if [ $i -gt 100 ]; then
		echo "redis-cluster.sh: cluster not healthy after 10s; see var/redis-cluster/*/redis.log" >&2
		exit 1
	fi
	sleep 0.1
done
# Let every replica finish its first sync, so a test that kills a primary
# right away has a replica to promote.
i=0
while [ $i -lt 100 ]; do
	synced=0
	for p in $ports; do
		if redis-cli -p "$p" info replication | grep -q 'role:master' ||
			redis-cli -p "$p" info replication | grep -q 'master_link_status:up'; then
			synced=$((synced + 1))
		fi
	done
	[ $synced -eq 6 ] && break
	i=$((i + 1))
	sleep 0.1
done
echo "redis-cluster.sh: cluster running: $url"
