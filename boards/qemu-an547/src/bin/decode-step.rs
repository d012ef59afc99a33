//! One decode step over 2,048 Q8_0 keys, counted (QEMU `-icount`: SysTick counts
//! instructions), alone: for profiling the attention kernels (`cargo run --release --bin
//! decode-step`). The chat firmware runs the same step before its chat.
#![no_std]
#![no_main]

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_board_clock as clock;
use edgekv_parity::{STEP_ARENA_BYTES, STEP_WORK_F32};
use static_cell::ConstStaticCell;

#[unsafe(link_section = ".kvram")]
static mut ARENA: [MaybeUninit<u8>; STEP_ARENA_BYTES] = [MaybeUninit::uninit(); STEP_ARENA_BYTES];

static WORK: ConstStaticCell<[f32; STEP_WORK_F32]> = ConstStaticCell::new([0.0; STEP_WORK_F32]);

#[entry]
fn main() -> ! {
    let (Some(cp), Some(work)) = (cortex_m::Peripherals::take(), WORK.try_take()) else {
        semihosting::process::exit(2)
    };
    // SAFETY: `WORK` was taken just above, which happens once, so this is the only reference to
    // `ARENA` ever made; `MaybeUninit` bytes need no initialization.
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    clock::start(cp.SYST);
    let per_m = clock::calibrate(1_000_000);
    match edgekv_parity::decode_step(arena, work, &mut clock::now) {
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
