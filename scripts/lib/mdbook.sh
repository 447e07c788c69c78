# shellcheck shell=bash
# mdBook, which builds the book in docs/: the version pinned here, installed
# from crates.io with `cargo install --locked` into .tools/mdbook (the
# repository's git-ignored tool cache) when it is missing or another
# version. A copy is kept in the user's cache directory (SLUICE_TOOL_CACHE,
# by default ~/.cache/sluice/tools), as scripts/build-guests-c does for its
# tools, so a fresh clone on the same machine copies it rather than
# compiling it again (a few minutes on a 2-core machine).
# Sourced by scripts/test and scripts/book; needs cargo on PATH
# (lib/toolchain.sh).

MDBOOK_VERSION=0.5.4

# Install mdBook unless the pinned version is there, and set MDBOOK to its
# path: need_mdbook ROOT
need_mdbook() {
    local root="$1" me
    me="$(basename "$0")"
    local dir="$root/.tools/mdbook"
    MDBOOK="$dir/bin/mdbook"
    # `mdbook --version` says "mdbook v0.5.4".
    if mdbook_is "$MDBOOK"; then
        return
    fi
    local cache="${SLUICE_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/tools}"
    local cached="$cache/mdbook-$MDBOOK_VERSION/mdbook"
    if mdbook_is "$cached"; then
        echo "$me: copying mdbook $MDBOOK_VERSION from $cache"
        mkdir -p "$dir/bin"
        cp "$cached" "$MDBOOK.tmp"
        mv "$MDBOOK.tmp" "$MDBOOK"
        return
    fi
    echo "$me: installing mdbook $MDBOOK_VERSION into .tools/mdbook (a few minutes, once)"
    cargo install mdbook --version "=$MDBOOK_VERSION" --locked --force --root "$dir"
    mdbook_is "$MDBOOK" || {
        echo "$me: cargo installed mdbook, but $MDBOOK is not mdbook v$MDBOOK_VERSION" >&2
        return 1
    }
    if mkdir -p "$(dirname "$cached")" 2>/dev/null && cp "$MDBOOK" "$cached.tmp" 2>/dev/null; then
        mv "$cached.tmp" "$cached"
    else
        echo "$me: cannot keep a copy of mdbook in $cache (not writable); the next fresh clone compiles it again"
    fi
}

# Whether BINARY is the pinned mdBook: mdbook_is BINARY
mdbook_is() {
    [[ -x "$1" && "$("$1" --version 2>/dev/null || true)" == "mdbook v$MDBOOK_VERSION" ]]
}
