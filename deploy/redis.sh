#!/bin/sh
# Start a local Redis for specgate with deploy/redis.conf, unless REDIS_URL
# names one already. Idempotent: when a server answers on the port, nothing
# is started.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
conf="$root/deploy/redis.conf"
port=$(awk '$1 == "port" { print $2 }' "$conf")

if [ -n "${REDIS_URL:-}" ]; then
	# The user's own server: never start or replace it, but say at once
	# when it does not answer instead of failing later.
	if command -v redis-cli >/dev/null 2>&1 &&
		! redis-cli -u "$REDIS_URL" ping 2>/dev/null | grep -q PONG; then
		echo "redis.sh: REDIS_URL ($REDIS_URL) does not answer." >&2
		echo "  Start that server, or unset REDIS_URL to use the project's own Redis on port $port." >&2
		exit 1
	fi
	echo "redis.sh: REDIS_URL is set ($REDIS_URL); not starting a local Redis"
	exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
	if [ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
		echo "redis.sh: redis-server missing; installing it with apt-get"
		sudo=""
		[ "$(id -u)" -eq 0 ] || sudo="sudo"
		$sudo apt-get update -qq
		$sudo apt-get install -y -qq redis-server
	else
		echo "redis.sh: redis-server is not installed. Install Redis 7 or newer" >&2
		echo "  (macOS: brew install redis; Fedora: dnf install redis)" >&2
		echo "  or set REDIS_URL=redis://host:port/ to use a running server." >&2
		exit 1
	fi
fi

if command -v redis-cli >/dev/null 2>&1; then
	reply=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>&1 || true)
	case $reply in
	PONG)
		echo "redis.sh: Redis already running on 127.0.0.1:$port"
		exit 0
		;;
	"" | "Could not connect"*) ;; # nothing there: start one
	*)
		# A server that answers with an error (MISCONF: it cannot save
		# its snapshots, say because its data folder is gone) would fail
		# every test with a Redis error; starting another on its port
		# cannot work either.
		echo "redis.sh: the server on 127.0.0.1:$port answers with an error: $reply" >&2
		echo "  Stop it (redis-cli -p $port shutdown nosave) and run this again." >&2
		exit 1
		;;
	esac
fi

mkdir -p "$root/var/redis"
cd "$root"
redis-server "$conf" --daemonize yes \
	--pidfile "$root/var/redis/redis.pid" \
	--logfile "$root/var/redis/redis.log"

# Wait until it answers, so a following `go test` does not race the start.
i=0
while [ $i -lt 50 ]; do
	if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
		echo "redis.sh: Redis started on 127.0.0.1:$port (data in var/redis)"
		exit 0
	fi
	i=$((i + 1))
	sleep 0.1
done
echo "redis.sh: Redis did not answer on 127.0.0.1:$port; see var/redis/redis.log" >&2
exit 1
