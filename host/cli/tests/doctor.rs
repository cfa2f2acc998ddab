//! The `ferrocomm doctor` binary: a full report where GPUs exist, NVSHMEM's part, one sentence and a failing
//! exit code where they do not — never a panic.

use std::process::Command;

mod common;
use common::ferrocomm_binary;

#[test]
fn doctor_reports_or_fails_with_one_sentence() {
    let out = Command::new(ferrocomm_binary()).arg("doctor").output().expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "doctor panicked: {stderr}");
    if ferrocomm::system::gpus_available() {
        assert!(out.status.success(), "doctor failed on a GPU machine:\n{stdout}\n{stderr}");
        assert!(stdout.contains("PTX JIT smoke test on GPU 0: ok"), "{stdout}");
        assert!(stdout.contains("sm_"), "{stdout}");
    } else {
        assert!(!out.status.success(), "doctor must fail without a driver or GPU");
        // Before the sentence only NVSHMEM's part, which needs no GPU.
        assert!(stdout.lines().all(|l| l.starts_with("NVSHMEM: ") || l.starts_with("  ")), "{stdout}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one sentence: {stderr}");
        assert!(lines[0].starts_with("ferrocomm doctor: "), "{stderr}");
    }
}

#[test]
fn help_lists_the_doctor() {
    let out = Command::new(ferrocomm_binary()).arg("--help").output().expect("the binary runs");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("doctor"));
}
