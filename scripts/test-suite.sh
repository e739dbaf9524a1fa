#!/usr/bin/env bash
# The whole suite, as `make test` runs it after `make build guests`:
#
# 1. the previous release, built from history for the mixed-version test (scripts/build-release.sh);
# 2. every test binary of the workspace, built by one `cargo test --no-run` (the simulator apart:
#    its fault points must never reach the binary the other tests run);
# 3. the tests whose bound is the machine's (a flood, 1 s ttls), alone beside the niced jobs;
# 4. the test binaries, the guests' own tests and the simulator, side by side, longest first.
#    Most integration tests wait on ttls and real processes rather than compute, so SUITE_JOBS
#    binaries run at once (default 3), each with libtest's own two tests at a time: more, and the
#    tests whose bound is a handoff's or a recovery's time failed under the load. The simulator
#    and the guests' tests compute, and run niced so that the waiting tests keep the CPU.
#
# Each job's output goes to target/suite/logs/ and is printed whole when the job ends, under a line
# naming it. The run ends with a table of every step's wall time, slowest first, its tests' counts,
# and the suite's counts on a line of their own. Every job runs to its end however many fail, so
# one failure hides no other; the script fails if any did, and then prints why each failing test
# failed and the state of the machine (scripts/test-report.sh).
#
#   SUITE_JOBS=N          test binaries at once (default 3), beside the niced jobs
#   SUITE_ONLY=REGEX      only the jobs whose name matches (e.g. 'leases|plugins')
#   SUITE_JOB_TIMEOUT=S   a job still running after S seconds is stopped and fails (default 1500)
#   SUITE_TEST_ARGS=…     more arguments for every test binary (e.g. a filter, or --nocapture)
set -uo pipefail
# One compound command, read whole before it runs: bash reads a script as it goes, so an edit to
# this file during a run would otherwise change the rest of that run.
{
cd "$(dirname "$0")/.."
root=$PWD
# shellcheck source=lib/timing.sh
. scripts/lib/timing.sh

dir=target/suite
rm -rf "$dir"
mkdir -p "$dir/logs"
table=$dir/times.tsv
output=$dir/output.log
: >"$table"
: >"$output"
started=$(now_s)
failed=0
only=${SUITE_ONLY:-}
max_jobs=${SUITE_JOBS:-3}
job_timeout=${SUITE_JOB_TIMEOUT:-1500}
export RUST_BACKTRACE=${RUST_BACKTRACE:-0}
# The tests' own PostgreSQL servers without fsync (tests/src/pg.rs says why): beside the suite's
# builds one commit's flush took up to 240 ms, over the store timeout of the tests' short ttls.
export LEASEHOLD_TEST_PG_FSYNC=${LEASEHOLD_TEST_PG_FSYNC:-off}

say() { printf '%s\n' "$*" | tee -a "$output"; }

finish() {
  local counts
  while [ "${#running[@]}" -gt 0 ]; do wait_one; done
  counts=$(test_counts "$dir"/logs/*.log)
  {
    echo
    echo "== make test: the steps, slowest first =="
    scripts/suite-table.sh "$(since "$started")" "$table"
  } | tee -a "$output"
  if [ "$failed" != 0 ]; then
    scripts/test-report.sh "$output"
  fi
  # The suite's counts, alone on the last line.
  echo "suite: ${counts/ignored/skipped}"
  exit "$failed"
}

# The order the test binaries start in: the longest first, so that the run ends with short ones
# (about the seconds each took in a full run on two cores). A job not listed is taken as short.
weight() {
  case "$1" in
    tests/plugins) echo 600 ;;
    tests/leases) echo 420 ;;
    tests/deployment) echo 360 ;;
    tests/processes) echo 140 ;;
    tests/telemetry) echo 70 ;;
    tests/http) echo 60 ;;
    *) echo 10 ;;
  esac
}

# Tests whose bound is the machine's, not the host's: the flood test loads both cores itself, and
# what it asserts (no watcher lost, none late) is the host's doing only when nothing else competes
# with its clients; the freeze trials run a 1 s ttl, whose store calls time out after 200 ms.
# Beside the other test binaries the flood lost watchers (2 runs of 5), the frozen holder's
# standbys timed out every campaign for 8 s and a briefly frozen holder missed its renewals (3
# runs of 5). They run first, with no other test binary beside them: they wait more than they
# compute, and the niced jobs take the CPU they leave. The rest of their binary runs in the pool.
# binary <TAB> libtest filter, one a line.
alone_tests=$'tests/http\tflood::\ntests/plugins\tfreeze::'

jobs_list=$dir/jobs.tsv
: >"$jobs_list"
add_job() { # name dir command...
  local name=$1 cwd=$2
  shift 2
  [ -n "$only" ] && ! [[ $name =~ $only ]] && return
  printf '%s\t%s\t%s\t%s\n' "$(weight "$name")" "$name" "$cwd" "$*" >>"$jobs_list"
}
# The jobs: each runs in its directory, its output in a log of its own, its CPU measured.
declare -A running=() # pid -> name
declare -A begun=()   # pid -> start time
declare -A niced=()   # pid -> 1 for the niced jobs beside the test binaries, not counted in SUITE_JOBS
binaries_running() {
  local pid n=0
  for pid in "${!running[@]}"; do [ -n "${niced[$pid]:-}" ] || n=$((n + 1)); done
  echo "$n"
}
slug() { tr -c 'A-Za-z0-9_.-' '_' <<<"$1" | sed 's/_*$//'; }
start_job() { # name dir command
  local name=$1 cwd=$2 cmd=$3 log
  log="$dir/logs/$(slug "$name").log"
  rm -f "$log.status"
  # The job's status goes to a file of its own when it ends: that file, not the pid, says a job
  # has ended (a suite starts tens of thousands of processes, and pids are reused). Its input is
  # nothing: what a test starts (psql, a shell) would otherwise read the list of jobs to come.
  # shellcheck disable=SC2086 # the command is a list of words, split on purpose
  (
    cd "$cwd" && /usr/bin/time -q -f '%U %S' -o "$root/$log.cpu" \
      timeout -k 30 "$job_timeout" $cmd
    echo $? >"$root/$log.status"
  ) </dev/null >"$log" 2>&1 &
  running[$!]=$name
  begun[$!]=$(now_s)
}
end_job() { # pid
  local pid=$1 rc name log secs result
  name=${running[$pid]}
  log="$dir/logs/$(slug "$name").log"
  rc=$(cat "$log.status")
  wait "$pid" 2>/dev/null
  secs=$(since "${begun[$pid]}")
  unset "running[$pid]" "begun[$pid]" "niced[$pid]"
  result=ok
  if [ "$rc" != 0 ]; then
    result=FAILED
    failed=1
    [ "$rc" = 124 ] && echo "suite: $name was stopped after ${job_timeout} s" >>"$log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$secs" "$name" "$result" "$(test_counts "$log")" \
    "$(awk '{ printf "%.0f", $1 + $2 }' "$log.cpu" 2>/dev/null)" >>"$table"
  {
    echo
    echo "==== $name: $result in ${secs} s ===="
    cat "$log"
  } | tee -a "$output"
}
# Polls for the first job whose status file exists.
wait_one() {
  local pid
  while true; do
    for pid in "${!running[@]}"; do
      if [ -s "$dir/logs/$(slug "${running[$pid]}").log.status" ]; then
        end_job "$pid"
        return
      fi
    done
    sleep 1
  done
}

# The guests' tests need nothing of the test build and build in a target directory of their own:
# they start first, niced, and compute while the builds below wait on one crate or the linker.
if [ -z "$only" ] || [[ "guests' tests" =~ $only ]]; then
  start_job "guests' tests" "$root/guests" "nice -n 19 cargo test --workspace --locked --no-fail-fast"
  niced[$!]=1
fi

# 1. The previous release. Its build shares target/ and cargo's lock, so it goes before the rest.
# Only the deployment tests run it (tests/deployment/upgrades.rs).
if [ -z "$only" ] || [[ tests/deployment =~ $only ]]; then
  timed "$table" "previous release, from history" scripts/build-release.sh >/dev/null || failed=1
fi

# 2. Every test binary. `cargo test` would run them one after another; it only builds them here.
if ! timed "$table" "test build" \
  cargo test --workspace --exclude leasehold-sim --no-run --message-format=json-render-diagnostics \
  >"$dir/build.json"; then
  failed=1
  finish
fi

# The libraries' documentation examples (none are Rust code today; they run if one is added),
# before the simulator's build takes cargo's lock on target/: in the pool, they waited minutes
# for it in a test binary's place.
if [ -z "$only" ] || [[ "doc tests" =~ $only ]]; then
  start_job "doc tests" "$root" "cargo test --workspace --exclude leasehold-sim --doc"
  doc_pid=$!
  while [ -n "${running[$doc_pid]:-}" ]; do wait_one; done
fi

# The simulator, niced beside the rest, once the test build is done: it builds in target/ too
# (the dependencies it shares with the test build are built once; only sqlx and the lease crates
# build again, with its fault points), and cargo locks target/ for each build.
if [ -z "$only" ] || [[ simulator =~ $only ]]; then
  start_job simulator "$root" "nice -n 19 make --no-print-directory sim-suite"
  niced[$!]=1
fi

# The compiled-component cache every `leasehold` process of the suite shares, as the default
# cache under XDG_CACHE_HOME (a test that sets a cache of its own keeps it). Filled first from
# guests/dist, one component at a time: the Python and JavaScript examples take ~20-30 s of CPU
# each to compile, and tests that start hosts side by side would otherwise each compile them at
# once. Kept between runs; its keys are the components' contents and the engine's.
export XDG_CACHE_HOME=$root/target/test-cache
warm() {
  local wasm
  for wasm in guests/dist/*.wasm; do
    # Some test guests are refused on purpose (another world, another WIT version).
    target/debug/leasehold check "$wasm" >/dev/null 2>&1 || true
  done
}
timed "$table" "compile cache, from guests/dist" warm

# name <TAB> directory <TAB> executable, for every test binary: an integration test by its
# package's directory and name ("tests/leases"), unit tests by the directory ("host (unit)").
jq -r --arg root "$root/" '
  select(.reason == "compiler-artifact" and .profile.test and .executable != null)
  | (.manifest_path | ltrimstr($root) | rtrimstr("/Cargo.toml")) as $pkg
  | (if .target.kind == ["test"] then "\($pkg)/\(.target.name)"
     elif .target.kind == ["bin"] then "\($pkg) bin \(.target.name) (unit)"
     else "\($pkg) (unit)" end) as $name
  | [$name, ($root + $pkg), .executable] | @tsv' "$dir/build.json" | sort -u >"$dir/binaries.tsv"

alone_jobs=$dir/alone.tsv
: >"$alone_jobs"
while IFS=$'\t' read -r name cwd exe; do
  filter=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' <<<"$alone_tests")
  if [ -n "$filter" ]; then
    add_job "$name" "$cwd" env CARGO_MANIFEST_DIR="$cwd" "$exe" --skip "$filter" ${SUITE_TEST_ARGS:-}
    name="$name $filter (alone)"
    [ -n "$only" ] && ! [[ $name =~ $only ]] && continue
    printf '%s\t%s\t%s\n' "$name" "$cwd" \
      "env CARGO_MANIFEST_DIR=$cwd $exe $filter ${SUITE_TEST_ARGS:-}" >>"$alone_jobs"
  else
    add_job "$name" "$cwd" env CARGO_MANIFEST_DIR="$cwd" "$exe" ${SUITE_TEST_ARGS:-}
  fi
done <"$dir/binaries.tsv"

# 3. The tests whose bound is the machine's, one binary at a time with no other beside them.
while IFS=$'\t' read -r name cwd cmd; do
  start_job "$name" "$cwd" "$cmd"
  pid=$!
  while [ -n "${running[$pid]:-}" ]; do wait_one; done
done <"$alone_jobs"

# 4. The test binaries, longest first, at most max_jobs jobs at once.
say "suite: $(($(wc -l <"$jobs_list") + ${#running[@]})) jobs, at most $max_jobs at once"
while IFS=$'\t' read -r _ name cwd cmd; do
  while [ "$(binaries_running)" -ge "$max_jobs" ]; do wait_one; done
  start_job "$name" "$cwd" "$cmd"
done < <(sort -t$'\t' -k1,1nr "$jobs_list")
while [ "${#running[@]}" -gt 0 ]; do wait_one; done
finish
}
