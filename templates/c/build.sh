#!/usr/bin/env bash
# Builds {{name}}.wasm, a component of the world {{world}}: wit-bindgen C
# bindings, handler_impl.c on the sluice C SDK (sdk/sluice.h) compiled with
# clang for wasm32-wasi, then `wasm-tools component new` with the WASI
# reactor adapter.
# Needs: clang, lld, wasi-libc and libclang-rt-14-dev-wasm32 (Debian), and
# wit-bindgen-cli and wasm-tools (`cargo install --locked`). Set WIT_BINDGEN,
# WASM_TOOLS to use other binaries, ADAPTER to the path of
# wasi_snapshot_preview1.reactor.wasm (from the crate
# wasi-preview1-component-adapter-provider at the host's wasmtime version),
# and CFLAGS to add flags to the compile of your sources (e.g. -Werror).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
wit_bindgen="${WIT_BINDGEN:-wit-bindgen}"
wasm_tools="${WASM_TOOLS:-wasm-tools}"
adapter="${ADAPTER:?set ADAPTER to the path of wasi_snapshot_preview1.reactor.wasm}"
sysroot="${WASI_SYSROOT:-/usr}"
read -ra extra_cflags <<<"${CFLAGS:-}"
world="{{world}}"
# wit-bindgen names its files after the world: batch-handler -> gen/batch_handler.h, ...
base="${world//-/_}"
# sluice.h includes the bindings of the world it is compiled for.
defines=()
if [[ "$world" == batch-handler ]]; then
    defines=(-DSLUICE_BATCH_HANDLER)
fi
target=(--target=wasm32-wasi --sysroot="$sysroot" -O2)
rm -rf gen && mkdir -p gen
"$wit_bindgen" c wit --world "$world" --out-dir gen >/dev/null 2>&1
clang "${target[@]}" -std=c11 -Wall -Wextra "${extra_cflags[@]}" "${defines[@]}" -I gen -I sdk \
    -c handler_impl.c -o gen/handler_impl.o
clang "${target[@]}" -c "gen/$base.c" -o "gen/$base.o"
clang "${target[@]}" -mexec-model=reactor \
    gen/handler_impl.o "gen/$base.o" "gen/${base}_component_type.o" -o gen/core.wasm
"$wasm_tools" component new gen/core.wasm --adapt "wasi_snapshot_preview1=$adapter" -o {{name}}.wasm
echo "built {{name}}.wasm"
