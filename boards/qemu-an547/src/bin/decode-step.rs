//! Decode steps over 2,048 Q8_0 keys, counted (QEMU `-icount`: SysTick counts instructions),
//! alone: for profiling the attention kernels (`cargo run --release --bin decode-step`; add
//! `--features portable` for the portable kernels). One step per model shape of
//! `edgekv_parity::STEP_SHAPES`, or only the one `EDGEKV_SHAPE=q_heads,kv_heads,head_dim` names
//! when the firmware is built. The chat firmware runs SmolLM2-135M's step before its chat.
#![no_std]
#![no_main]

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_board_clock as clock;
use edgekv_parity::{
    STEP_KEYS, STEP_SHAPES_ARENA_BYTES, STEP_SHAPES_WORK_F32, decode_step_of, step_shapes,
};
use static_cell::ConstStaticCell;

#[unsafe(link_section = ".stepram")]
static mut ARENA: [MaybeUninit<u8>; STEP_SHAPES_ARENA_BYTES] =
    [MaybeUninit::uninit(); STEP_SHAPES_ARENA_BYTES];

static WORK: ConstStaticCell<[f32; STEP_SHAPES_WORK_F32]> =
    ConstStaticCell::new([0.0; STEP_SHAPES_WORK_F32]);

#[entry]
fn main() -> ! {
    let (Some(cp), Some(work)) = (cortex_m::Peripherals::take(), WORK.try_take()) else {
        semihosting::process::exit(2)
    };
    // SAFETY: `WORK` was taken just above, which happens once, so this is the only reference to
    // `ARENA` ever made; `MaybeUninit` bytes need no initialization.
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    clock::start(cp.SYST);
    let per_m = clock::calibrate(1_000_000).max(1);
    let mut ran = 0;
    for shape in step_shapes(option_env!("EDGEKV_SHAPE")) {
        match decode_step_of(shape, arena, work, &mut clock::now) {
            Ok(c) => defmt::println!(
                "decode_step {=str} shape {=u16},{=u16},{=u16} keys {=u32} instructions {=u64} crc32 {=u32:08x}",
                shape.model,
                shape.q_heads,
                shape.kv_heads,
                shape.head_dim,
                STEP_KEYS,
                c.ticks * 1_000_000 / per_m,
                c.crc32
            ),
            Err(e) => {
                defmt::println!("decode step failed: {}", defmt::Debug2Format(&e));
                semihosting::process::exit(1)
            }
        }
        ran += 1;
    }
    if ran == 0 {
        defmt::println!("EDGEKV_SHAPE names none of edgekv_parity::STEP_SHAPES");
        semihosting::process::exit(1)
    }
    semihosting::process::exit(0)
}
