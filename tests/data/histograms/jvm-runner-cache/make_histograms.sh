#!/usr/bin/env bash
# Writes two `jcmd <pid> GC.class_histogram` outputs of SlowDeath (1000 sessions, then 3000),
# named by their UTC time, and java-version.txt. Usage: ./make_histograms.sh (writes next to it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JCMD="${JCMD:-$(command -v jcmd || echo "$(dirname "$(readlink -f "$(command -v javac)")")/jcmd")}"

work="$(mktemp -d)"
pid=""
cleanup() {
  exec 3>&- 2>/dev/null || true
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

javac --release 17 -d "$work/classes" "$here"/*.java
java -version 2> "$here/java-version.txt"
rm -f "$here"/histo-*.txt

mkfifo "$work/in"
java -Xshare:off -XX:+UseSerialGC -cp "$work/classes" com.example.agent.SlowDeath \
  < "$work/in" > "$work/out.txt" 2> "$work/err.txt" &
pid=$!
exec 3> "$work/in"

batch() {  # $1 new sessions, $2 the cache size to wait for
  echo "$1" >&3
  for _ in $(seq 1 100); do
    grep -q "^READY $2\$" "$work/out.txt" && return 0
    sleep 0.1
  done
  echo "SlowDeath never reached $2 sessions" >&2; cat "$work/err.txt" >&2; exit 1
}
histogram() {
  "$JCMD" "$pid" GC.class_histogram > "$here/histo-$(date -u +%Y-%m-%dT%H-%M-%SZ).txt"
}

batch 1000 1000
histogram
sleep 2
batch 2000 3000
histogram
ls "$here"/histo-*.txt
