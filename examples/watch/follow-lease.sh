#!/usr/bin/env bash
# Leader-only work beside a leasehold host, driven by its watch stream, as follow_lease.py does:
#   DATABASE_URL=postgresql://app@db/app examples/watch/follow-lease.sh [URL [LEASE [TABLE]]]
# Works (a row every ~100 ms through the fence) from `started` until `ended`, stop_within_ms 0, a
# role other than leader, or no news by the deadline (last event + its stop_within_ms). One line
# per transition on stdout, ending with at=WALL_CLOCK_MS. Needs bash 5, curl and psql.
set -u
url=${1:-${LEASEHOLD_URL:-http://127.0.0.1:9464}} lease=${2:-${LEASE:-leader}} table=${3:-lease_writes}
: "${DATABASE_URL:?set DATABASE_URL to the connection the writes go through}"
now() { t=${EPOCHREALTIME//[!0-9]/}; t=$((t / 1000)); } # wall-clock ms in $t, without a fork
say() { now; echo "$* at=$t"; }
psql() { command psql "$DATABASE_URL" -Xq -o /dev/null -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$@" 2>&1; }
psql -c "CREATE TABLE IF NOT EXISTS $table (epoch bigint NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null
report() { # psql's output: the term's first write; a refusal, where psql stops (ON_ERROR_STOP)
  local w=; while IFS= read -r l; do case $l in wrote) [ -n "$w" ] || say "wrote epoch=$1"; w=1 ;;
    *LH001*) say "refused epoch=$1" ;; *) echo "psql: $l" >&2 ;; esac; done; }
work() { # One psql session per term. A TERM ends its input and waits for the transaction under
  exec > >(psql | report "$1"); local p=$! # way: nothing of the term commits after `stopped`.
  trap 'exec >&-; wait $p; exit 0' TERM
  while echo "BEGIN; SELECT public.leasehold_fence('$lease'::text, $1::bigint);
    INSERT INTO $table (epoch) VALUES ($1); COMMIT; \echo wrote"; do sleep 0.1 >&- & wait $!; done
}
worker= epoch= deadline=0 news=0 allowed=0 last_id= kind=message
stop() { [ -n "$worker" ] || return; kill "$worker" 2>/dev/null; wait "$worker"; worker=
  say "stopped epoch=$epoch why=$1"; }
expired() { now; [ -n "$worker" ] && ((t >= deadline)) &&
  stop "deadline (no news for $((t - news)) ms, allowed $allowed)"; }
on_event() { # $1: event, $2: its JSON data
  local role= ms=0 ep= reason= at; now; at=$t
  [[ $2 =~ \"role\":\"([a-z]+)\" ]] && role=${BASH_REMATCH[1]}
  [[ $2 =~ \"stop_within_ms\":([0-9]+) ]] && ms=${BASH_REMATCH[1]}
  [[ $2 =~ \"epoch\":([0-9]+) ]] && ep=${BASH_REMATCH[1]}
  [[ $2 =~ \"reason\":\"([a-z-]+)\" ]] && reason=${BASH_REMATCH[1]}
  [ "$1" = state ] && say "connected role=$role epoch=${ep:-None} stop_within_ms=$ms"
  if [ "$1" = ended ]; then stop "ended:$reason"
  elif [ -n "$worker" ] && [[ $role != leader || $ms == 0 || $ep != "$epoch" ]]; then stop role
  elif [ -n "$worker" ]; then deadline=$((at + ms)) news=$at allowed=$ms; fi
  if [[ -z $worker && $1 =~ ^(started|state)$ && $role == leader && -n $ep && $ms != 0 ]]; then
    epoch=$ep deadline=$((at + ms)) news=$at allowed=$ms
    work "$ep" 3<&- & worker=$!
    say "started epoch=$ep stop_within_ms=$ms"
  fi
}
trap 'stop exit; kill ${curl:-} 2>/dev/null; exit 0' TERM INT
while :; do
  hdr=(-H 'Accept: text/event-stream'); [ -n "$last_id" ] && hdr+=(-H "Last-Event-ID: $last_id")
  exec 3< <(exec curl -sN "${hdr[@]}" "$url/v1/leases/$lease/watch"); curl=$!
  # Each read waits no longer than the time left (5 s, beyond two heartbeats, with no work to time).
  while now; left=5000; [ -z "$worker" ] || left=$((deadline - t)); ((left > 0)) &&
    printf -v s %d.%03d $((left / 1000)) $((left % 1000)) && IFS= read -r -t "$s" line <&3; do
    line=${line%$'\r'}; case $line in
      event:*) kind=${line#event:} kind=${kind# } ;;
      id:*) last_id=${line#id:} last_id=${last_id# } ;;
      data:*) d=${line#data:}; on_event "$kind" "${d# }"; kind=message ;;
    esac
  done
  expired; kill "$curl" 2>/dev/null; exec 3<&- # silent or ended: reconnect, with Last-Event-ID
  sleep 0.2; expired # the term's work goes on meanwhile, until its deadline
done
