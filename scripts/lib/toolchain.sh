# shellcheck shell=bash
# The Rust toolchain sluice is built with: the channel in rust-toolchain.toml
# at the repository's root, installed with rustup when missing (with the
# wasm32-wasip2 target, clippy and rustfmt), then chosen for every cargo and
# rustc the calling script runs, whatever their directory
# (RUSTUP_TOOLCHAIN).
use_toolchain() { # ROOT
    local channel
    channel="$(sed -n 's/^channel = "\(.*\)"$/\1/p' "$1/rust-toolchain.toml")"
    if [[ -z "$channel" ]]; then
        echo "no channel in $1/rust-toolchain.toml" >&2
        return 1
    fi
    rustup toolchain install "$channel" --profile minimal \
        --component clippy,rustfmt --target wasm32-wasip2
    export RUSTUP_TOOLCHAIN="$channel"
}
