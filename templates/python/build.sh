#!/usr/bin/env bash
# Builds {{name}}.wasm with componentize-py (pinned), in a local virtualenv.
# The sluice SDK in sdk/ goes into the component from sdk/src (`-p`).
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
# VIRTUAL_ENV unset: nothing from a site-packages goes into the component.
(unset VIRTUAL_ENV; "$cpy" -q -d wit -w {{world}} componentize app -p . -p sdk/src -o {{name}}.wasm)
echo "built {{name}}.wasm"
