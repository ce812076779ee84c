#!/usr/bin/env bash
# The whole test suite (vitest, what `npm test` runs) on another Node line than the machine's own: the Node from the
# npm registry's `node` package and better-sqlite3 compiled for it (scripts/lib/node-lines.sh, the cache the Node
# line matrix fills). The working tree is left alone: the suite runs in a scratch copy of it in .tools/suite-node-LINE
# (gitignored), its node_modules hard links to the tree's except better-sqlite3, the copy built for that Node, its
# dist/ built there; `node` on the PATH is that Node, so every process a test starts runs on it too.
#
# Usage: scripts/suite-on-node.sh LINE [vitest arguments...]   (lines: 22 24 26)
# Exit: vitest's (0 when the suite passed); 3 when the line's Node could not be installed or the driver not built for
# it (nothing was run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/node-lines.sh
source "$ROOT/scripts/lib/node-lines.sh"

line=${1:-}
[[ -n "$line" && -n "${NODE_VERSIONS[$line]:-}" ]] || {
  echo "suite-on-node: name a Node line (known: ${!NODE_VERSIONS[*]})" >&2
  exit 2
}
shift
version=${NODE_VERSIONS[$line]}
if ! install_node "$version" || ! build_driver "$version"; then
  log "suite-on-node: node $version could not be set up; nothing was run on it"
  exit 3
fi

copy="$ROOT/.tools/suite-node-$line"
rm -rf "$copy"
mkdir -p "$copy"
# the tree as it is (tracked and untracked files alike), without what is built or installed
(cd "$ROOT" && tar --exclude=./node_modules --exclude=./.git --exclude=./.tools --exclude=./dist -cf - .) |
  (cd "$copy" && tar -xf -)
cp -al "$ROOT/node_modules" "$copy/node_modules"
rm -rf "$copy/node_modules/better-sqlite3"
cp -R "$(driver_modules "$version")/better-sqlite3" "$copy/node_modules/better-sqlite3"

PATH="$(dirname "$(node_bin "$version")"):$PATH"
export PATH
cd "$copy"
log "suite-on-node: $(node --version), better-sqlite3 $DRIVER_VERSION built for it, in $copy"
npm run --silent build
exec npx vitest run "$@"
