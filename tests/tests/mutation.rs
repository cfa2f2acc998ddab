//! Mutation testing of the shipped kernels' memory ordering (`tools/mutate`, see the README's Testing
//! section), in CI: two of the mutants the committed table (`kernels-rs/collectives/MUTANTS.md`) lists as
//! killed, chosen by the day's seed, must still be killed (a release made relaxed, a wait made relaxed, a
//! fence or a barrier removed) — so a change to the kernels or the suite that stops catching an ordering bug
//! turns CI red; and the table must name only sites the tool still finds, so it cannot go stale silently.
//! The table's survivors are the suite's known gaps; the full run (`tools/mutate --report ...`) re-measures
//! them.
//!
//! Both need cargo and python3, so they skip on the GPU machine (`FERROCOMM_ON_DEVICE=1`), and they skip
//! while the table has not been written. `FERROCOMM_MUTATE_SEED=N` replays a day's sample.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// The ids of the table's rows whose mutant was killed.
fn killed_ids(table: &str) -> Vec<String> {
    table
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("| killed"))
        .filter_map(|l| l.strip_prefix("| `").and_then(|rest| rest.split_once('`')).map(|(id, _)| id.to_owned()))
        .collect()
}

#[test]
fn mutants_the_table_lists_as_killed_are_still_killed() {
    let Some(table) = committed_table() else { return };
    let killed = killed_ids(&table);
    assert!(!killed.is_empty(), "{} lists no killed mutant", table_path().display());
    // A new sample every day, the same all day; the seed is printed for a replay.
    let seed = std::env::var("FERROCOMM_MUTATE_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0));
    // `SAMPLE` of the killed ids, picked by the seed (a multiplicative step through the list).
    let picked: Vec<String> = (0..SAMPLE.min(killed.len()))
        .map(|i| killed[(seed as usize).wrapping_mul(7919).wrapping_add(i * 31) % killed.len()].clone())
        .collect();
    let only = format!("^({})$", picked.iter().map(|id| regex_escape(id)).collect::<Vec<_>>().join("|"));
    let (sample, seed) = (picked.join(", "), seed.to_string());
    // CI's main suite has just run the unmutated tree, so the baseline run is left out; a hang is ended
    // (and counts as killed) after four minutes.
    let out = mutate(&["--worktree", "--only", &only, "--no-baseline-run", "--timeout", "240"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "tools/mutate --only {only} (mutants {sample}; FERROCOMM_MUTATE_SEED={seed} replays the pick): {}\n{stdout}{stderr}",
        if out.status.code() == Some(1) {
            "a mutant MUTANTS.md lists as killed survived: the suite no longer checks that ordering"
        } else {
            "the unmutated snapshot did not build or the tool failed"
        }
    );
}

/// `id` with the regular-expression metacharacters it may hold escaped (ids are `file:function:call#n`).
fn regex_escape(id: &str) -> String {
    id.chars().flat_map(|c| if ".#()[]{}|*+?^$\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}
