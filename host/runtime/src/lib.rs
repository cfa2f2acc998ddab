//! The ferrocomm host runtime.
