//! Sequence handles, modes and records, and the set of them a cache keeps ([`SeqSet`]).

mod set;

use bytemuck::{Pod, Zeroable};

pub(crate) use set::SeqSet;

/// A handle to a sequence in one cache: a slot index, a generation and the cache instance's
/// epoch. A handle kept after [`free_sequence`](crate::KvCache::free_sequence) is rejected with
/// [`Error::UnknownSequence`](crate::Error::UnknownSequence) even when the slot is reused (until
/// that slot's 16-bit generation wraps: 65,536 create/free cycles of the same slot), and so is a
/// handle of another cache instance — one created before in the same arenas included — as every
/// cache gets its own epoch (from a process-wide 32-bit counter: distinct until 2³² caches were
/// created).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SeqId {
    pub(crate) slot: u16,
    pub(crate) generation: u16,
    pub(crate) epoch: u32,
}

impl SeqId {
    /// The slot index (`< max_seqs`).
    pub const fn slot(self) -> u16 {
        self.slot
    }

    /// Packs the handle into a `u64` (for C callers and logs): slot in bits 0..16, generation in
    /// bits 16..32, the cache's epoch in bits 32..64.
    pub const fn to_raw(self) -> u64 {
        (self.epoch as u64) << 32 | (self.generation as u64) << 16 | self.slot as u64
    }

    /// Unpacks a handle made by [`to_raw`](Self::to_raw); validity is checked on use.
    pub const fn from_raw(raw: u64) -> Self {
        SeqId {
            slot: raw as u16,
            generation: (raw >> 16) as u16,
            epoch: (raw >> 32) as u32,
        }
    }
}

/// How a sequence holds its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SeqMode {
    /// Any pages, allocated one at a time as the sequence grows; full pages are shared on fork.
    Paged,
    /// One run of consecutive pages (one linear tensor per layer and K/V when the geometry is
    /// natural), whose capacity doubles when it must grow. Needs an allocator with runs
    /// ([`Bitmap`](crate::Bitmap)). Never shares pages: a fork copies.
    Contiguous,
}

/// What [`KvCache::sequence`](crate::KvCache::sequence) reports about one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SeqInfo {
    /// Reserved token positions.
    pub len: u32,
    /// Pages in its page table.
    pub pages: u16,
    /// Tokens the held pages can take without allocating.
    pub capacity: u32,
    /// Its mode.
    pub mode: SeqMode,
    /// Leading positions committed as prompt ([`commit_prompt`](crate::KvCache::commit_prompt));
    /// only these can be reused.
    pub prompt: u32,
}

pub(crate) const LIVE: u16 = 1;
pub(crate) const CONTIGUOUS: u16 = 2;

/// One sequence slot in the metadata arena (16 bytes, little-endian on every supported target).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct SeqRecord {
    /// Reserved positions.
    pub len: u32,
    /// Leading positions committed as prompt (prefilled in chunk-aligned steps); `≤ len`.
    pub prompt: u32,
    /// Pages held in the page table (paged: exactly those covering `len`; contiguous: capacity).
    pub held: u16,
    /// Bumped at every create.
    pub generation: u16,
    /// `LIVE | CONTIGUOUS`.
    pub flags: u16,
    pub _reserved: u16,
}

impl SeqRecord {
    pub fn live(&self) -> bool {
        self.flags & LIVE != 0
    }

    pub fn contiguous(&self) -> bool {
        self.flags & CONTIGUOUS != 0
    }

    pub fn mode(&self) -> SeqMode {
        if self.contiguous() {
            SeqMode::Contiguous
        } else {
            SeqMode::Paged
        }
    }
}

const _: () = assert!(core::mem::size_of::<SeqRecord>() == crate::plan::SEQ_RECORD_BYTES);
