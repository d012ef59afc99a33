//! Deterministic attention parity cases, written once in `no_std` Rust: host-tests runs them
//! against a dense reference, board firmware runs the very same cases and prints their digests.
//!
//! Every [`Case`] is a fixed script over a tiny SmolLM2-shaped cache ([`SHAPE`], [`Q_HEADS`] query
//! heads, [`PAGE_TOKENS`]-token pages, prefill chunks of [`CHUNK`]): it creates sequences, writes
//! K/V rows from a small xorshift generator, prefills in [`plan_prefill`] chunks, decodes, forks,
//! truncates, reuses prefixes, and runs [`KvCache::attention`] over the pages. [`run`] digests all
//! attention outputs with CRC-32 (ISO-HDLC, the zlib one) over their little-endian bytes, in the
//! order they are produced. The inputs are generated with integer arithmetic and exactly
//! representable f32 steps, and the kernels are deterministic, so a host and a Cortex-M print the
//! same line for every case:
//!
//! ```text
//! case paged_f32 crc32 1a2b3c4d
//! ```
//!
//! Memory is the caller's ([`Arenas`], sizes in [`DATA_BYTES`], [`META_BYTES`], [`WORK_F32`], so
//! firmware can use statics); nothing large lives on the stack. The sink of [`run`] receives every
//! step as an [`Event`] with the original f32 rows and queries, from which a host rebuilds a dense
//! model of every sequence and checks each output block.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use edgekv_parity::{Arenas, Case, DATA_BYTES, Event, META_BYTES, WORK_F32, run};
//!
//! let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
//! let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
//! let mut work = vec![0f32; WORK_F32];
//! let mut arenas = Arenas { data: &mut data, meta: &mut meta, work: &mut work };
//! let mut rows = 0;
//! let digest = run(Case::OnePass, &mut arenas, &mut |e: Event<'_>| {
//!     if let Event::Attention { out, .. } = e {
//!         rows += out.len() / edgekv_parity::Q_ROW;
//!     }
//! })?;
//! assert_eq!(rows, 2 * 48); // two layers, 48 query rows each
//! assert_eq!(digest.name(), "prefill_one_pass");
//! println!("{digest}");
//! # Ok::<(), edgekv_parity::Error>(())
//! ```
#![no_std]

use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Range;

pub mod snapshot;

use crc::{CRC_32_ISO_HDLC, Crc};
use edgekv::attention::AttentionParams;
use edgekv::prefix::plan_prefill;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, KvCache, META_ALIGN, PageAllocator, Rotation, SeqId,
    SeqMode, Shape,
};

mod cases;
mod decode_step;
mod events;
mod inputs;
mod listing;
mod memory;
mod runner;
mod tiny;

pub use cases::*;
pub use decode_step::*;
pub use events::*;
pub use inputs::*;
pub use listing::*;
pub use memory::*;
pub use runner::*;
pub(crate) use tiny::*;
