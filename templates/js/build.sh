#!/usr/bin/env bash
# Builds {{name}}.wasm with componentize-js (pinned in package.json), patched
# by patch-componentize.mjs for faster generated glue (see that file).
# Needs node 20+ and npm. Set COMPONENTIZE_JS to use a componentize-js you
# already have (patch it first: node patch-componentize.mjs DIR-OF-THE-PACKAGE).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
command -v node >/dev/null || { echo "build.sh: node not found: install node 20+ and npm" >&2; exit 1; }
cjs="${COMPONENTIZE_JS:-}"
if [[ -z "$cjs" ]]; then
    if [[ ! -x node_modules/.bin/componentize-js ]]; then
        command -v npm >/dev/null || { echo "build.sh: npm not found: install node 20+ and npm" >&2; exit 1; }
        npm install --no-audit --no-fund --silent
    fi
    node patch-componentize.mjs node_modules/@bytecodealliance/componentize-js >/dev/null
    cjs=node_modules/.bin/componentize-js
fi
"$cjs" app.js --wit wit --world-name {{world}} --out {{name}}.wasm >/dev/null
echo "built {{name}}.wasm"
