#!/usr/bin/env bash
# Builds {{name}}.wasm with componentize-py (pinned), in a local virtualenv.
# Set COMPONENTIZE_PY to use a componentize-py you already have.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cpy="${COMPONENTIZE_PY:-}"
if [[ -z "$cpy" ]]; then
    if [[ ! -x .venv/bin/componentize-py ]]; then
        python3 -m venv .venv
        .venv/bin/pip install --quiet componentize-py==0.25.1
    fi
    cpy=.venv/bin/componentize-py
fi
(unset VIRTUAL_ENV; "$cpy" -q -d wit -w {{world}} componentize app -p . -o {{name}}.wasm)
echo "built {{name}}.wasm"
