#!/usr/bin/env bash
# Builds {{name}}.wasm: bundles app.js with the SDK it imports (sdk/,
# installed as sluice-sdk) into build/app.js with rolldown, then compiles
# that with componentize-js (both pinned in package.json), patched by
# patch-componentize.mjs for faster generated glue (see that file).
# componentize-js resolves no package names, hence the bundle.
# Needs node 20+ and npm. Set COMPONENTIZE_JS to use a componentize-js you
# already have (patch it first: node patch-componentize.mjs DIR-OF-THE-PACKAGE)
# and ROLLDOWN to use a rolldown (default: the one beside COMPONENTIZE_JS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
command -v node >/dev/null || { echo "build.sh: node not found: install node 20+ and npm" >&2; exit 1; }

# An absolute path to a tool (the build runs it from build/).
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

cjs="${COMPONENTIZE_JS:-}"
rolldown="${ROLLDOWN:-}"
if [[ -n "$cjs" && -z "$rolldown" && -x "$(dirname "$cjs")/rolldown" ]]; then
    rolldown="$(dirname "$cjs")/rolldown"
fi
if [[ -z "$cjs" || -z "$rolldown" ]]; then
    if [[ ! -x node_modules/.bin/componentize-js || ! -x node_modules/.bin/rolldown || ! -e node_modules/sluice-sdk ]]; then
        command -v npm >/dev/null || { echo "build.sh: npm not found: install node 20+ and npm" >&2; exit 1; }
        npm install --no-audit --no-fund --silent
    fi
    if [[ -z "$cjs" ]]; then
        node patch-componentize.mjs node_modules/@bytecodealliance/componentize-js >/dev/null
        cjs=node_modules/.bin/componentize-js
    fi
    rolldown="${rolldown:-node_modules/.bin/rolldown}"
elif [[ ! -e node_modules/sluice-sdk ]]; then
    # The SDK is all the bundle needs from node_modules: link it as npm
    # links the `file:` dependency.
    mkdir -p node_modules
    ln -s ../sdk node_modules/sluice-sdk
fi

cjs="$(absolute "$cjs")"
rolldown="$(absolute "$rolldown")"

# The WIT imports stay imports: the component provides them.
externals=()
for iface in log publish config kv lease; do externals+=(--external "sluice:handler/$iface@0.2.0"); done
rm -rf build
mkdir build
"$rolldown" app.js --format esm --platform neutral "${externals[@]}" \
    --logLevel warn --file build/app.js >/dev/null
# Run from build/ with a relative source path: componentize-js maps the
# working directory as the component's `/`.
(cd build && "$cjs" app.js --wit ../wit --world-name {{world}} --out ../{{name}}.wasm >/dev/null)
echo "built {{name}}.wasm"
