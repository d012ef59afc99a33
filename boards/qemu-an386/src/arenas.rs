//! The firmware's memory: KV data arenas in PSRAM (a `NOLOAD` section), the rest in RAM.

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use static_cell::ConstStaticCell;

/// Bytes of PSRAM given to KV data arenas (the parity arena and the demo's, one after the other).
pub const PSRAM_ARENA: usize = 4 * 1024 * 1024;

#[unsafe(link_section = ".psram")]
static mut PSRAM: [MaybeUninit<u8>; PSRAM_ARENA] = [MaybeUninit::uninit(); PSRAM_ARENA];

/// The PSRAM arena, once (`None` on a second call).
pub fn psram() -> Option<&'static mut [MaybeUninit<u8>]> {
    static TAKEN: ConstStaticCell<()> = ConstStaticCell::new(());
    TAKEN.try_take()?;
    // SAFETY: `TAKEN` lets this line run at most once, so this is the only reference to `PSRAM`
    // ever made; `MaybeUninit` bytes need no initialization.
    Some(unsafe { &mut *addr_of_mut!(PSRAM) })
}
