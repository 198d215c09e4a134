# Starts and stops a private, throw-away PostgreSQL 15 cluster for the tests. Sourced.
#   pg_start  → exports TEST_POSTGRES_URL (or returns non-zero with PG_SKIP_REASON set)
#   pg_stop   → stops the cluster and removes its directory

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_DIR=""

pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_start() {
  PG_SKIP_REASON=""
  if ! [ -x "$PG_BIN/initdb" ]; then
    PG_SKIP_REASON="no PostgreSQL 15 binaries in $PG_BIN"
    return 1
  fi
  PG_DIR=$(mktemp -d /tmp/turnstile-pg.XXXXXX)
  [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
  if ! pg_as_owner "$PG_BIN/initdb" -A trust -U postgres -D "$PG_DIR/data" >"$PG_DIR/initdb.log" 2>&1; then
    PG_SKIP_REASON="initdb failed: $(tail -n 3 "$PG_DIR/initdb.log")"
    return 1
  fi
  local port attempt
  for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 30000))
    if pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -w -t 30 -l "$PG_DIR/server.log" \
         -o "-p $port -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" \
         start >/dev/null 2>&1; then
      export TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
      return 0
    fi
  done
  PG_SKIP_REASON="the server did not start: $(tail -n 3 "$PG_DIR/server.log" 2>/dev/null)"
  return 1
}

pg_stop() {
  if [ -n "$PG_DIR" ] && [ -d "$PG_DIR/data" ]; then
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  [ -n "$PG_DIR" ] && rm -rf "$PG_DIR"
  PG_DIR=""
}
