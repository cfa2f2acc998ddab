//! The `ferrocomm` command's subcommands, as a library so they can be tested without spawning it.
#![forbid(unsafe_code)]

pub mod doctor;
