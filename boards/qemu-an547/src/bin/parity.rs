//! The parity cases on the Cortex-M55 (Helium kernels), each digest printed for the host to
//! compare with its own (`host-tests/tests/board_parity.rs`): every page format, prefix reuse,
//! chunked prefill, windows and forks, as the Cortex-M4 firmware runs them, with the stack's
//! high-water mark per case and per kind of call. Exits through
//! semihosting: 0 when every case ran, 1 otherwise.
#![no_std]
#![no_main]

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_board_stack::{self as stack, Marks};
use edgekv_parity::{Arenas, CASES, DATA_BYTES, META_BYTES, TINY_CASES, WORK_F32};
use static_cell::ConstStaticCell;

#[unsafe(link_section = ".kvram")]
static mut DATA: [MaybeUninit<u8>; DATA_BYTES] = [MaybeUninit::uninit(); DATA_BYTES];

static META: ConstStaticCell<[MaybeUninit<u8>; META_BYTES]> =
    ConstStaticCell::new([MaybeUninit::uninit(); META_BYTES]);
static WORK: ConstStaticCell<[f32; WORK_F32]> = ConstStaticCell::new([0.0; WORK_F32]);

#[entry]
fn main() -> ! {
    let (Some(meta), Some(work)) = (META.try_take(), WORK.try_take()) else {
        semihosting::process::exit(2)
    };
    // SAFETY: `WORK` was taken just above, which happens once, so this is the only reference to
    // `DATA` ever made; `MaybeUninit` bytes need no initialization.
    let data = unsafe { &mut *addr_of_mut!(DATA) };
    let mut arenas = Arenas { data, meta, work };
    let mut failed = 0u32;
    let mut marks = Marks::<48>::new();
    for &case in CASES {
        let (result, deepest) = stack::laps(&mut marks, |lap| {
            edgekv_parity::run(case, &mut arenas, &mut |e| {
                let (kind, detail) = e.call(case);
                lap(kind, detail)
            })
        });
        defmt::println!("stack {=u32} B: case {=str}", deepest, case.name());
        match result {
            Ok(d) => defmt::println!("case {=str} crc32 {=u32:08x}", d.name(), d.crc32),
            Err(e) => {
                failed += 1;
                defmt::println!(
                    "case {=str} failed: {}",
                    case.name(),
                    defmt::Debug2Format(&e)
                );
            }
        }
    }
    // The stored pages of the cases with subnormal inputs.
    for &case in TINY_CASES {
        match edgekv_parity::stored_pages(case, &mut arenas) {
            Ok(crc) => defmt::println!("pages {=str} crc32 {=u32:08x}", case.name(), crc),
            Err(e) => {
                failed += 1;
                defmt::println!("pages {=str} failed: {}", case.name(), defmt::Debug2Format(&e));
            }
        }
    }
    defmt::println!("parity: {=usize} cases, {=u32} failed", CASES.len(), failed);
    marks.log();
    semihosting::process::exit(if failed == 0 { 0 } else { 1 })
}
