//! The edgekv C ABI as a static library: `libedgekv_capi.a`, declared by
//! `hal/include/edgekv.h`.
//!
//! Every `ekv_*` function lives in [`edgekv_hal::capi`]; this crate only links them into an
//! archive a C toolchain can take (with `-Wl,--gc-sections`). On a host (feature `std`, the
//! default) the archive carries Rust's std; link it with `-lpthread -ldl -lm`. For firmware build
//! it with `--no-default-features --target <thumb target>`: the archive is then `no_std` and
//! brings a panic handler that spins (the library is written not to panic; the handler only
//! guards against a bug).
#![cfg_attr(not(feature = "std"), no_std)]

pub use edgekv_hal::capi;

/// Spins forever: the library never panics on caller input, so this guards only against a bug.
#[cfg(all(not(feature = "std"), not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
