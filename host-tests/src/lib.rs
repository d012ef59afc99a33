//! Host-side harness for edgekv: the host demo session (`examples/host_demo.rs`), and (in
//! `tests/` and `benches/`) dense references, parity suites, the C ABI and board tests, and
//! benchmarks. The `edgekv` command line is the `edgekv-cli` crate (`cli/`); the task runner and
//! the QEMU driver live in `xtask/`.

pub mod demo;
