//! Mutation testing of the shipped kernels' memory ordering (`tools/mutate`, see docs/testing.md), in CI: two of the
//! mutants the committed table (`kernels-rs/collectives/MUTANTS.md`) lists as killed by a named test, chosen by the
//! commit's seed, must still be killed by that test — it passes on the unmutated tree first, then fails with a panic on
//! each mutant (a hang, a crash, another test failing or a mutant that does not compile is no kill) — so a change to
//! the kernels or the suite that stops catching an ordering bug turns CI red; and the table must name only sites the
//! tool still finds, so it cannot go stale silently. The table's survivors are the suite's known gaps; the full run
//! (`tools/mutate --report ...`) re-measures them.
//!
//! Both need cargo and python3, so they skip on the GPU machine (`FERROCOMM_ON_DEVICE=1`), and they skip while the
//! table has not been written. `FERROCOMM_MUTATE_SEED=N` picks another sample than the commit's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Mutants a CI run builds and tests (40 to 75 s each on two cores, after the snapshot's first build).
const SAMPLE: usize = 2;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn table_path() -> PathBuf {
    workspace_root().join("kernels-rs/collectives/MUTANTS.md")
}

/// The committed table, or `None` (with the reason printed) when the test cannot run here.
fn committed_table() -> Option<String> {
    if std::env::var_os("FERROCOMM_ON_DEVICE").is_some() {
        eprintln!("skipped: needs cargo, and FERROCOMM_ON_DEVICE=1 says this machine has none");
        return None;
    }
    match std::fs::read_to_string(table_path()) {
        Ok(text) => Some(text),
        Err(_) => {
            eprintln!(
                "skipped: {} has not been written yet (tools/mutate --report kernels-rs/collectives/MUTANTS.md)",
                table_path().display()
            );
            None
        }
    }
}

/// The site ids of the table's rows (`| \`id\` (file:line) | ...`) and of its accepted survivors
/// (`- \`id\`: reason`).
fn table_ids(table: &str) -> Vec<String> {
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `").or_else(|| l.strip_prefix("- `")))
        .filter_map(|rest| rest.split_once('`').map(|(id, _)| id.to_owned()))
        .collect()
}

fn mutate(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg(workspace_root().join("tools/mutate"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("python3 runs tools/mutate")
}

#[test]
fn the_table_names_only_sites_the_tool_finds() {
    let Some(table) = committed_table() else { return };
    let out = mutate(&["--list", "--worktree"]);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tools/mutate --list failed:\n{listing}{}", String::from_utf8_lossy(&out.stderr));
    let found: Vec<&str> =
        listing.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split('\t').next()).collect();
    let ids = table_ids(&table);
    assert!(!ids.is_empty(), "{} lists no site", table_path().display());
    let stale: Vec<&String> = ids.iter().filter(|id| !found.contains(&id.as_str())).collect();
    assert!(
        stale.is_empty(),
        "{} names sites that tools/mutate --list no longer finds (the kernels changed: rerun \
         `tools/mutate --report kernels-rs/collectives/MUTANTS.md`):\n{stale:#?}",
        table_path().display()
    );
}

/// A row of the table whose mutant a named test killed: its site id, and the binary and test that killed it
/// (`| \`id\` (...) | ... | killed by \`binary\` \`test\` ...`). Rows killed by a hang or a crash are left out:
/// CI's check is a named test failing with its assertion.
#[derive(Debug, Clone)]
struct KilledRow {
    id: String,
    binary: String,
    test: String,
}

fn killed_rows(table: &str) -> Vec<KilledRow> {
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let id = l.strip_prefix("| `")?.split_once('`')?.0.to_owned();
            let killed = l.split_once("| killed by `")?.1;
            let (binary, rest) = killed.split_once("` `")?;
            let test = rest.split_once('`')?.0;
            Some(KilledRow { id, binary: binary.to_owned(), test: test.to_owned() })
        })
        .collect()
}

/// `package:binary` of each binary of the table's suite (its `Suite:` line).
fn suite_packages(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .filter_map(|l| l.split_once("Suite: "))
        .flat_map(|(_, list)| list.split(", ").map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|item| {
            let item = item.trim().trim_end_matches('.').trim_matches('`');
            item.split_once(':').map(|(p, b)| (p.to_owned(), b.to_owned()))
        })
        .collect()
}

