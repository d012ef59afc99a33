//! The matmul kernel check (`edgekv_llm::matmul::kernel_check`): every DSP matmul kernel of
//! this build (Cortex-M4: `SMLAD`) against the portable dot products on random rows and edge
//! values, each differing kernel and shape printed (`matmul_check mismatch …`), then
//! `matmul_check kernels … compared N declined N mismatches N`; the exit code is nonzero on any
//! mismatch; then the digest of the f32 loops on subnormal inputs
//! (`subnormal_check::subnormal_digest`) and the host's. `cargo run --release --bin
//! matmul-check`; CI runs it
//! (`host-tests/tests/board_matmul.rs`).
#![no_std]
#![no_main]

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_llm::matmul::{kernel_check, kernels};
use edgekv_llm::subnormal_check;

static WORK: static_cell::ConstStaticCell<kernel_check::Work> =
    static_cell::ConstStaticCell::new(kernel_check::Work::new());

#[entry]
fn main() -> ! {
    let Some(work) = WORK.try_take() else {
        semihosting::process::exit(2)
    };
    let sum = kernel_check::run(work, &mut |m| {
        defmt::println!(
            "matmul_check mismatch {=str} {=str} {=str} cols {=u16} rows {=u16} acts {=u16} at {=u16}",
            m.entry,
            m.ty,
            m.case.name(),
            m.cols,
            m.rows,
            m.acts,
            m.at
        )
    });
    defmt::println!(
        "matmul_check kernels {=str} compared {=u32} declined {=u32} mismatches {=u32}",
        kernels().unwrap_or("portable"),
        sum.compared,
        sum.declined,
        sum.mismatches
    );
    // The f32 loops around the matmuls on subnormal inputs: the host's bits.
    let subnormal = subnormal_check::subnormal_digest(work);
    defmt::println!(
        "matmul_check subnormal crc {=u32:08x} host {=u32:08x}",
        subnormal,
        subnormal_check::SUBNORMAL_DIGEST
    );
    // A different subnormal digest is reported (the host test compares and names the part),
    // not an exit code.
    semihosting::process::exit(i32::from(sum.mismatches != 0))
}
