//! edgekv on QEMU mps2-an386 (Cortex-M4F): runs the parity cases (the host compares their digests
//! with its own), restores a system prompt's KV from a snapshot image the host wrote (in flash)
//! and decodes after it, counts the instructions of one decode step over 2,048 Q8_0 keys (QEMU
//! `-icount`: SysTick counts instructions), then a multi-turn demo session, logging through defmt
//! over semihosting, with the stack's high-water mark per case and per kind of call
//! (`edgekv-board-stack`: the stack painted before each step and scanned after it). Exits
//! through semihosting: 0 when everything passed, 1 on a failed case, 3 on a HardFault.
#![no_std]
#![no_main]

mod arenas;
mod demo;

use core::mem::MaybeUninit;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::{ExceptionFrame, entry, exception};
use defmt_semihosting as _;
use edgekv_board_clock as clock;
use edgekv_board_stack::{self as stack, Marks, Painter};
use edgekv_parity::{Arenas, CASES, DATA_BYTES, META_BYTES, TINY_CASES, WORK_F32};
use static_cell::ConstStaticCell;

/// The system prompt's snapshot image, written by the build script on the host, in flash.
static SYSTEM_PROMPT_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/system_prompt.ekvs"));

static PARITY_META: ConstStaticCell<[MaybeUninit<u8>; META_BYTES]> =
    ConstStaticCell::new([MaybeUninit::uninit(); META_BYTES]);
static PARITY_WORK: ConstStaticCell<[f32; WORK_F32]> = ConstStaticCell::new([0.0; WORK_F32]);

#[entry]
fn main() -> ! {
    defmt::println!("edgekv on mps2-an386 (Cortex-M4F)");
    let Some(cp) = cortex_m::Peripherals::take() else {
        exit(2)
    };
    clock::start(cp.SYST);
    let per_m = clock::calibrate(1_000_000);
    let Some(psram) = arenas::psram() else {
        exit(2)
    };
    let (parity_data, demo_data) = psram.split_at_mut(DATA_BYTES);
    let mut arenas = Arenas {
        data: parity_data,
        meta: PARITY_META.take(),
        work: PARITY_WORK.take(),
    };
    let mut failed = 0u32;
    let mut marks = Marks::<48>::new();
    // Before any call: the firmware's own frames (an upper bound, to the painted window's top).
    marks.record("main, before any call", "", Painter::paint().deepest());
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
    // The system prompt's KV, snapshotted on the host at build time, restored from flash.
    let painter = Painter::paint();
    let restored = edgekv_parity::snapshot::decode_after_image(SYSTEM_PROMPT_IMAGE, &mut arenas);
    marks.record("snapshot restore, 8 decode steps", "", painter.deepest());
    match restored {
        Ok(d) => defmt::println!(
            "case {=str} crc32 {=u32:08x} ({=usize} B image from flash)",
            d.name(),
            d.crc32,
            SYSTEM_PROMPT_IMAGE.len()
        ),
        Err(e) => {
            failed += 1;
            defmt::println!("snapshot restore failed: {}", defmt::Debug2Format(&e));
        }
    }
    // One decode step at 2,048 keys, counted (its digest is compared with the host's too).
    let painter = Painter::paint();
    let step = edgekv_parity::decode_step(demo_data, arenas.work, &mut clock::now);
    marks.record("attention decode step", "2,048 q8_0 keys", painter.deepest());
    match step {
        Ok(c) => defmt::println!(
            "decode_step keys {=u32} instructions {=u64} crc32 {=u32:08x}",
            edgekv_parity::STEP_KEYS,
            c.ticks * 1_000_000 / per_m.max(1),
            c.crc32
        ),
        Err(e) => {
            failed += 1;
            defmt::println!("decode step failed: {}", defmt::Debug2Format(&e));
        }
    }
    let painter = Painter::paint();
    let demo = demo::run(demo_data);
    marks.record("demo session", "", painter.deepest());
    if let Err(e) = demo {
        defmt::println!("demo failed: {}", e);
        failed += 1;
    }
    marks.log();
    exit(if failed == 0 { 0 } else { 1 })
}

/// Ends the QEMU run with `code`.
fn exit(code: i32) -> ! {
    semihosting::process::exit(code)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::println!("HardFault at pc {=u32:08x}", frame.pc());
    exit(3)
}
