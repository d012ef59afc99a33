//! A host simulation of a device behind a write-back data cache, so tests prove that cache
//! maintenance is complete: a missing clean or invalidate gives wrong data, as on a Cortex-M7.
//!
//! * [`SimMemory`] is the memory the device sees: regions registered at CPU addresses with device
//!   addresses, initially filled with a garbage byte. It is also the [`AddressMap`](crate::AddressMap).
//! * The CPU's view is the ordinary Rust memory (the arenas and buffers themselves): CPU writes
//!   stay there ("in the cache") until [`SimCache`] cleans them into device memory, and device
//!   writes reach the CPU only when [`SimCache`] invalidates the lines.
//! * Dirty lines the CPU wrote and never cleaned are, at invalidation, treated as evicted after
//!   the device's write (the worst case on hardware): the device's data is lost. So an output
//!   buffer the CPU touched must be cleaned before the device writes it.
//! * [`SoftwareNpu`](crate::SoftwareNpu) accesses memory only through [`SimMemory`]'s device side.

mod cache;
mod memory;

pub use cache::SimCache;
pub use memory::{SimMemory, SimStats};
