//! edgekv on an STM32H743 (NUCLEO-H743ZI): Cortex-M7 at the reset clock (HSI, 64 MHz) with its
//! I- and D-caches on, the KV data arena in AXI SRAM, metadata and work buffers in DTCM, logs
//! over defmt-RTT. Runs the two-turn session of [`session`] (int8 pages, prefix reuse, attention,
//! sliding window) and logs what it did, cycle counts and a CRC of all attention outputs.
//!
//! Feature `heap`: the data arena is an [`edgekv::HeapArena`] from embedded-alloc's `LlffHeap`
//! (itself over AXI SRAM) instead of a static.
#![no_std]
#![no_main]

mod session;

use cortex_m::peripheral::{DWT, Peripherals};
use cortex_m_rt::entry;
use defmt_rtt as _;
use edgekv::{ArenaBuf, KvCache};
use edgekv_hal::{CacheMaintenance, CortexMDCache};
use panic_probe as _;

use session::{DATA_BYTES, META_BYTES, PLAN, WORK_F32};

#[cfg(feature = "heap")]
#[global_allocator]
static HEAP: embedded_alloc::LlffHeap = embedded_alloc::LlffHeap::empty();

/// Heap bytes: the arena plus room for its 64-byte alignment and the allocator's bookkeeping.
#[cfg(feature = "heap")]
const HEAP_BYTES: usize = DATA_BYTES + 1024;

// SAFETY (of the attribute): `.axisram` is a NOLOAD output section of memory.x in the AXI SRAM
// region; an uninitialized arena needs no load, and edgekv zeroes the part it uses.
#[cfg(not(feature = "heap"))]
#[unsafe(link_section = ".axisram")]
static mut KV_DATA: ArenaBuf<DATA_BYTES> = ArenaBuf::new();

// SAFETY (of the attribute): as for KV_DATA; the heap initializes what it hands out.
#[cfg(feature = "heap")]
#[unsafe(link_section = ".axisram")]
static mut HEAP_MEM: [core::mem::MaybeUninit<u8>; HEAP_BYTES] =
    [core::mem::MaybeUninit::uninit(); HEAP_BYTES];

#[entry]
fn main() -> ! {
    // cortex-m-rt turns these `static mut`s into `&'static mut` references handed out once, so
    // no `unsafe` is needed to use them (it cannot do so for statics with a `link_section`).
    // DTCM (.bss): zero-wait-state for the CPU, never cached, not visible to DMA.
    static mut KV_META: ArenaBuf<META_BYTES> = ArenaBuf::new();
    static mut WORK: [f32; WORK_F32] = [0.0; WORK_F32];

    let mut cp = Peripherals::take().expect("peripherals taken once");
    // QEMU models no caches; on the H743 they are off after reset. With the D-cache on, AXI SRAM
    // is write-back cached: a DMA engine or accelerator reading the pages sees stale memory
    // unless they are cleaned first (`session::hand_to_device`).
    cp.SCB.enable_icache();
    cp.SCB.enable_dcache(&mut cp.CPUID);
    cp.DCB.enable_trace();
    DWT::unlock();
    cp.DWT.enable_cycle_counter();
    let mut dcache = CortexMDCache::new(cp.SCB);
    defmt::info!(
        "edgekv stm32h7: I/D caches on, D-cache line {=usize} B",
        dcache.line_size()
    );

    #[cfg(not(feature = "heap"))]
    // SAFETY: the only reference ever made to KV_DATA: `main` runs once and never returns, and
    // no interrupt handler touches it.
    let data = unsafe { (*core::ptr::addr_of_mut!(KV_DATA)).as_uninit_mut() };
    #[cfg(feature = "heap")]
    let mut heap_arena = {
        // SAFETY: runs once (in `main`, which never returns), before the first allocation;
        // HEAP_MEM is HEAP_BYTES of memory that nothing but the heap ever uses.
        unsafe { HEAP.init(core::ptr::addr_of_mut!(HEAP_MEM) as usize, HEAP_BYTES) };
        edgekv::HeapArena::new(DATA_BYTES, session::CFG.align).expect("heap arena")
    };
    #[cfg(feature = "heap")]
    let data = heap_arena.as_uninit_mut();

    let data_addr = data.as_ptr() as usize;
    let mut cache: KvCache =
        match KvCache::from_planned(&session::PLANNED, data, KV_META.as_uninit_mut()) {
            Ok(c) => c,
            Err(e) => halt_with(e.into()),
        };
    defmt::info!(
        "cache: {=u16} pages x {=u16} tokens, {=usize} B/page, data {=usize} B at {=usize:#x}, meta {=usize} B in DTCM",
        PLAN.num_pages,
        session::CFG.page_tokens,
        cache.stats().page_bytes,
        PLAN.data_bytes,
        data_addr,
        PLAN.meta.total
    );
    #[cfg(feature = "heap")]
    defmt::info!(
        "heap: {=usize} B used, {=usize} B free",
        HEAP.used(),
        HEAP.free()
    );

    match session::run(&mut cache, WORK, &mut dcache, &DWT::cycle_count) {
        Ok(r) => {
            for (i, t) in [(1u8, r.turn1), (2, r.turn2)] {
                defmt::info!(
                    "turn {=u8}: prompt {=u32} tokens, {=u32} reused, prefill {=u32} cycles; {=u32} decode steps, {=u32} cycles",
                    i,
                    t.prompt,
                    t.reused,
                    t.prefill_ticks,
                    t.decoded,
                    t.decode_ticks
                );
            }
            defmt::info!(
                "handed to the device after turn 1: {=u32} segments, {=usize} B cleaned",
                r.handed_segments,
                r.handed_bytes
            );
            defmt::info!(
                "sliding window (4 sinks + 64): {=u32} pages released",
                r.released
            );
            defmt::info!("{}", r.stats);
            defmt::info!("crc32 {=u32:08x}", r.crc);
            defmt::info!("done");
        }
        Err(e) => defmt::error!("session failed: {}", e),
    }
    // Spin rather than WFI: sleeping can cut the debug connection that reads RTT.
    loop {
        core::hint::spin_loop();
    }
}

/// Logs a cache error and stops.
fn halt_with(e: edgekv::Error) -> ! {
    defmt::error!("cache: {}", e);
    loop {
        core::hint::spin_loop();
    }
}
