//! A software NPU for host tests: runs attention jobs on the core's kernels, reading and writing
//! memory only through [`SimMemory`]'s device side (device addresses, device memory).

use std::vec::Vec;

use edgekv::attention::AttentionParams;
use edgekv::{CacheConfig, HeapArena, KvCache, META_ALIGN, PageAllocator, PoolKind, SeqMode};

use super::{AttentionJob, JobId, JobStatus, KvBinding, NpuQueue};
use crate::{DevAddr, HalError, NO_OFFSET, Segment, SimMemory};

/// Where the pages of one pool are, owned.
enum Pages {
    Segments(Vec<Segment>),
    Offsets(DevAddr, Vec<u32>),
}

/// A queued job with its slices copied.
struct Queued {
    id: JobId,
    polls_left: u32,
    config: CacheConfig,
    pools: [Pages; 4],
    keys: u32,
    start: u32,
    queries: u32,
    q: DevAddr,
    out: DevAddr,
    params: AttentionParams,
}

/// An NPU made of the core's CPU kernels behind [`SimMemory`]: each job mirrors the pages it is
/// given from device memory into a private one-layer cache and runs
/// [`KvCache::attention`](edgekv::KvCache::attention) there, so its output is bit-identical to the
/// CPU path exactly when the device memory holds what the CPU wrote.
pub struct SoftwareNpu<'m> {
    mem: &'m SimMemory,
    queue: Vec<Queued>,
    capacity: usize,
    latency: u32,
    next: u32,
}

impl<'m> SoftwareNpu<'m> {
    /// An NPU on `mem` holding up to `capacity` jobs, each reporting
    /// [`Pending`](JobStatus::Pending) for `latency` polls before it runs.
    pub fn new(mem: &'m SimMemory, capacity: usize, latency: u32) -> Self {
        SoftwareNpu {
            mem,
            queue: Vec::new(),
            capacity,
            latency,
            next: 0,
        }
    }

    /// Reads `len` device bytes at `dev + offset`.
    fn read(&self, dev: DevAddr, offset: usize, len: usize) -> Result<Vec<u8>, HalError> {
        let at = dev.0.checked_add(offset as u64).ok_or(HalError::Overflow)?;
        let mut buf = std::vec![0u8; len];
        self.mem.device_read(DevAddr(at), &mut buf)?;
        Ok(buf)
    }

    fn run(&self, job: &Queued) -> Result<(), HalError> {
        let p = job.config.page_tokens as usize;
        let mut config = job
            .config
            .with_sequences(1, job.keys)
            .with_prefix_index(false);
        config.shape.layers = 1;
        let pages = (job.keys as usize).div_ceil(p);
        let plan = config.plan_pages(
            pages,
            <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE,
        )?;
        let mut data = HeapArena::new(plan.data_bytes, config.align)?;
        let mut meta = HeapArena::new(plan.meta.total, META_ALIGN)?;
        let mut cache: KvCache = KvCache::new(config, data.as_uninit_mut(), meta.as_uninit_mut())?;
        let seq = cache.create_sequence(SeqMode::Paged)?;
        cache.reserve(seq, job.keys)?;
        for (pool, pages_of) in PoolKind::ALL.into_iter().zip(&job.pools) {
            let stride = plan.geometry.pool_stride(pool);
            if stride == 0 {
                continue;
            }
            let mut load = |index: usize, dev: DevAddr, offset: usize| {
                if index >= pages {
                    return Err(HalError::LengthMismatch);
                }
                let bytes = self.read(dev, offset, stride)?;
                cache.write_slot(seq, 0, pool, index, &bytes)?;
                Ok(())
            };
            match pages_of {
                Pages::Segments(segs) => {
                    for s in segs {
                        if s.len != s.pages as usize * stride {
                            return Err(HalError::LengthMismatch);
                        }
                        for j in 0..s.pages as usize {
                            load(s.first_page as usize + j, s.dev, j * stride)?;
                        }
                    }
                }
                Pages::Offsets(base, offsets) => {
                    if offsets.len() != pages {
                        return Err(HalError::LengthMismatch);
                    }
                    for (index, &off) in offsets.iter().enumerate() {
                        if off != NO_OFFSET {
                            load(index, *base, off as usize)?;
                        }
                    }
                }
            }
        }
        let shape = config.shape;
        let n = (job.queries as usize)
            .checked_mul(job.params.q_heads as usize * shape.head_dim as usize)
            .ok_or(HalError::Overflow)?;
        let q: Vec<f32> = self
            .read(job.q, 0, n.checked_mul(4).ok_or(HalError::Overflow)?)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut out = std::vec![0f32; n];
        let mut scratch = std::vec![0f32; job.config.scratch_len(job.params.q_heads, 1)];
        cache.attention(seq, 0, job.start, &q, &mut out, &job.params, &mut scratch)?;
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.mem.device_write(job.out, &bytes)
    }
}

impl NpuQueue for SoftwareNpu<'_> {
    fn submit(&mut self, job: &AttentionJob<'_>) -> Result<JobId, HalError> {
        if self.queue.len() >= self.capacity {
            return Err(HalError::QueueFull);
        }
        let pools = match job.kv {
            KvBinding::Segments {
                k,
                k_scales,
                v,
                v_scales,
            } => [k, k_scales, v, v_scales].map(|s| Pages::Segments(s.to_vec())),
            KvBinding::Region {
                base,
                k,
                k_scales,
                v,
                v_scales,
            } => [k, k_scales, v, v_scales].map(|o| Pages::Offsets(base, o.to_vec())),
        };
        let id = JobId(self.next);
        self.next = self.next.wrapping_add(1);
        self.queue.push(Queued {
            id,
            polls_left: self.latency,
            config: job.config,
            pools,
            keys: job.keys,
            start: job.start,
            queries: job.queries,
            q: job.q,
            out: job.out,
            params: job.params,
        });
        Ok(id)
    }

    fn poll(&mut self, job: JobId) -> Result<JobStatus, HalError> {
        let i = self
            .queue
            .iter()
            .position(|q| q.id == job)
            .ok_or(HalError::UnknownJob)?;
        if self.queue[i].polls_left > 0 {
            self.queue[i].polls_left -= 1;
            return Ok(JobStatus::Pending);
        }
        let queued = self.queue.remove(i);
        self.run(&queued).map(|()| JobStatus::Done)
    }
}
