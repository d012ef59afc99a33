//! Deterministic attention parity cases, written once in `no_std` Rust: host-tests runs them
//! against a dense reference, board firmware runs the very same cases and prints their digests.
#![no_std]
