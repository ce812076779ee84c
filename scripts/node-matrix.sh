#!/usr/bin/env bash
# The Node line matrix: `closeout demo` (a task server, the client, a detach and a resume from a fresh process) run
# several times in a row on each Node line that package.json's `engines` admits besides the machine's own, each Node
# from the npm registry's `node` package and better-sqlite3 compiled against that package's own headers, as a user's
# `npm install` on that line would. The working tree is left alone: each line gets a scratch copy of the package in
# .tools/node-matrix (gitignored) whose node_modules link to the tree's, except better-sqlite3, which links to a copy
# compiled for that Node. The Nodes and those builds are kept in a cache outside the tree, shared by the clones of
# one machine ($CLOSEOUT_NODE_MATRIX_CACHE, default ~/.cache/closeout-node-matrix), one directory per Node version
# and driver version, each made in a scratch directory and renamed into place whole.
#
# Why repeated: a native object the garbage collector frees at the wrong moment aborts a process only now and then
# (see src/shared/sqlite/sqliteDriver.ts); one run proves little. After the runs, scripts/node-matrix-churn.mjs makes and drops the
# driver's objects in every way this package does while JavaScript allocates, which provokes that moment far oftener.
#
# Usage: scripts/node-matrix.sh [--runs N] [LINE...]   (default: 5 runs on lines 22 and 24; lines: 22 24 26)
# Exit: 0 when every run on every line passed; 1 when one failed (its output is printed); 3 when a line's Node could not
# be installed or the driver not built for it (nothing was run on that line).
set -euo pipefail

declare -A NODE_VERSIONS=([22]=22.23.3 [24]=24.21.0 [26]=26.10.0)
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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools/node-matrix"
CACHE="${CLOSEOUT_NODE_MATRIX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/closeout-node-matrix}"
log() { printf '%s\n' "$*" >&2; }

if [[ ! -f "$ROOT/dist/cli/main.js" ]] || [[ -n "$(find "$ROOT/src" -newer "$ROOT/dist/cli/main.js" -print -quit)" ]]; then
  log "node-matrix: building (dist/ is missing or older than src/)"
  (cd "$ROOT" && npm run --silent build) >&2
fi
DRIVER_VERSION=$(node -p 'require(process.argv[1]).version' "$ROOT/node_modules/better-sqlite3/package.json")
mkdir -p "$CACHE" "$TOOLS"

# node@VERSION in $CACHE/node-VERSION. The `node` package fetches its binary in a preinstall script, which npm runs
# for a dependency only when `allowScripts` names it (as in scripts/conformance.sh).
install_node() {
  local version=$1 dir="$CACHE/node-$1"
  [[ "$("$dir/node_modules/node/bin/node" --version 2>/dev/null)" == "v$version" ]] && return 0
  log "node-matrix: installing node@$version into $dir"
  local scratch
  scratch=$(mktemp -d "$CACHE/.node-$version.XXXXXX")
  printf '{\n  "name": "closeout-node-%s",\n  "private": true,\n  "dependencies": { "node": "%s" },\n  "allowScripts": { "node": true }\n}\n' \
    "$version" "$version" >"$scratch/package.json"
  if npm install --prefix "$scratch" --no-audit --no-fund --ignore-scripts=false --loglevel=error >/dev/null &&
    [[ "$("$scratch/node_modules/node/bin/node" --version 2>/dev/null)" == "v$version" ]]; then
    rm -rf "$dir"
    mv "$scratch" "$dir" 2>/dev/null || rm -rf "$scratch" # another clone's install got there first
  else
    rm -rf "$scratch"
  fi
  [[ "$("$dir/node_modules/node/bin/node" --version 2>/dev/null)" == "v$version" ]]
}

# better-sqlite3 (with the two packages it loads its binary with) compiled against node@VERSION's own headers
# (--nodedir: nothing is downloaded), in $CACHE/better-sqlite3-DRIVER-node-VERSION/node_modules.
build_driver() {
  local version=$1 dir="$CACHE/better-sqlite3-$DRIVER_VERSION-node-$1"
  [[ -f "$dir/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]] && return 0
  local headers
  headers=$(echo "$CACHE/node-$version"/node_modules/node/node_modules/node-linux-*)
  [[ -f "$headers/include/node/node.h" ]] || {
    log "node-matrix: no headers in the node@$version package ($headers)"
    return 1
  }
  log "node-matrix: compiling better-sqlite3 $DRIVER_VERSION for node $version (about a minute and a half)"
  local scratch
  scratch=$(mktemp -d "$CACHE/.better-sqlite3-node-$version.XXXXXX")
  mkdir -p "$scratch/node_modules"
  cp -R "$ROOT/node_modules/better-sqlite3" "$ROOT/node_modules/bindings" "$ROOT/node_modules/file-uri-to-path" \
    "$scratch/node_modules/"
  rm -rf "$scratch/node_modules/better-sqlite3/build"
  # npm_config_nodedir: a nodedir in the user's npmrc would otherwise win over a command-line flag
  if ! (cd "$scratch/node_modules/better-sqlite3" && npm_config_nodedir="$headers" npm run --silent build-release) \
    >"$scratch/build.log" 2>&1; then
    log "node-matrix: the build failed; the end of its log:"
    tail -n 20 "$scratch/build.log" >&2
    rm -rf "$scratch"
    return 1
  fi
  rm -rf "$scratch/node_modules/better-sqlite3/build/Release/obj.target" "$scratch/node_modules/better-sqlite3/build/Release/.deps"
  mv "$scratch" "$dir" 2>/dev/null || rm -rf "$scratch" # another clone's build got there first
}

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
  ln -s "$CACHE/better-sqlite3-$DRIVER_VERSION-node-$version/node_modules/better-sqlite3" "$pkg/node_modules/better-sqlite3"
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
  node_bin="$CACHE/node-$version/node_modules/node/bin/node"
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
