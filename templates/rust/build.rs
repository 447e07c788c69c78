fn main() {
    // A 64 KiB stack instead of Rust's default 1 MiB keeps linear memory
    // small, which makes a fresh instance per message cheaper. Remove this
    // line if the handler recurses deeply.
    println!("cargo:rustc-link-arg-cdylib=-zstack-size=65536");
}
