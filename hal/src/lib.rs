//! Hardware abstraction for [edgekv]: how KV-cache pages are handed to DMA
//! engines and NPUs.
//!
//! edgekv keeps the KV cache of an LLM in pages of ordinary memory. To let an
//! accelerator (Arm Ethos-U, ST Neural-ART on STM32N6, NXP eIQ Neutron, or a
//! DMA engine on a Linux SoC) read or write those pages, two things are
//! needed that this crate abstracts:
//!
//! * **Addresses.** A device may see memory at a different address than the
//!   CPU (TCM aliases, Cortex-M55 local vs. global TCM addresses, bus
//!   offsets). An [`AddressMap`] turns a CPU range into a [`DevAddr`], and
//!   refuses ranges the device cannot access as one linear block. Provided
//!   maps: [`IdentityMap`], [`OffsetMap`] (one window) and [`TableMap`]
//!   (several windows from a table of [`MapEntry`]).
//! * **Cache coherence.** On cores with a data cache (Cortex-M7, Cortex-A)
//!   the CPU must *clean* a range before a device reads it and *invalidate*
//!   it after a device writes it, on whole cache lines.
//!   [`CacheMaintenance`] is that interface; [`NoCache`] implements it for
//!   cache-less cores and QEMU while still rejecting misaligned ranges;
//!   [`line_aligned`] and [`expand_to_lines`] help build valid ranges.
//! * **Pages.** [`page_region`] and [`for_each_page_region`] give the device
//!   and CPU ranges of a sequence's pages in an edgekv cache.
//!
//! Every fallible operation returns a [`HalError`] instead of panicking, and
//! the crate contains no `unsafe` code outside the C ABI (`capi`) and the Ethos-U hooks
//! (`ethosu`) modules. It is `no_std` and allocation-free;
//! the `std` feature only links `std`, and `defmt` derives
//! `defmt::Format` for all public types.
//!
//! [edgekv]: https://example.invalid/edgekv
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod addr;
mod address_map;
mod cache;
mod error;
mod pages;
mod views;

#[cfg(feature = "capi")]
#[allow(unsafe_code)]
pub mod capi;
#[cfg(feature = "ethosu")]
#[allow(unsafe_code)]
pub mod ethosu;

pub use addr::DevAddr;
pub use address_map::{AddressMap, IdentityMap, MapEntry, OffsetMap, TableMap};
pub use cache::{CacheMaintenance, NoCache, expand_to_lines, line_aligned};
pub use error::HalError;
pub use pages::{PageRegion, for_each_page_region, page_region};
pub use views::{
    NO_OFFSET, ReadView, RegionBinding, Segment, bind_region, gather, ingest, read_view, segments,
};
