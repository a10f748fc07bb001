#!/bin/sh
# Start a local Sentinel group for specgate: a primary and a replica with
# deploy/redis.conf's settings (AOF on) on 127.0.0.1 ports BASE and BASE+1
# (default 6390, 6391), and one Sentinel on BASE+20000 (26390) that
# promotes the replica when the primary stops answering for 2s.
# Idempotent: what already answers is left alone. Data lives in
# var/redis-sentinel/.
#
# Then: REDIS_URL=redis+sentinel://127.0.0.1:26390/specgate
#
#   deploy/redis-sentinel.sh          start (or find) the group, print its URL
#   deploy/redis-sentinel.sh stop     stop its processes (data is kept)
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
conf="$root/deploy/redis.conf"
base=${REDIS_SENTINEL_BASE:-6390}
primary=$base
replica=$((base + 1))
sentinel=$((base + 20000))
name=specgate
dir="$root/var/redis-sentinel"

for tool in redis-server redis-cli; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "redis-sentinel.sh: $tool is not installed; run deploy/redis.sh once (it installs Redis)" >&2
		exit 1
	fi
done

if [ "${1:-}" = stop ]; then
	for p in $sentinel $replica $primary; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	echo "redis-sentinel.sh: stopped"
	exit 0
fi

up() { redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; }

start() { # port, extra args...
	p=$1
	shift
	mkdir -p "$dir/$p" "$root/var/redis"
	if ! up "$p"; then
		# From the checkout: redis.conf names its data dir relative to it
		# (overridden here, but it must exist when the file is read).
		(cd "$root" && redis-server "$conf" --port "$p" --dir "$dir/$p" --daemonize yes \
			--pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" "$@")
	fi
}

# A restarted group keeps the roles Sentinel last gave it (the nodes
# rewrite their replicaof lines only in memory): start the primary bare
# only the first time.
start "$primary"
start "$replica" --replicaof 127.0.0.1 "$primary"

mkdir -p "$dir/sentinel"
if [ ! -f "$dir/sentinel/sentinel.conf" ]; then
	cat >"$dir/sentinel/sentinel.conf" <<CONF
bind 127.0.0.1
port $sentinel
sentinel monitor $name 127.0.0.1 $primary 1
sentinel down-after-milliseconds $name 2000
sentinel failover-timeout $name 10000
CONF
fi
if ! up "$sentinel"; then
	(cd "$dir/sentinel" && redis-server "$dir/sentinel/sentinel.conf" --sentinel --daemonize yes \
		--pidfile "$dir/sentinel/sentinel.pid" --logfile "$dir/sentinel/sentinel.log")
fi

i=0
until up "$primary" && up "$replica" && up "$sentinel" &&
	redis-cli -p "$sentinel" sentinel get-master-addr-by-name "$name" >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -gt 100 ]; then
		echo "redis-sentinel.sh: the group did not answer; see var/redis-sentinel/*/*.log" >&2
		exit 1
	fi
	sleep 0.1
done
echo "redis-sentinel.sh: Sentinel group running: redis+sentinel://127.0.0.1:$sentinel/$name"
