//! What the `ferrocomm` command's tests share.

use std::path::PathBuf;

/// The built `ferrocomm` binary: cargo's path, or, where the tests were copied to another machine without
/// cargo, the `bin/` folder beside the test executable's folder.
pub fn ferrocomm_binary() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_ferrocomm"));
    if built.is_file() {
        return built;
    }
    let exe = std::env::current_exe().expect("the test knows its own path");
    let staged = exe.parent().and_then(|d| d.parent()).map(|d| d.join("bin/ferrocomm"));
    staged
        .filter(|p| p.is_file())
        .unwrap_or_else(|| panic!("no ferrocomm binary at {} or beside the tests", built.display()))
}
