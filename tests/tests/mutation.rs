//! Mutation testing of the shipped kernels' memory ordering (`tools/mutate`, see docs/testing.md).
//!
//! - Every committed table (`MUTANTS.md` of the collectives, the device library, the NVSHMEM kernels and the
//!   custom-kernel example) is of today's sources: the digest in its header is the digest of the files it
//!   mutated, and it names only sites the tool still finds. A kernel changed without a fresh table turns
//!   this red.
//! - CI's sample (`tools/mutate --ci-sample`, run by `.ci/run` after `cargo test`, in place) cannot pass
//!   vacuously: on a small tree laid out like this one (`tools/tests/mutate-fixture`), a mutant killed by
//!   its named test passes the check, and a mutant that does not compile, a named test that fails (or does
//!   not exist) on the unmutated tree, and a mutant that only hangs each fail it, with the reason.
//!
//! All need cargo and python3, so they skip on the GPU machine (`FERROCOMM_ON_DEVICE=1`).

use std::path::Path;
use std::process::{Command, Output};

use ferrocomm_tests::workspace_root;

/// The targets of `tools/mutate` and their tables.
const TABLES: &[(&str, &str)] = &[
    ("collectives", "kernels-rs/collectives/MUTANTS.md"),
    ("device", "kernels-rs/device/MUTANTS.md"),
    ("nvshmem", "kernels-rs/nvshmem/MUTANTS.md"),
    ("custom-kernel", "examples/custom_kernel/MUTANTS.md"),
];

fn on_device() -> bool {
    let skip = std::env::var_os("FERROCOMM_ON_DEVICE").is_some();
    if skip {
        eprintln!("skipped: needs cargo, and FERROCOMM_ON_DEVICE=1 says this machine has none");
    }
    skip
}

