#!/usr/bin/env bash
# Builds {{name}}.wasm, a component of the world {{world}}: wit-bindgen C
# bindings, clang for wasm32-wasi, then `wasm-tools component new` with the
# WASI reactor adapter.
# Needs: clang, lld, wasi-libc and libclang-rt-14-dev-wasm32 (Debian), and
# wit-bindgen-cli and wasm-tools (`cargo install --locked`). Set WIT_BINDGEN,
# WASM_TOOLS to use other binaries, and ADAPTER to the path of
# wasi_snapshot_preview1.reactor.wasm (from the crate
# wasi-preview1-component-adapter-provider at the host's wasmtime version).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
wit_bindgen="${WIT_BINDGEN:-wit-bindgen}"
wasm_tools="${WASM_TOOLS:-wasm-tools}"
adapter="${ADAPTER:?set ADAPTER to the path of wasi_snapshot_preview1.reactor.wasm}"
sysroot="${WASI_SYSROOT:-/usr}"
world="{{world}}"
# wit-bindgen names its files after the world: batch-handler -> gen/batch_handler.h, ...
base="${world//-/_}"
rm -rf gen && mkdir -p gen
"$wit_bindgen" c wit --world "$world" --out-dir gen >/dev/null 2>&1
clang --target=wasm32-wasi --sysroot="$sysroot" -O2 -mexec-model=reactor -I gen \
    handler_impl.c "gen/$base.c" "gen/${base}_component_type.o" -o gen/core.wasm
"$wasm_tools" component new gen/core.wasm --adapt "wasi_snapshot_preview1=$adapter" -o {{name}}.wasm
echo "built {{name}}.wasm"
