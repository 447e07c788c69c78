#!/usr/bin/env bash
# Builds {{name}}.wasm, a WASI p2 component, with the Rust toolchain.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{name}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm"
