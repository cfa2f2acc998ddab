//! The runtime's and the device library's modules form layers: `tools/import-graph` finds no import cycle
//! among the top-level modules of `host/runtime` or of `kernels-rs/device` (docs/architecture.md names the
//! layers and the seams). The tool itself is checked on a crate made to
//! have a cycle, so a pass here is not a tool that finds none.

use std::path::Path;
use std::process::{Command, Output};

use ferrocomm_tests::workspace_root;

fn import_graph(crate_dir: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(workspace_root().join("tools/import-graph"))
        .arg(crate_dir)
        .args(args)
        .output()
        .expect("python3 runs tools/import-graph")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_runtime_has_no_import_cycle() {
    let out = import_graph(&workspace_root().join("host/runtime"), &["--acyclic"]);
    assert!(
        out.status.success(),
        "host/runtime's top-level modules import each other in a cycle (a core module imports a backend or \
         the API above it?):\n{}",
        text(&out)
    );
}

#[test]
fn the_device_library_has_no_import_cycle() {
    let out = import_graph(&workspace_root().join("kernels-rs/device"), &["--acyclic"]);
    assert!(
        out.status.success(),
        "kernels-rs/device's top-level modules import each other in a cycle (it reaches the emulator only \
         through `ferrocomm_emu::lower`, which imports nothing of it):\n{}",
        text(&out)
    );
}

/// A crate of three modules: `a` and `b` import each other (through a `use` and through a path in code),
/// `c` names `a` only in a comment and a string, which are no imports.
fn crate_with_a_cycle() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::{b::Thing, c};\npub struct Other;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\npub struct Thing;\n").unwrap();
    std::fs::write(src.join("b/inner.rs"), "fn f() -> crate::a::Other { crate::a::Other }\n").unwrap();
    std::fs::write(src.join("c.rs"), "//! See [`crate::a::Other`].\nconst S: &str = \"crate::a\";\n").unwrap();
    dir
}

#[test]
fn the_tool_finds_a_cycle_and_the_files_that_make_it() {
    let dir = crate_with_a_cycle();
    let out = import_graph(dir.path(), &["--acyclic"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("cycle of 2 modules: a, b"), "{said}");
    assert!(said.contains("a -> b: a.rs") && said.contains("b -> a: b/inner.rs"), "{said}");
}

#[test]
fn comments_and_strings_are_no_imports() {
    let dir = crate_with_a_cycle();
    let out = import_graph(dir.path(), &[]);
    let said = text(&out);
    assert!(out.status.success(), "without --acyclic a cycle is reported, not an error:\n{said}");
    assert!(said.lines().any(|l| l == "c -> (nothing)"), "{said}");
    assert!(said.lines().any(|l| l == "a -> b, c"), "{said}");
}

#[test]
fn super_paths_that_climb_to_the_root_are_imports() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    // `super::` in a top-level module's file is the root; in `b/inner.rs` it is `b`, two of them the root.
    std::fs::write(src.join("a.rs"), "use super::b::Thing;\npub struct Other;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\npub struct Thing;\n").unwrap();
    std::fs::write(src.join("b/inner.rs"), "use super::Thing;\nfn f() -> super::super::a::Other { todo!() }\n")
        .unwrap();
    let out = import_graph(dir.path(), &["--acyclic"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("a -> b: a.rs") && said.contains("b -> a: b/inner.rs"), "{said}");
}
