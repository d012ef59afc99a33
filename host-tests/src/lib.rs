//! Host-side harness for edgekv: the task runner (`cargo xtask`), the host demo, and (as the
//! project grows) dense references, parity suites and the QEMU driver.
