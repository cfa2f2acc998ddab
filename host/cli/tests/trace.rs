//! `ferrocomm trace FILE [--svg OUT]` as a user runs it: the summary on stdout, the SVG written, and a file
//! that is not a trace refused with a message and a failing status.

mod common;

use std::process::Command;

const TRACE: &str = r#"{"traceEvents": [
  {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0 (emulated GPU 0)"}},
  {"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 3.0, "name": "put 4096 B → rank 1",
   "args": {"kind": "put", "bytes": 4096, "peer": 1}},
  {"ph": "X", "pid": 0, "tid": 0, "ts": 3.0, "dur": 5.0, "name": "wait", "args": {"kind": "wait"}},
  {"ph": "X", "pid": 1, "tid": 0, "ts": 1.0, "dur": 1.0, "name": "put 4096 B → rank 0",
   "args": {"kind": "put", "bytes": 4096, "peer": 0}}
], "displayTimeUnit": "ns"}"#;

#[test]
fn sums_up_a_trace_and_draws_its_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let (file, svg) = (dir.path().join("t.json"), dir.path().join("t.svg"));
    std::fs::write(&file, TRACE).unwrap();
    let out = Command::new(common::ferrocomm_binary()).arg("trace").arg(&file).arg("--svg").arg(&svg).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("2 rank(s)"), "{stdout}");
    assert!(stdout.contains("waiting 5.0 µs (62%), moving data 3.0 µs (38%)"), "{stdout}");
    assert!(stdout.contains("bytes put: rank 1: 4 KiB"), "{stdout}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("rank 1 block 0"));
}

#[test]
fn a_file_that_is_not_a_trace_fails_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(&file, "[1, 2]").unwrap();
    let out = Command::new(common::ferrocomm_binary()).arg("trace").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("ferrocomm trace:") && stderr.contains("no `traceEvents` array"), "{stderr}");
}
