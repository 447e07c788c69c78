//! The SDK carries its own copy of the WIT it targets, so it builds where it
//! is published or copied to. Inside the sluice repository that copy must be
//! the repository's `wit/handler.wit`, byte for byte.

use std::path::Path;

#[test]
fn the_wit_is_the_repositorys() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = sdk.join("../../wit/handler.wit");
    if !repo.exists() {
        eprintln!(
            "not inside the sluice repository ({} is missing): nothing to compare",
            repo.display()
        );
        return;
    }
    let ours = std::fs::read(sdk.join("wit/handler.wit")).unwrap();
    let theirs = std::fs::read(&repo).unwrap();
    assert!(
        ours == theirs,
        "sdk/rust/wit/handler.wit differs from wit/handler.wit: copy it over \
         (cp wit/handler.wit sdk/rust/wit/handler.wit) and give the SDK the version of the WIT"
    );
}

#[test]
fn the_crate_version_is_the_wits() {
    let wit = include_str!("../wit/handler.wit");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        wit.contains(&format!("package sluice:handler@{version};")),
        "sluice-sdk {version} must target the WIT of that version"
    );
}
