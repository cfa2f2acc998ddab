//! `#[kernel]` and friends.
