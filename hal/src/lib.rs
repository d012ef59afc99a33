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
//!   cache-less cores and QEMU while still rejecting misaligned ranges,
//!   `CortexMDCache` (feature `cortex-m`) drives the Cortex-M7/M55 D-cache,
//!   and `SimCache` (feature `sim`) simulates a write-back cache on the host
//!   so a missing clean or invalidate gives wrong data in tests;
//!   [`line_aligned`] and [`expand_to_lines`] help build valid ranges.
//! * **Device views** of a sequence's K or V in one layer, each doing the
//!   maintenance its direction needs: [`read_view`] (coalesced [`Segment`]
//!   lists for DMA engines), [`bind_region`] (the arena as one base region
//!   plus page offsets, the Ethos-U model), [`gather`] (pages into a dense
//!   `[kv_heads][tokens][head_dim]` staging tensor), [`ingest`] (rows a device
//!   wrote, quantized into pages), and [`device_input`] / [`device_output`] /
//!   [`take_output`] for plain buffers. [`page_region`] and
//!   [`for_each_page_region`] give single pages.
//! * **NPU queue.** [`NpuQueue`] submits [`AttentionJob`]s described by
//!   device addresses only and polls them; `SoftwareNpu` (feature `sim`)
//!   runs them on the core's kernels through the simulated memory.
//!
//! Every fallible operation returns a [`HalError`] instead of panicking and
//! leaves the cache unchanged. The crate is `no_std` and allocation-free
//! (the `sim` feature uses `std`); `unsafe` appears only in the Cortex-M
//! invalidate. The C ABI over this crate and the core, and the Ethos-U driver
//! hooks, are the `edgekv-capi` crate.
//! `defmt` derives `defmt::Format` for the public types.
//!
//! [edgekv]: https://example.invalid/edgekv
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::missing_errors_doc)]

mod addr;
mod address_map;
mod cache;
#[cfg(feature = "cortex-m")]
mod cortex_m;
mod error;
mod npu;
mod pages;
#[cfg(feature = "sim")]
mod sim;
mod views;

pub use addr::DevAddr;
pub use address_map::{AddressMap, IdentityMap, MapEntry, OffsetMap, TableMap};
pub use cache::{CacheMaintenance, NoCache, expand_to_lines, line_aligned};
#[cfg(feature = "cortex-m")]
pub use cortex_m::CortexMDCache;
pub use error::HalError;
#[cfg(feature = "sim")]
pub use npu::SoftwareNpu;
pub use npu::{AttentionJob, JobId, JobStatus, KvBinding, NpuQueue};
pub use pages::{PageRegion, for_each_page_region, page_region};
#[cfg(feature = "sim")]
pub use sim::{SimCache, SimMemory, SimStats};
pub use views::{
    NO_OFFSET, ReadView, RegionBinding, Segment, bind_region, clean_view, device_input,
    device_output, gather, ingest, read_view, segments, take_output,
};
