#!/usr/bin/env bash
# The Node line matrix: `closeout demo` (a task server, the client, a detach and a resume from a fresh process) run
# several times in a row on each Node line that package.json's `engines` admits besides the machine's own, each Node
# from the npm registry's `node` package and better-sqlite3 compiled against that package's own headers, as a user's
# `npm install` on that line would (scripts/lib/node-lines.sh). The working tree is left alone: each line gets a
# scratch copy of the package in .tools/node-matrix (gitignored) whose node_modules link to the tree's, except
# better-sqlite3, which links to the copy compiled for that Node.
#
# Why repeated: a native object the garbage collector frees at the wrong moment aborts a process only now and then
# (see src/shared/sqlite/sqliteDriver.ts); one run proves little. After the runs, scripts/node-matrix-churn.mjs makes and drops the
# driver's objects in every way this package does while JavaScript allocates, which provokes that moment far oftener.
#
# Usage: scripts/node-matrix.sh [--runs N] [LINE...]   (default: 5 runs on lines 22 and 24; lines: 22 24 26)
# Exit: 0 when every run on every line passed; 1 when one failed (its output is printed); 3 when a line's Node could not
# be installed or the driver not built for it (nothing was run on that line).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools/node-matrix"
# shellcheck source=scripts/lib/node-lines.sh
source "$ROOT/scripts/lib/node-lines.sh"

RUNS=5
LINES=()
while (($# > 0)); do
  case "$1" in
    --runs)
      RUNS=$2
      shift 2
      ;;
    *)
      LINES+=("$1")
      shift
      ;;
  esac
done
((${#LINES[@]} > 0)) || LINES=(22 24)
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || {
  echo "node-matrix: --runs takes a positive count, got '$RUNS'" >&2
  exit 2
}
for line in "${LINES[@]}"; do
  [[ -n "${NODE_VERSIONS[$line]:-}" ]] || {
    echo "node-matrix: no pinned Node for line '$line' (known: ${!NODE_VERSIONS[*]})" >&2
    exit 2
  }
done

if [[ ! -f "$ROOT/dist/cli/main.js" ]] || [[ -n "$(find "$ROOT/src" -newer "$ROOT/dist/cli/main.js" -print -quit)" ]]; then
  log "node-matrix: building (dist/ is missing or older than src/)"
  (cd "$ROOT" && npm run --silent build) >&2
fi
mkdir -p "$TOOLS"

# The scratch package for one Node: dist/ and package.json fresh from the tree, node_modules linking to the tree's,
# better-sqlite3 to the build for that Node.
prepare_package() {
  local version=$1 pkg="$TOOLS/package-node-$1"
  rm -rf "$pkg"
  mkdir -p "$pkg/node_modules"
  cp -R "$ROOT/dist" "$pkg/dist"
  cp "$ROOT/package.json" "$pkg/package.json"
  local entry name
  for entry in "$ROOT"/node_modules/* "$ROOT"/node_modules/.[!.]*; do
    [[ -e "$entry" ]] || continue
    name=$(basename "$entry")
    [[ "$name" == better-sqlite3 || "$name" == .bin || "$name" == .package-lock.json ]] && continue
    ln -s "$entry" "$pkg/node_modules/$name"
  done
  ln -s "$(driver_modules "$version")/better-sqlite3" "$pkg/node_modules/better-sqlite3"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/closeout-node-matrix.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

status=0
for line in "${LINES[@]}"; do
  version=${NODE_VERSIONS[$line]}
  if ! install_node "$version" || ! build_driver "$version"; then
    log "node-matrix: node $version could not be set up; nothing was run on it"
    ((status != 0)) || status=3
    continue
  fi
  prepare_package "$version"
  pkg="$TOOLS/package-node-$version"
  node_bin=$(node_bin "$version")
  passed=0
  for run in $(seq 1 "$RUNS"); do
    dir="$WORK/node-$version-run-$run"
    mkdir -p "$dir"
    started=$(date +%s)
    if (cd "$dir" && timeout 300 "$node_bin" "$pkg/dist/cli/main.js" demo >"$dir/demo.log" 2>&1); then
      passed=$((passed + 1))
    else
      code=$?
      log "node-matrix: node $version, run $run of $RUNS: closeout demo exited $code after $(($(date +%s) - started)) s; its output:"
      sed 's/^/    /' "$dir/demo.log" >&2
      status=1
    fi
  done
  churn="failed"
  if (cd "$WORK" && timeout 300 "$node_bin" "$ROOT/scripts/node-matrix-churn.mjs" "$pkg" >"$WORK/churn-$version.log" 2>&1); then
    churn="passed"
  else
    code=$?
    log "node-matrix: node $version: scripts/node-matrix-churn.mjs exited $code; its output:"
    sed 's/^/    /' "$WORK/churn-$version.log" >&2
    status=1
  fi
  echo "node-matrix: node $version (better-sqlite3 $DRIVER_VERSION built for it): closeout demo passed $passed of $RUNS runs; the driver churn $churn"
done
exit "$status"
