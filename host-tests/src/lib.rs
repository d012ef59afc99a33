//! Host-side harness for edgekv: the `edgekv` command line, the host demo session, the snapshot
//! tool, and (in `tests/` and `benches/`) dense references, parity suites and benchmarks. The
//! task runner and the QEMU driver live in `xtask/`.

pub mod cli;
pub mod demo;
pub mod plan;
pub mod snapshot_tool;
