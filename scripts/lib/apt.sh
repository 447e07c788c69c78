# shellcheck shell=bash
# Installing Debian packages the scripts need, with apt-get, through sudo
# unless this is root. Errors name the calling script.

# apt_install PACKAGE...
apt_install() {
    local sudo=() me
    me="$(basename "$0")"
    if [[ "$(id -u)" -ne 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "$me: $* missing and this is not root; install it with: apt-get install -y $*" >&2
            exit 1
        fi
        sudo=(sudo)
    fi
    echo "installing $* with apt-get"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Install Debian packages unless the command each provides is there
# already: apt_need COMMAND PACKAGE...
apt_need() {
    local cmd="$1"
    shift
    if command -v "$cmd" >/dev/null 2>&1; then
        return
    fi
    apt_install "$@"
    command -v "$cmd" >/dev/null 2>&1 || {
        echo "$(basename "$0"): apt-get installed $* but $cmd is not on PATH" >&2
        exit 1
    }
}

# What building the host needs beside the Rust toolchain: a C compiler
# (wasmtime's and ring's C parts) and make (jemalloc, the host's
# allocator, is built with its configure script and make).
need_build_tools() {
    apt_need cc build-essential
    apt_need make build-essential
}