/// The sample's seed: the commit's (its id's first 16 hex digits), so a commit is always checked with the
/// same mutants and a red run replays; `FERROCOMM_MUTATE_SEED=N` picks another.
fn seed() -> u64 {
    if let Some(seed) = std::env::var("FERROCOMM_MUTATE_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        return seed;
    }
    let head = Command::new("git").args(["rev-parse", "HEAD"]).current_dir(workspace_root()).output();
    let id = head.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    id.and_then(|id| u64::from_str_radix(id.get(..16)?, 16).ok()).unwrap_or(0)
}

#[test]
fn mutants_the_table_lists_as_killed_are_still_killed() {
    let Some(table) = committed_table() else { return };
    let rows = killed_rows(&table);
    assert!(!rows.is_empty(), "{} lists no mutant a named test killed", table_path().display());
    let packages = suite_packages(&table);
    let seed = seed();
    // `SAMPLE` of the rows, picked by the seed (a multiplicative step through the list).
    let mut picked: Vec<KilledRow> = Vec::new();
    for i in 0..SAMPLE.min(rows.len()) {
        let row = &rows[(seed as usize).wrapping_mul(7919).wrapping_add(i * 31) % rows.len()];
        if !picked.iter().any(|p| p.id == row.id) {
            picked.push(row.clone());
        }
    }
    let only = format!("^({})$", picked.iter().map(|r| regex_escape(&r.id)).collect::<Vec<_>>().join("|"));
    let mut suite: Vec<String> = Vec::new();
    for row in &picked {
        let package = packages.iter().find(|(_, b)| *b == row.binary).map(|(p, _)| p.clone());
        let package = package.unwrap_or_else(|| panic!("the table's Suite line does not name binary {}", row.binary));
        let entry = format!("{package}:{}", row.binary);
        if !suite.contains(&entry) {
            suite.push(entry);
        }
    }
    let tests: Vec<&str> = picked.iter().map(|r| r.test.as_str()).collect();
    let json = std::env::temp_dir().join(format!("ferrocomm-mutants-{}.json", std::process::id()));
    // The baseline runs the named tests on the unmutated tree first (a test that already fails there
    // proves nothing); each mutant then runs them, and must fail one of them with a panic. A hang is no kill.
    let out = mutate(&[
        "--worktree",
        "--only",
        &only,
        "--suite",
        &suite.join(","),
        "--tests",
        &tests.join(","),
        "--json",
        json.to_str().expect("a UTF-8 temporary path"),
        "--timeout",
        "240",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let replay = format!("mutants {picked:?}; FERROCOMM_MUTATE_SEED={seed} replays the pick");
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "tools/mutate could not measure ({replay}): the unmutated snapshot did not build, or a named test failed \
         on it\n{stdout}{stderr}"
    );
    let results: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("tools/mutate wrote its JSON")).expect("JSON");
    let _ = std::fs::remove_file(&json);
    for row in &picked {
        let m = results.iter().find(|m| m["id"] == row.id.as_str()).unwrap_or_else(|| panic!("{} was not run", row.id));
        let (status, panic) = (m["status"].as_str().unwrap_or(""), m["panic"].as_str().unwrap_or(""));
        let failed: Vec<&str> = m["tests"].as_array().into_iter().flatten().filter_map(|t| t.as_str()).collect();
        assert!(
            status == "killed" && failed.contains(&row.test.as_str()) && !panic.is_empty(),
            "{}: MUTANTS.md says `{}` `{}` kills it, but here it {status} ({failed:?}; {panic:?}): the suite no longer \
             checks that ordering, or the table is stale ({replay})\n{stdout}{stderr}",
            row.id,
            row.binary,
            row.test
        );
    }
}

/// `id` with the regular-expression metacharacters it may hold escaped (ids are `file:function:call#n`).
fn regex_escape(id: &str) -> String {
    id.chars().flat_map(|c| if ".#()[]{}|*+?^$\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}
