# shellcheck shell=bash
# Stamps for the guest builds: a guest's component OUT (NAME.wasm) is built
# again only when the hash of its inputs differs from the one recorded in
# NAME.stamp beside it. Sourced by build-guests-js, build-guests-python and
# build-guests-c, which each say what their inputs are.

# The sha256 of standard input, in hex.
sha() { sha256sum | cut -d' ' -f1; }

# One line per file under DIR that the `find` tests after it select (e.g.
# -name '*.wit'): its sha256 and its path relative to DIR, sorted, so that
# the lines change exactly when such a file is added, removed or changed.
tree_sums() { # DIR [FIND-TEST...]
    local dir="$1"
    shift
    (cd "$dir" && find . -type f "$@" -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}

# Whether OUT exists and its stamp records SUM.
stamp_fresh() { # OUT SUM
    local stamp="${1%.wasm}.stamp"
    [[ -f "$1" && -f "$stamp" && "$(cat "$stamp")" == "$2" ]]
}

# Build OUT unless its stamp records SUM: run COMMAND, which must write
# OUT.tmp, move that into place and record SUM. Prints "up to date" or
# "built in N s" for the caller's report line; fails, recording nothing,
# when COMMAND fails. COMMAND's own output goes to stderr.
stamp_build() { # OUT SUM COMMAND [ARG...]
    local out="$1" sum="$2"
    shift 2
    if stamp_fresh "$out" "$sum"; then
        echo "up to date"
        return 0
    fi
    local start=$SECONDS
    rm -f "${out%.wasm}.stamp" "$out.tmp"
    "$@" >&2 || return 1
    [[ -f "$out.tmp" ]] || { echo "stamp_build: $* did not write $out.tmp" >&2; return 1; }
    mv "$out.tmp" "$out" || return 1
    printf '%s\n' "$sum" >"${out%.wasm}.stamp" || return 1
    echo "built in $((SECONDS - start)) s"
}
