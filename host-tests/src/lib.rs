//! Host-side harness for edgekv: the task runner (`cargo xtask`), the demo session, and (as the
//! project grows) dense references, parity suites and the QEMU driver.

pub mod cli;
pub mod demo;
pub mod qemu;
pub mod size;
pub mod snapshot_tool;
