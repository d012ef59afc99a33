//! The NPU queue: attention jobs over a sequence's pages, described by device addresses only,
//! submitted to an accelerator and polled until done.

#[cfg(feature = "sim")]
mod software;

#[cfg(feature = "sim")]
pub use software::SoftwareNpu;

use edgekv::CacheConfig;
use edgekv::attention::AttentionParams;

use crate::{DevAddr, HalError, Segment};

/// Where a job finds the K and V pages of one layer, in page-table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvBinding<'j> {
    /// Segment lists from [`read_view`](crate::read_view) (DMA engines with linked lists).
    Segments {
        /// K value pages.
        k: &'j [Segment],
        /// K scale pages (empty for full-precision formats).
        k_scales: &'j [Segment],
        /// V value pages.
        v: &'j [Segment],
        /// V scale pages (empty for full-precision formats).
        v_scales: &'j [Segment],
    },
    /// One base region plus per-page offsets from [`bind_region`](crate::bind_region), as
    /// Ethos-U takes them. [`NO_OFFSET`](crate::NO_OFFSET) marks released pages.
    Region {
        /// Device address of the region base.
        base: DevAddr,
        /// K value page offsets.
        k: &'j [u32],
        /// K scale page offsets (empty for full-precision formats).
        k_scales: &'j [u32],
        /// V value page offsets.
        v: &'j [u32],
        /// V scale page offsets (empty for full-precision formats).
        v_scales: &'j [u32],
    },
}

/// Causal attention of `queries` query rows at positions `[start, start + queries)` over the
/// keys `[0, keys)` of one layer's pages — the work [`KvCache::attention`](edgekv::KvCache::attention)
/// does on the CPU, described for a device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionJob<'j> {
    /// The cache's configuration: shape (its `layers` is ignored), formats, page tokens,
    /// alignment — the page geometry the device decodes.
    pub config: CacheConfig,
    /// The pages.
    pub kv: KvBinding<'j>,
    /// Positions the pages hold.
    pub keys: u32,
    /// Position of the first query row.
    pub start: u32,
    /// Query rows.
    pub queries: u32,
    /// Device address of the queries, `[queries][q_heads][head_dim]` f32 (little-endian).
    pub q: DevAddr,
    /// Device address of the output, the same shape as the queries.
    pub out: DevAddr,
    /// Heads, scale, window.
    pub params: AttentionParams,
}

/// A submitted job's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JobId(pub u32);

/// What [`NpuQueue::poll`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum JobStatus {
    /// Still running.
    Pending,
    /// Finished; its output is in device memory (invalidate before reading it).
    Done,
}

/// An accelerator's job queue.
pub trait NpuQueue {
    /// Queues `job`; the job's slices are copied, so they may be dropped after the call. The
    /// caller must have made its inputs visible to the device (cleaned) and must not touch its
    /// output until the job is done.
    ///
    /// # Errors
    ///
    /// [`HalError::QueueFull`], or an implementation's refusal of the job.
    fn submit(&mut self, job: &AttentionJob<'_>) -> Result<JobId, HalError>;

    /// Whether the job finished. After `Done` (or an error, which is the job's failure) the id
    /// is forgotten.
    ///
    /// # Errors
    ///
    /// [`HalError::UnknownJob`], or the job's own failure.
    fn poll(&mut self, job: JobId) -> Result<JobStatus, HalError>;
}
