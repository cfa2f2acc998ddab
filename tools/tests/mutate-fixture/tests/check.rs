use std::sync::atomic::{AtomicU64, Ordering};

use mutate_fixture::device::Flag;

#[test]
fn publish_is_seen() {
    let flag = Flag(AtomicU64::new(0));
    mutate_fixture::publish(&flag, 7);
    assert_eq!(flag.0.load(Ordering::SeqCst), 7, "the published value");
}

#[test]
fn count_counts() {
    let flag = Flag::default();
    mutate_fixture::count(&flag);
    assert_eq!(flag.0.load(Ordering::SeqCst), 1, "one count");
}

#[test]
fn read_is_seen() {
    assert_eq!(mutate_fixture::read(&Flag(AtomicU64::new(5))), 5, "the value read");
}

#[test]
fn await_is_seen() {
    assert_eq!(mutate_fixture::await_flag(&Flag(AtomicU64::new(3))), 3, "the awaited value");
}

#[test]
fn fails_unmutated() {
    panic!("this test fails on the unmutated tree");
}
