//! An instruction clock for the QEMU board firmware: SysTick on the core clock, extended to 64
//! bits by its wrap interrupt.
//! Under QEMU's `-icount shift=0` the virtual clock advances one nanosecond per instruction, so
//! SysTick counts instructions (scaled by its clock rate; [`calibrate`] measures the scale).
#![no_std]

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use cortex_m_rt::exception;

const RELOAD: u32 = 0x00FF_FFFF;
static WRAPS: AtomicU32 = AtomicU32::new(0);

/// Starts SysTick counting down from its 24-bit maximum, interrupting at each wrap.
pub fn start(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
    // The counter reads 0 until its first tick loads the reload value (no wrap, no interrupt).
    while SYST::get_current() == 0 {}
}

/// Ticks since [`start`]. With interrupts masked, a wrap whose interrupt is still pending is
/// counted here (the counter has reloaded, the handler not yet run).
pub fn now() -> u64 {
    cortex_m::interrupt::free(|_| {
        let mut wraps = WRAPS.load(Ordering::Relaxed);
        let mut current = SYST::get_current();
        if SCB::is_pendst_pending() {
            wraps += 1;
            current = SYST::get_current();
        }
        (u64::from(wraps) << 24) + u64::from(RELOAD - current)
    })
}

/// Ticks per million instructions: a loop of `2 × n` known instructions (`subs` and a taken
/// `bne` per iteration) timed with [`now`].
pub fn calibrate(n: u32) -> u64 {
    let t0 = now();
    // SAFETY: a register-only countdown loop; it touches no memory and clobbers only the flags
    // and the register it is given.
    unsafe {
        core::arch::asm!(
            "2:",
            "subs {0}, {0}, #1",
            "bne 2b",
            inout(reg) n => _,
            options(nomem, nostack),
        );
    }
    let ticks = now() - t0;
    ticks * 1_000_000 / (2 * u64::from(n))
}

#[exception]
fn SysTick() {
    WRAPS.fetch_add(1, Ordering::AcqRel);
}