fn mutate(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(workspace_root().join("tools/mutate"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("python3 runs tools/mutate")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The site ids of a table's rows (`| \`id\` (file:line) | ...`) and of its accepted survivors
/// (`- \`id\`: reason`).
fn table_ids(table: &str) -> Vec<String> {
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `").or_else(|| l.strip_prefix("- `")))
        .filter_map(|rest| rest.split_once('`').map(|(id, _)| id.to_owned()))
        .collect()
}

#[test]
fn every_table_is_of_its_sources() {
    if on_device() {
        return;
    }
    let mut missing = Vec::new();
    for &(target, path) in TABLES {
        let Ok(table) = std::fs::read_to_string(workspace_root().join(path)) else {
            missing.push(path);
            continue;
        };
        let digest = mutate(&["--target", target, "--digest", "--worktree"]);
        assert!(digest.status.success(), "tools/mutate --digest failed:\n{}", text(&digest));
        let digest = String::from_utf8_lossy(&digest.stdout).trim().to_owned();
        let written = table.split_once("Sources: `").and_then(|(_, rest)| rest.split_once('`')).map(|(d, _)| d);
        assert_eq!(
            written,
            Some(digest.as_str()),
            "{path} was not written from today's sources of `{target}` (its digest differs, or it has none): the \
             kernels changed since; rerun `tools/mutate --target {target} --report`"
        );
        let listing = mutate(&["--target", target, "--list", "--worktree"]);
        assert!(listing.status.success(), "tools/mutate --list failed:\n{}", text(&listing));
        let listing = String::from_utf8_lossy(&listing.stdout);
        let found: Vec<&str> =
            listing.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split('\t').next()).collect();
        let ids = table_ids(&table);
        assert!(!ids.is_empty(), "{path} lists no site");
        let stale: Vec<&String> = ids.iter().filter(|id| !found.contains(&id.as_str())).collect();
        assert!(stale.is_empty(), "{path} names sites that tools/mutate --list no longer finds:\n{stale:#?}");
    }
    if !missing.is_empty() {
        eprintln!("no table yet (tools/mutate --target NAME --report writes one): {missing:?}");
    }
}

/// A copy of the fixture tree with a table of one row: `site`, killed by `test` of its `check` binary.
fn fixture_with_row(site: &str, test: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let from = workspace_root().join("tools/tests/mutate-fixture");
    copy_tree(&from, dir.path());
    // The workspace's pinned toolchain, which is the one installed where no default is.
    std::fs::copy(workspace_root().join("rust-toolchain.toml"), dir.path().join("rust-toolchain.toml")).unwrap();
    let table = format!(
        "# Mutants of the fixture\n\nSources: `none`. Suite: `mutate-fixture:check`.\n\n| site | operator | before → after | \
         result |\n| --- | --- | --- | --- |\n| `{site}` (lib.rs:1) | planted | `a` → `b` | killed by `check` `{test}` |\n"
    );
    std::fs::write(dir.path().join("kernels-rs/collectives/MUTANTS.md"), table).unwrap();
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "target" {
                copy_tree(&src, &dst);
            }
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// CI's sample of one row on the fixture: (passed, output).
fn ci_sample_on_fixture(site: &str, test: &str) -> (bool, String) {
    let dir = fixture_with_row(site, test);
    let root = dir.path().to_str().expect("a UTF-8 temporary path");
    let out = mutate(&["--root", root, "--ci-sample", "1", "--seed", "0", "--timeout", "5"]);
    let source = std::fs::read_to_string(dir.path().join("kernels-rs/collectives/src/lib.rs")).unwrap();
    assert!(
        source.contains("flag.set_release(v);") && source.contains("flag.load_acquire()"),
        "a mutant was left in place"
    );
    (out.status.success(), text(&out))
}

#[test]
fn the_ci_sample_passes_a_mutant_its_named_test_kills() {
    if on_device() {
        return;
    }
    let (passed, out) = ci_sample_on_fixture("lib.rs:publish:set_release#1/relaxed", "publish_is_seen");
    assert!(passed, "a mutant killed by its named test must pass the check:\n{out}");
    assert!(out.contains("killed by publish_is_seen") && out.contains("the published value"), "{out}");
}

#[test]
fn the_ci_sample_fails_on_a_mutant_that_does_not_compile() {
    if on_device() {
        return;
    }
    let (passed, out) = ci_sample_on_fixture("lib.rs:count:add_release#1/relaxed", "count_counts");
    assert!(!passed && out.contains("did not compile"), "a mutant that does not build measures nothing:\n{out}");
}

#[test]
fn the_ci_sample_fails_without_a_passing_baseline() {
    if on_device() {
        return;
    }
    let (passed, out) = ci_sample_on_fixture("lib.rs:publish:set_release#1/relaxed", "fails_unmutated");
    assert!(
        !passed && out.contains("does not pass on the unmutated tree"),
        "a test failing unmutated proves nothing:\n{out}"
    );
    let (passed, out) = ci_sample_on_fixture("lib.rs:publish:set_release#1/relaxed", "no_such_test");
    assert!(!passed && out.contains("ran none of no_such_test"), "a test that does not exist proves nothing:\n{out}");
}

#[test]
fn the_ci_sample_fails_on_a_kill_by_a_hang() {
    if on_device() {
        return;
    }
    let (passed, out) = ci_sample_on_fixture("lib.rs:read:load_acquire#1/relaxed", "read_is_seen");
    assert!(!passed && out.contains("a hang is no kill"), "a mutant that only hangs is not the table's kill:\n{out}");
}

#[test]
fn a_kill_by_the_tests_watchdog_is_a_kill() {
    if on_device() {
        return;
    }
    // The mutant's test fails after 3 s of the 5 s budget and again, on its own, after 3 s more: each run
    // has a whole budget, so the second is not cut short into a "hang".
    let (passed, out) = ci_sample_on_fixture("lib.rs:await_flag:wait_acquire#1/relaxed", "await_is_seen");
    assert!(passed && out.contains("killed by await_is_seen") && out.contains("the watchdog"), "{out}");
}

#[test]
fn the_hang_budget_outlasts_the_emulated_watchdog() {
    // A deadlocked mutant fails by the team's wait timeout; tools/mutate must give it time to.
    let tool = std::fs::read_to_string(workspace_root().join("tools/mutate")).unwrap();
    let grace: u64 = tool
        .lines()
        .find_map(|l| l.strip_prefix("HANG_GRACE_S = "))
        .and_then(|v| v.trim().parse().ok())
        .expect("tools/mutate sets HANG_GRACE_S = <seconds>");
    let watchdog = ferrocomm_tests::EMULATED_LIMIT.as_secs();
    assert!(grace >= watchdog + 20, "HANG_GRACE_S = {grace} s leaves a {watchdog} s watchdog too little time");
    // The tool shortens the suites' waits (FERROCOMM_TEST_WAIT_LIMIT_S) to seconds, not to nothing: correct
    // launches of a loaded machine must still finish inside it.
    let wait: u64 = tool
        .lines()
        .find_map(|l| l.strip_prefix("WAIT_LIMIT_S = "))
        .and_then(|v| v.trim().parse().ok())
        .expect("tools/mutate sets WAIT_LIMIT_S = <seconds>");
    assert!((20..watchdog).contains(&wait), "WAIT_LIMIT_S = {wait} s: between 20 s and the {watchdog} s watchdog");
    assert!(
        tool.contains(ferrocomm_tests::WAIT_LIMIT_ENV),
        "tools/mutate hands its runs {}",
        ferrocomm_tests::WAIT_LIMIT_ENV
    );
}

#[test]
fn the_ci_sample_fails_on_a_site_the_tool_no_longer_finds() {
    if on_device() {
        return;
    }
    let (passed, out) = ci_sample_on_fixture("lib.rs:publish:set_release#2/relaxed", "publish_is_seen");
    assert!(!passed && out.contains("no longer finds it"), "{out}");
}

#[test]
fn the_ci_sample_draws_only_from_the_rows_named_by_only() {
    if on_device() {
        return;
    }
    // Nothing is built: the filter leaves no row, which is an error, not a check that passed.
    let dir = fixture_with_row("lib.rs:publish:set_release#1/relaxed", "publish_is_seen");
    let root = dir.path().to_str().expect("a UTF-8 temporary path");
    let out = mutate(&["--root", root, "--ci-sample", "1000", "--only", "^queue[.]rs:"]);
    let out_text = text(&out);
    assert!(!out.status.success() && out_text.contains("whose id matches '^queue[.]rs:'"), "{out_text}");
}

#[test]
fn marking_accepted_survivors_changes_only_their_cells() {
    if on_device() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("kernels-rs/collectives/MUTANTS.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rows = "| site | operator | before → after | result |\n| --- | --- | --- | --- |\n\
                | `a.rs:f:quiet#1/removed` (a.rs:3) | quiet removed | `x` → (line removed) | **survived** |\n\
                | `a.rs:f:quiet#2/removed` (a.rs:4) | quiet removed | `y` → (line removed) | **survived** |\n\
                | `a.rs:g:set_release#1/relaxed` (a.rs:9) | release → relaxed | `s` → `t` | killed by `check` `t1` |\n";
    let table = |accepted: &str| format!("# Mutants\n\n{rows}\n## Accepted survivors\n\n{accepted}");
    let root = dir.path().to_str().expect("a UTF-8 temporary path");

    std::fs::write(&path, table("- `a.rs:f:quiet#1/removed`: the token's drop quiets.\n")).unwrap();
    let out = mutate(&["--root", root, "--mark-accepted"]);
    assert!(!out.status.success(), "a survivor without a reason must fail:\n{}", text(&out));
    assert!(text(&out).contains("SURVIVED a.rs:f:quiet#2/removed"), "{}", text(&out));
    let marked = std::fs::read_to_string(&path).unwrap();
    assert!(marked.contains(
        "| `a.rs:f:quiet#1/removed` (a.rs:3) | quiet removed | `x` → (line removed) | **survived** (accepted) |"
    ));
    assert!(
        marked.contains("| `a.rs:f:quiet#2/removed` (a.rs:4) | quiet removed | `y` → (line removed) | **survived** |")
    );
    assert!(marked.contains("| killed by `check` `t1` |"), "a kill's cell must not change:\n{marked}");

    std::fs::write(&path, table("- `a.rs:f:quiet#1/removed`: drop.\n- `a.rs:f:quiet#2/removed`: drop.\n")).unwrap();
    let out = mutate(&["--root", root, "--mark-accepted"]);
    assert!(out.status.success(), "every survivor accepted:\n{}", text(&out));
    let marked = std::fs::read_to_string(&path).unwrap();
    assert_eq!(marked.matches("**survived** (accepted)").count(), 2, "{marked}");
}
