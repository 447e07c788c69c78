fn main() {
    // A 64 KiB shadow stack instead of Rust's default 1 MiB keeps the linear
    // memory small, so a fresh instance per message touches and resets less.
    println!("cargo:rustc-link-arg-cdylib=-zstack-size=65536");
}
