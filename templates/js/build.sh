#!/usr/bin/env bash
# Builds {{name}}.wasm with componentize-js (pinned in package.json).
# Set COMPONENTIZE_JS to use a componentize-js you already have.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cjs="${COMPONENTIZE_JS:-}"
if [[ -z "$cjs" ]]; then
    [[ -x node_modules/.bin/componentize-js ]] || npm install --no-audit --no-fund --silent
    cjs=node_modules/.bin/componentize-js
fi
"$cjs" app.js --wit wit --world-name handler --out {{name}}.wasm >/dev/null
echo "built {{name}}.wasm"
