#!/usr/bin/env bash
# Installs the Debian packages the fault-injection tests need, when missing: `faketime` (libfaketime: a process whose
# wall clock is stepped), `util-linux` (`unshare`: a process in its own PID namespace) and `strace` (the fsyncs a
# commit really makes); and `chromium`, the browser the console's tests drive (playwright-core). Needs root and Debian's apt;
# tests that need a missing tool fail with a message naming this script.
set -euo pipefail
missing=()
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if ((${#missing[@]} == 0)); then exit 0; fi
if [[ $(id -u) != 0 ]]; then
  echo "install-test-tools: missing ${missing[*]}; run as root or install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
  { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
echo "install-test-tools: installed ${missing[*]}"
