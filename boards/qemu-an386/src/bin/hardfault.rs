//! Proves the fault path: reads an unmapped address, so the HardFault handler must end the QEMU
//! run with exit code 3 (a firmware that hung or exited 0 here would hide crashes in CI).
#![no_std]
#![no_main]

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::{ExceptionFrame, entry, exception};
use defmt_semihosting as _;

#[entry]
fn main() -> ! {
    defmt::println!("reading an unmapped address");
    // SAFETY: deliberately invalid: the bus error escalates to HardFault, which never returns.
    let v = unsafe { core::ptr::read_volatile(0xF000_0000 as *const u32) };
    defmt::println!("no fault: read {=u32:08x}", v);
    semihosting::process::exit(0)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::println!("HardFault at pc {=u32:08x}", frame.pc());
    semihosting::process::exit(3)
}
