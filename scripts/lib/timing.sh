# Step timing shared by scripts/test-suite.sh (`make test`) and .ci/run: each step appends a row to
# a table file, and scripts/suite-table.sh prints the table slowest first. Sourced, not run.
#
# A row: seconds <TAB> step <TAB> result (ok | FAILED) <TAB> tests ("N passed, N failed, N ignored",
# or empty for a step that runs none) [<TAB> CPU seconds].

# Seconds since the epoch, to the millisecond.
now_s() { date +%s.%3N; }

# Seconds from $1 (a now_s reading) to now, to a tenth.
since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

# CPU seconds (user + system) of this shell's children that have ended, from bash's `times`,
# into $cpu_now. `times` runs in this shell, not in a command substitution's subshell, which
# would count its own children only.
children_cpu() {
  local f
  f=$(mktemp)
  times >"$f"
  cpu_now=$(awk 'NR == 2 {
    for (i = 1; i <= 2; i++) { split($(i), t, "m"); s += t[1] * 60 + t[2] }
    printf "%.1f", s
  }' "$f")
  rm -f "$f"
}

# `timed TABLE STEP CMD…`: runs CMD (a command or a shell function), appends its row to TABLE,
# returns CMD's status.
timed() {
  local table=$1 step=$2 t0 c0 rc
  shift 2
  t0=$(now_s)
  children_cpu
  c0=$cpu_now
  "$@"
  rc=$?
  children_cpu
  printf '%s\t%s\t%s\t\t%s\n' "$(since "$t0")" "$step" "$([ $rc = 0 ] && echo ok || echo FAILED)" \
    "$(awk -v a="$c0" -v b="$cpu_now" 'BEGIN { printf "%.0f", b - a }')" >>"$table"
  return $rc
}

# The test counts of libtest's summary lines in a log ("test result: ok. 3 passed; 0 failed;
# 1 ignored; …"), added up: "N passed, N failed, N ignored".
test_counts() {
  awk '/^test result: / {
         for (i = 1; i <= NF; i++) {
           if ($(i) ~ /^passed;?$/) p += $(i - 1)
           if ($(i) ~ /^failed;?$/) f += $(i - 1)
           if ($(i) ~ /^ignored;?$/) g += $(i - 1)
         }
       }
       END { printf "%d passed, %d failed, %d ignored", p, f, g }' "$@"
}
