# The Node lines besides the machine's own, shared by scripts/node-matrix.sh and scripts/suite-on-node.sh (sourced, not
# run): each Node from the npm registry's `node` package and better-sqlite3 compiled against that package's own
# headers, as a user's `npm install` on that line would, kept in a cache outside the tree that the clones of one
# machine share ($CLOSEOUT_NODE_MATRIX_CACHE, default ~/.cache/closeout-node-matrix), one directory per Node version and
# driver version, each made in a scratch directory and renamed into place whole.
#
# Needs ROOT (the package's root) set by the caller; sets NODE_VERSIONS, CACHE, DRIVER_VERSION, log, install_node,
# build_driver, node_bin, driver_modules.

declare -A NODE_VERSIONS=([22]=22.23.3 [24]=24.21.0 [26]=26.10.0)
CACHE="${CLOSEOUT_NODE_MATRIX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/closeout-node-matrix}"
DRIVER_VERSION=$(node -p 'require(process.argv[1]).version' "$ROOT/node_modules/better-sqlite3/package.json")
mkdir -p "$CACHE"
log() { printf '%s\n' "$*" >&2; }

# node@VERSION in $CACHE/node-VERSION. The `node` package fetches its binary in a preinstall script, which npm runs
# for a dependency only when `allowScripts` names it (as in scripts/conformance.sh).
install_node() {
  local version=$1 dir="$CACHE/node-$1"
  [[ "$("$dir/node_modules/node/bin/node" --version 2>/dev/null)" == "v$version" ]] && return 0
  log "installing node@$version into $dir"
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
  local version=$1 dir
  dir=$(dirname "$(driver_modules "$1")")
  [[ -f "$dir/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]] && return 0
  local headers
  headers=$(echo "$CACHE/node-$version"/node_modules/node/node_modules/node-linux-*)
  [[ -f "$headers/include/node/node.h" ]] || {
    log "no headers in the node@$version package ($headers)"
    return 1
  }
  log "compiling better-sqlite3 $DRIVER_VERSION for node $version (about a minute and a half)"
  local scratch
  scratch=$(mktemp -d "$CACHE/.better-sqlite3-node-$version.XXXXXX")
  mkdir -p "$scratch/node_modules"
  cp -R "$ROOT/node_modules/better-sqlite3" "$ROOT/node_modules/bindings" "$ROOT/node_modules/file-uri-to-path" \
    "$scratch/node_modules/"
  rm -rf "$scratch/node_modules/better-sqlite3/build"
  # npm_config_nodedir: a nodedir in the user's npmrc would otherwise win over a command-line flag
  if ! (cd "$scratch/node_modules/better-sqlite3" && npm_config_nodedir="$headers" npm run --silent build-release) \
    >"$scratch/build.log" 2>&1; then
    log "the build failed; the end of its log:"
    tail -n 20 "$scratch/build.log" >&2
    rm -rf "$scratch"
    return 1
  fi
  rm -rf "$scratch/node_modules/better-sqlite3/build/Release/obj.target" "$scratch/node_modules/better-sqlite3/build/Release/.deps"
  mv "$scratch" "$dir" 2>/dev/null || rm -rf "$scratch" # another clone's build got there first
}

# The node binary of a line's version.
node_bin() { echo "$CACHE/node-$1/node_modules/node/bin/node"; }

# The node_modules folder that holds better-sqlite3 built for a line's version.
driver_modules() { echo "$CACHE/better-sqlite3-$DRIVER_VERSION-node-$1/node_modules"; }
