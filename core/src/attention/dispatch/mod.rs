//! Which build of the page loop runs a page: the one place of `attention` that names an ISA.
//! `arch` holds each ISA's [`Isa`](crate::arch::Isa) (its kernels and strategy); here the page
//! loop is instantiated with it, per target: `x86_64.rs` (a second build with AVX2 and F16C
//! enabled, chosen per page at run time), `arm.rs` (Cortex-M kernels, chosen at build time),
//! `aarch64.rs` (NEON kernels, with `SDOT` where the CPU has it, chosen at run time),
//! `portable.rs` (every other build). `small-code` builds have one loop, with the ISA module's
//! `SmallCode`.

#[cfg_attr(
    all(edgekv_x86_kernels, not(feature = "small-code")),
    path = "x86_64.rs"
)]
#[cfg_attr(all(edgekv_arm_kernels, not(feature = "small-code")), path = "arm.rs")]
#[cfg_attr(
    all(edgekv_aarch64_kernels, not(feature = "small-code")),
    path = "aarch64.rs"
)]
#[cfg_attr(
    not(all(
        any(edgekv_x86_kernels, edgekv_arm_kernels, edgekv_aarch64_kernels),
        not(feature = "small-code")
    )),
    path = "portable.rs"
)]
// The AVX2 build's `target_feature` functions, behind run-time detection.
#[allow(unsafe_code)]
#[cfg(not(feature = "small-code"))]
mod native;

use super::page::{Heads, Keys, Layout};

/// One page of keys for one query row, in the best build this CPU runs (`small-code`: the one
/// small loop, with the ISA module's `SmallCode`, for its f16 conversion).
#[inline(always)]
pub(crate) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    #[cfg(not(feature = "small-code"))]
    native::attend_page(l, keys, heads);
    #[cfg(feature = "small-code")]
    super::page::attend_page::<crate::arch::SmallCode, F>(l, keys, heads);
}
