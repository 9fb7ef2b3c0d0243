#!/usr/bin/env bash
# Sourced by the test script: exports TEST_DATABASE_URL for a PostgreSQL server the tests may use.
# Uses the one at 127.0.0.1:5432 when it answers (trust auth, database `test`); otherwise installs Debian's
# postgresql when missing and starts a throwaway cluster in a temporary folder, stopped when the script exits.

pg_answers() { pg_isready -q -h 127.0.0.1 -p "$1" 2>/dev/null && psql -h 127.0.0.1 -p "$1" -U postgres -d "$2" -Atqc 'select 1' >/dev/null 2>&1; }

start_throwaway_postgres() {
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "installing PostgreSQL from Debian…" >&2
    as_root apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends postgresql >&2
  fi
  local bin port dir owner
  bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
  port=55432
  dir=$(mktemp -d /tmp/test-postgres.XXXXXX)
  owner=$(id -un)
  # initdb refuses to run as root: the cluster belongs to the postgres user then.
  if [ "$(id -u)" = 0 ]; then owner=postgres; chown postgres "$dir"; fi
  as_owner() { if [ "$owner" = "$(id -un)" ]; then "$@"; else runuser -u "$owner" -- "$@"; fi; }
  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres test
  # The trap runs after this function's locals are gone, so its command carries their values.
  local stop="'$bin/pg_ctl' -D '$dir/data' -m fast stop"
  [ "$owner" = "$(id -un)" ] || stop="runuser -u $owner -- $stop"
  trap "$stop >/dev/null; rm -rf '$dir'" EXIT
  export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/test"
  echo "started a throwaway PostgreSQL cluster on port $port" >&2
}

if pg_answers 5432 test; then
  export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/test"
else
  start_throwaway_postgres
fi
