# A Python tool from PyPI, pinned, in a virtual environment of its own under
# target/tools/NAME/ (CARGO_TARGET_DIR's when set), installed on first use and again only when
# the pin changes or the environment is broken. Sourced by the scripts that run such a tool:
#
#   . "$root/scripts/lib/pip-tool.sh"
#   venv=$(pip_tool NAME 'PACKAGE==PIN' 'import MODULE')    # exits 1 with a message on failure
#
# Tests call those scripts in parallel: one installs, the others wait for it and reuse it.

pip_tool() {
  local name=$1 requirement=$2 check=$3
  local tools="${CARGO_TARGET_DIR:-$root/target}/tools/$name"
  local venv="$tools/venv"
  local stamp="$venv/.pinned"
  installed() {
    [ -x "$venv/bin/python" ] &&
      [ "$(cat "$stamp" 2>/dev/null)" = "$requirement" ] &&
      "$venv/bin/python" -c "$check" 2>/dev/null
  }
  if ! installed; then
    mkdir -p "$tools"
    exec 9>"$tools/lock"
    if command -v flock >/dev/null 2>&1; then
      flock -w 600 9 || {
        echo "$name: timed out waiting for another install into ${tools#"$root"/}" >&2
        exit 1
      }
    fi
    installed || pip_tool_install "$name" "$requirement" "$tools" "$venv" "$stamp" >&2 || exit 1
    exec 9>&-
  fi
  echo "$venv"
}

pip_tool_install() {
  local name=$1 requirement=$2 tools=$3 venv=$4 stamp=$5
  command -v python3 >/dev/null 2>&1 || {
    echo "$name: python3 is missing: install Python 3 with venv (Debian: apt-get install python3 python3-venv)"
    return 1
  }
  rm -rf "$venv"
  echo "$name: installing $requirement into ${venv#"$root"/}"
  python3 -m venv "$venv" >/dev/null 2>&1 || {
    echo "$name: python3 cannot create a virtual environment (Debian: apt-get install python3-venv)"
    return 1
  }
  # pip retries each request itself; these rounds cover a connection that drops for longer.
  local attempt
  for attempt in 1 2 3; do
    if "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 3 --timeout 30 \
      "$requirement" >"$tools/pip.log" 2>&1; then
      echo "$requirement" >"$stamp"
      return 0
    fi
    [ "$attempt" -eq 3 ] || sleep $((attempt * 5))
  done
  tail -n 5 "$tools/pip.log"
  echo "$name: pip could not install $requirement after 3 attempts (is PyPI reachable?); log: ${tools#"$root"/}/pip.log"
  return 1
}
