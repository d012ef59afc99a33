//! One decode step over 2,048 Q8_0 keys, counted (QEMU `-icount`: SysTick counts instructions),
//! alone: for profiling the attention kernels (`cargo run --release --bin decode-step`). The
//! main firmware runs the same step among the parity cases.
#![no_std]
#![no_main]

#[path = "../arenas.rs"]
mod arenas;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_board_clock as clock;
use static_cell::ConstStaticCell;

static WORK: ConstStaticCell<[f32; edgekv_parity::STEP_WORK_F32]> =
    ConstStaticCell::new([0.0; edgekv_parity::STEP_WORK_F32]);

#[entry]
fn main() -> ! {
    let (Some(cp), Some(psram)) = (cortex_m::Peripherals::take(), arenas::psram()) else {
        semihosting::process::exit(2)
    };
    clock::start(cp.SYST);
    let per_m = clock::calibrate(1_000_000);
    match edgekv_parity::decode_step(psram, WORK.take(), &mut clock::now) {
        Ok(c) => {
            defmt::println!(
                "decode_step keys {=u32} instructions {=u64} crc32 {=u32:08x}",
                edgekv_parity::STEP_KEYS,
                c.ticks * 1_000_000 / per_m.max(1),
                c.crc32
            );
            semihosting::process::exit(0)
        }
        Err(e) => {
            defmt::println!("decode step failed: {}", defmt::Debug2Format(&e));
            semihosting::process::exit(1)
        }
    }
}
