//! Staging tensors: a sequence's K or V copied out of pages into one dense tensor for a device,
//! and rows a device wrote copied (quantized) into pages.

use edgekv::{Element, Kv, KvCache, PageAllocator, SeqId};

use crate::{CacheMaintenance, HalError, line_aligned};

/// Whole rows in `len` elements of `row` each: `Some(n)` with `n ≥ 1`.
fn rows_in(len: usize, row: usize) -> Option<usize> {
    (row != 0 && len != 0 && len % row == 0).then(|| len / row)
}

/// Checks that `bytes` is whole lines of `maint`.
fn check_lines(maint: &impl CacheMaintenance, bytes: &[u8]) -> Result<(), HalError> {
    line_aligned(bytes.as_ptr() as usize, bytes.len(), maint.line_size()).map(|_| ())
}

/// Copies positions `[start, start + n)` of `(seq, layer, kv)` into `staging`, head-major
/// `[kv_heads][n][head_dim]` (the layout NPU attention kernels take), converting from the page
/// format to `T`; then cleans `staging` so the device reads it. `n = staging.len() / (kv_heads ×
/// head_dim)`; `row` is scratch of one token row (`kv_heads × head_dim` elements). Returns `n`.
///
/// # Errors
///
/// [`HalError::LengthMismatch`] (`staging` not a whole number ≥ 1 of rows, `row` not one row),
/// [`HalError::Misaligned`] (`staging` not whole cache lines), [`HalError::Cache`] (unknown
/// sequence, layer out of range, positions past the sequence or in pages released by a sliding
/// window: [`PositionOutOfRange`](edgekv::Error::PositionOutOfRange)). All of these are checked
/// before anything is written: `staging` and `row` are untouched and nothing was cleaned. The one
/// failure after the copy is `maint`'s own in the final clean (it must follow the copy): then
/// `staging` holds the rows but was not (wholly) cleaned, so a device must not read it.
#[allow(clippy::too_many_arguments)]
pub fn gather<'a, A: PageAllocator<'a>, T: Element>(
    cache: &KvCache<'a, A>,
    maint: &mut impl CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    start: u32,
    staging: &mut [T],
    row: &mut [T],
) -> Result<u32, HalError> {
    let shape = cache.config().shape;
    let (heads, dim) = (shape.kv_heads as usize, shape.head_dim as usize);
    let n = rows_in(staging.len(), heads * dim).ok_or(HalError::LengthMismatch)?;
    if row.len() != heads * dim {
        return Err(HalError::LengthMismatch);
    }
    check_lines(maint, bytemuck::cast_slice(staging))?;
    // Sequence, layer and every position (held, not released), before `staging` is written.
    cache.check_read(seq, layer, start, staging.len())?;
    // Checked above: `start + n` fits the sequence's u32 length.
    let n32 = n as u32;
    for t in 0..n32 {
        cache.read(seq, layer, kv, start + t, row)?;
        for (h, src) in row.chunks_exact(dim).enumerate() {
            let at = (h * n + t as usize) * dim;
            staging[at..at + dim].copy_from_slice(src);
        }
    }
    maint.clean_slice(bytemuck::cast_slice(staging))?;
    Ok(n32)
}

/// Takes K or V rows a device wrote into `staging` (token-major `[n][kv_heads][head_dim]`, the
/// layout of a projection's output): invalidates `staging` so the CPU reads the device's bytes,
/// then writes the rows to positions `[start, start + n)` of `(seq, layer, kv)`, quantizing to the
/// page format. Returns `n`.
///
/// # Errors
///
/// [`HalError::LengthMismatch`] (`staging` not a whole number ≥ 1 of rows),
/// [`HalError::Misaligned`] (`staging` not whole cache lines), [`HalError::Cache`] (as
/// [`KvCache::write`]: unknown sequence, layer, positions past the sequence — however far, as
/// [`PositionOutOfRange`](edgekv::Error::PositionOutOfRange) — or released, no page for a
/// copy-on-write), and `maint`'s own failure of the invalidate. Everything the write needs is
/// checked before the invalidate, and the write cannot fail after it: the cache is unchanged on
/// every error.
pub fn ingest<'a, A: PageAllocator<'a>, T: Element>(
    cache: &mut KvCache<'a, A>,
    maint: &mut impl CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    start: u32,
    staging: &mut [T],
) -> Result<u32, HalError> {
    let shape = cache.config().shape;
    let row = shape.kv_heads as usize * shape.head_dim as usize;
    let n = rows_in(staging.len(), row).ok_or(HalError::LengthMismatch)?;
    check_lines(maint, bytemuck::cast_slice(staging))?;
    cache.check_write(seq, layer, start, staging.len())?;
    maint.invalidate_slice(bytemuck::cast_slice_mut(staging))?;
    cache.write(seq, layer, kv, start, staging)?;
    // Checked above: `start + n` fits the sequence's u32 length.
    Ok(n as u32)
}
