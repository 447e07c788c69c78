#!/usr/bin/env bash
# Builds {{name}}.wasm: wit-bindgen C bindings, clang for wasm32-wasi, then
# `wasm-tools component new` with the WASI reactor adapter.
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
rm -rf gen && mkdir -p gen
"$wit_bindgen" c wit --world handler --out-dir gen >/dev/null 2>&1
clang --target=wasm32-wasi --sysroot="$sysroot" -O2 -mexec-model=reactor -I gen \
    handler_impl.c gen/handler.c gen/handler_component_type.o -o gen/core.wasm
"$wasm_tools" component new gen/core.wasm --adapt "wasi_snapshot_preview1=$adapter" -o {{name}}.wasm
echo "built {{name}}.wasm"
