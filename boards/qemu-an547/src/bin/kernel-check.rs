//! The kernel check (`edgekv::kernel_check`): every Arm kernel of this build against the portable
//! one on random inputs of every supported shape, each differing kernel and shape printed
//! (`kernel_check mismatch …`), then `kernel_check compared N declined N mismatches N`; the exit
//! code is nonzero on any mismatch. `cargo run --release --bin kernel-check`; CI runs it
//! (`host-tests/tests/board_parity.rs`).
#![no_std]
#![no_main]

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;

static WORK: static_cell::ConstStaticCell<[u64; edgekv::kernel_check::WORK_WORDS]> =
    static_cell::ConstStaticCell::new([0; edgekv::kernel_check::WORK_WORDS]);

#[entry]
fn main() -> ! {
    {
        let Some(work) = WORK.try_take() else {
            semihosting::process::exit(2)
        };
        let sum = edgekv::kernel_check::run(work, &mut |m| {
            defmt::println!(
                "kernel_check mismatch {=str} run {=u8} head_dim {=u16} group {=u16} rows {=u16}",
                m.kernel,
                m.run,
                m.head_dim,
                m.group,
                m.rows
            )
        });
        let Some(sum) = sum else {
            semihosting::process::exit(2)
        };
        defmt::println!(
            "kernel_check compared {=u32} declined {=u32} mismatches {=u32}",
            sum.compared,
            sum.declined,
            sum.mismatches
        );
        semihosting::process::exit(i32::from(sum.mismatches != 0))
    }
}
