#!/usr/bin/env bash
# Writes dump-1.txt and dump-2.txt (jcmd <pid> Thread.print, 10 s apart) of StuckTools, and
# java-version.txt. Usage: ./make_dumps.sh   (run from anywhere; writes next to this script)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TZ=Europe/Berlin            # the JVM's wall clock: jcmd prints it without a zone
JCMD="${JCMD:-$(command -v jcmd || echo "$(dirname "$(readlink -f "$(command -v javac)")")/jcmd")}"

work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

javac --release 17 -d "$work/classes" "$here"/*.java
java -version 2> "$here/java-version.txt"

java -cp "$work/classes" com.acme.shipping.StuckTools > "$work/out.txt" 2> "$work/err.txt" &
pid=$!
for _ in $(seq 1 150); do                      # READY: all 8 tool threads blocked in the read
  grep -q '^READY$' "$work/out.txt" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/err.txt" >&2; exit 1; }
  sleep 0.1
done
grep -q '^READY$' "$work/out.txt" || { echo "StuckTools never got READY" >&2; cat "$work/err.txt" >&2; exit 1; }
sleep 2                                        # ~3 s after start; kb-exec-1 still in its 4 s read

"$JCMD" "$pid" Thread.print > "$here/dump-1.txt"
sleep 10
"$JCMD" "$pid" Thread.print > "$here/dump-2.txt"
echo "pid $pid: wrote $here/dump-1.txt and $here/dump-2.txt"
