#!/usr/bin/env bash
# The two ways the README tells a user to install Closeout before it is on the registry, tried as a user would, in
# fresh projects outside this tree: the tarball `npm pack` makes (its manifest without development scripts), and a
# git URL (npm clones the repository, installs its development dependencies, runs `prepare` to build dist/, and packs
# that). Each project then runs the main job, `npx closeout demo` on the embedded default (SQLite), and imports the
# three core entry points from its own ESM code.
#
# The check runs offline: npm takes every package from its cache, the git URL is a file:// one of this repository's
# committed HEAD, and better-sqlite3 is compiled from source against this Node's own headers instead of downloading a
# prebuilt binary, so nothing leaves the machine. `--fetch` is the install step before it (`.ci/run` runs it beside
# `npm ci`): it resolves the same installs from the registry with no script run, which puts in npm's cache what a
# user's install would download (the versions a consumer resolves today, not this tree's lock file's).
#
# Usage: scripts/install-check.sh [--fetch] [tarball|git ...]   (default: both)
# Exit: 0 when every way named installed and ran; 1 at the first that did not (its log is printed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fetch=false
if [[ "${1:-}" == --fetch ]]; then
  fetch=true
  shift
fi
ways=("$@")
[[ ${#ways[@]} -gt 0 ]] || ways=(tarball git)

work=$(mktemp -d "${TMPDIR:-/tmp}/closeout-install-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

# node-gyp builds better-sqlite3 against the running Node's headers (Debian's nodejs ships them under /usr/include/node)
node_prefix=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
if $fetch; then
  export npm_config_ignore_scripts=true
else
  export npm_config_offline=true npm_config_build_from_source=true npm_config_nodedir="$node_prefix"
fi

log() { printf 'install-check: %s\n' "$*" >&2; }

# A fresh ESM project at $1 that installs $2 (a tarball path or a git URL) with zod, as the README says.
try_install() {
  local project=$1 spec=$2
  mkdir -p "$project"
  printf '{ "name": "closeout-install-check", "private": true, "type": "module" }\n' >"$project/package.json"
  if ! (cd "$project" && npm install "$spec" zod >"$project/install.log" 2>&1); then
    log "npm install $spec failed:"
    tail -40 "$project/install.log" >&2
    return 1
  fi
}

# The installed package does what the README's first command and first import promise.
try_use() {
  local project=$1
  cat >"$project/use.mjs" <<'EOF'
import { TaskServer, SqliteTaskStore } from 'closeout/server';
import { connectHttpTaskClient } from 'closeout/client';
import { TASKS_EXTENSION_ID } from 'closeout/protocol';
if (typeof TaskServer !== 'function' || typeof SqliteTaskStore !== 'function') throw new Error('closeout/server');
if (typeof connectHttpTaskClient !== 'function') throw new Error('closeout/client');
if (TASKS_EXTENSION_ID !== 'io.modelcontextprotocol/tasks') throw new Error('closeout/protocol');
console.log('imports ok');
EOF
  if ! (cd "$project" && node use.mjs >"$project/use.log" 2>&1); then
    log "importing the installed package failed:"
    cat "$project/use.log" >&2
    return 1
  fi
  if ! (cd "$project" && timeout 300 npx --no-install closeout demo >"$project/demo.log" 2>&1); then
    log "npx closeout demo in the installed project failed:"
    tail -40 "$project/demo.log" >&2
    return 1
  fi
  log "$(basename "$project"): installed, imports ok, closeout demo: $(grep -c . "$project/demo.log") lines, exit 0"
}

for way in "${ways[@]}"; do
  case "$way" in
    tarball)
      # as a user packs it: prepack builds dist/ and writes the manifest without development scripts, postpack puts
      # the repository's back (scripts/packed-manifest.mjs); --fetch runs no script at all
      log "packing this tree and installing the tarball"
      (cd "$ROOT" && npm pack --silent --pack-destination "$work" >/dev/null)
      try_install "$work/from-tarball" "$(ls "$work"/closeout-*.tgz)"
      if ! $fetch; then
        if ! node -e 'process.exit(Object.hasOwn(require(process.argv[1]), "scripts") ? 1 : 0)' \
          "$work/from-tarball/node_modules/closeout/package.json"; then
          log "the installed package.json carries development scripts"
          exit 1
        fi
        try_use "$work/from-tarball"
      fi
      ;;
    git)
      log "installing from git+file://$ROOT (HEAD $(git -C "$ROOT" rev-parse --short HEAD))"
      try_install "$work/from-git" "git+file://$ROOT#$(git -C "$ROOT" rev-parse HEAD)"
      $fetch || try_use "$work/from-git"
      ;;
    *)
      log "unknown way '$way' (known: tarball git)"
      exit 2
      ;;
  esac
done
