//! Staging tensors over C: gather a sequence's rows into a dense tensor for a device, ingest
//! rows a device wrote.

use edgekv::{Element, SeqId};

use super::handle::{AnyCache, EkvCache, Handle, dispatch_layer};
use super::maint::EkvMaintenance;
use super::ptr::{Buf, Out};
use super::status::{EkvStatus, status};
use super::types::{EkvSeq, parse_kv};
use super::views::{check_disjoint, device_args, with_device};

/// Gathers positions `[start, start + n)` of `(seq, layer, kv)` into a head-major staging
/// tensor, then cleans it.
///
/// # Safety
///
/// See `ekv_gather_f32`.
#[allow(clippy::too_many_arguments)]
unsafe fn gather<T: super::rows::CElem>(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut T,
    staging_elems: usize,
    row: *mut T,
    row_elems: usize,
    rows: *mut u32,
) -> EkvStatus
where
    T::E: Element,
{
    let r = (|| {
        let kv = parse_kv(kv)?;
        let staging = Buf::output(staging, staging_elems)?;
        let row = Buf::output(row, row_elems)?;
        let rows = Out::optional(rows)?;
        let seq = SeqId::from_raw(seq);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        // SAFETY: the caller's obligation (see `# Safety`).
        let dev = unsafe { device_args(core::ptr::null(), maint) }?;
        let n = with_device(h, dev, |c, a, _, maint| {
            let rs = super::ptr::opt_span(&rows);
            check_disjoint(a, &[staging.span(), row.span(), rs])?;
            // SAFETY: writable (caller), pairwise disjoint and outside the cache.
            let (st, rw) = unsafe { (T::view_mut(staging.get_mut()), T::view_mut(row.get_mut())) };
            let r = dispatch_layer!(c, c, layer => {
                edgekv_hal::gather(c, maint, seq, layer, kv, start, st, rw)
            });
            r.map_err(|e| maint.error(e.into()))
        })?;
        if let Some(out) = rows {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(n) };
        }
        Ok(())
    })();
    status(r)
}

/// Takes rows a device wrote into `staging` (token-major): invalidates it, then writes the rows
/// to positions `[start, start + n)`, quantizing to the page format.
///
/// # Safety
///
/// See `ekv_ingest_f32`.
#[allow(clippy::too_many_arguments)]
unsafe fn ingest<T: super::rows::CElem>(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut T,
    staging_elems: usize,
    rows: *mut u32,
) -> EkvStatus {
    let r = (|| {
        let kv = parse_kv(kv)?;
        let staging = Buf::output(staging, staging_elems)?;
        let rows = Out::optional(rows)?;
        let seq = SeqId::from_raw(seq);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        // SAFETY: the caller's obligation (see `# Safety`).
        let dev = unsafe { device_args(core::ptr::null(), maint) }?;
        let n = with_device(h, dev, |c, a, _, maint| {
            check_disjoint(a, &[staging.span(), super::ptr::opt_span(&rows)])?;
            // SAFETY: writable (caller), outside the cache.
            let st = T::view_mut(unsafe { staging.get_mut() });
            let r = match c {
                AnyCache::List(c) => edgekv_hal::ingest(c, maint, seq, layer, kv, start, st),
                AnyCache::Bitmap(c) => edgekv_hal::ingest(c, maint, seq, layer, kv, start, st),
                AnyCache::Grouped(g) => ingest_grouped(g, maint, seq, layer, kv, start, st),
            };
            r.map_err(|e| maint.error(e.into()))
        })?;
        if let Some(out) = rows {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(n) };
        }
        Ok(())
    })();
    status(r)
}

/// Copies positions `[start, start + n)` of `(seq, layer, kv)` into `staging`, head-major
/// `[kv_heads][n][head_dim]` f32 (`n = staging_elems / (kv_heads x head_dim)`, whole cache
/// lines), using `row` (`kv_heads x head_dim` floats) as scratch, then cleans `staging`
/// through `maint` (NULL: no cache). Writes `n` to `rows` (optional: may be NULL). Values are
/// converted from the page format as `ekv_read_f32` converts them (`ekv_gather_f16`: then
/// rounded to nearest even).
///
/// Errors: `EKV_ERR_SHAPE_MISMATCH` (`staging_elems` not a whole number >= 1 of rows,
/// `row_elems` not one row), `EKV_ERR_MISALIGNED` (`staging` not whole cache lines),
/// `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_LAYER_OUT_OF_RANGE`, `EKV_ERR_POSITION_OUT_OF_RANGE`
/// (past the sequence, however far, or in pages released by a window): all checked before
/// anything is written. `EKV_ERR_MAINTENANCE` from the final clean (which must follow the
/// copy) is the one failure after which `staging` holds rows: not cleaned, a device must not
/// read it; `rows` is not written.
///
/// # Safety
///
/// `cache`, `maint` as `ekv_read_view`; `staging` and `row` NULL (with 0) or writable for their
/// lengths; `rows` (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_gather_f32(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut f32,
    staging_elems: usize,
    row: *mut f32,
    row_elems: usize,
    rows: *mut u32,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe {
        gather(
            cache,
            maint,
            seq,
            layer,
            kv,
            start,
            staging,
            staging_elems,
            row,
            row_elems,
            rows,
        )
    }
}

/// As `ekv_gather_f32`, into f16 bit patterns.
///
/// # Safety
///
/// As `ekv_gather_f32`, for `uint16_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_gather_f16(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut u16,
    staging_elems: usize,
    row: *mut u16,
    row_elems: usize,
    rows: *mut u32,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe {
        gather(
            cache,
            maint,
            seq,
            layer,
            kv,
            start,
            staging,
            staging_elems,
            row,
            row_elems,
            rows,
        )
    }
}

/// Takes f32 K or V rows a device wrote into `staging` (token-major `[n][kv_heads][head_dim]`,
/// whole cache lines): invalidates `staging` through `maint` (NULL: no cache), then writes the
/// rows to positions `[start, start + n)` of `(seq, layer, kv)` (reserved), converting or
/// quantizing to the page format as `ekv_write_f32` does (shared pages copied first). Writes `n`
/// to `rows` (optional: may be NULL).
///
/// Errors: `EKV_ERR_SHAPE_MISMATCH` (`staging_elems` not a whole number >= 1 of rows),
/// `EKV_ERR_MISALIGNED`, and the errors of `ekv_write_f32` for the same range
/// (`EKV_ERR_POSITION_OUT_OF_RANGE` however far past the sequence, `EKV_ERR_OUT_OF_PAGES` for
/// a copy-on-write...): all checked before the invalidate; the cache is unchanged on error.
///
/// # Safety
///
/// `cache`, `maint` as `ekv_read_view`; `staging` NULL (with 0) or writable for
/// `staging_elems` floats; `rows` (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_ingest_f32(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut f32,
    staging_elems: usize,
    rows: *mut u32,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe {
        ingest(
            cache,
            maint,
            seq,
            layer,
            kv,
            start,
            staging,
            staging_elems,
            rows,
        )
    }
}

/// As `ekv_ingest_f32`, from f16 bit patterns (as `ekv_write_f16` takes them).
///
/// # Safety
///
/// As `ekv_ingest_f32`, for `uint16_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_ingest_f16(
    cache: *mut EkvCache,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    staging: *mut u16,
    staging_elems: usize,
    rows: *mut u32,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe {
        ingest(
            cache,
            maint,
            seq,
            layer,
            kv,
            start,
            staging,
            staging_elems,
            rows,
        )
    }
}

/// `edgekv_hal::ingest` on a grouped cache: the same checks in the same order (rows, cache
/// lines, the write's every check in the layer's group), then the invalidate, then the write,
/// which cannot fail after its checks.
fn ingest_grouped<T: Element>(
    g: &mut edgekv::GroupedCache<'static, edgekv::FreeList<'static>>,
    maint: &mut impl edgekv_hal::CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: edgekv::Kv,
    start: u32,
    staging: &mut [T],
) -> Result<u32, edgekv_hal::HalError> {
    let shape = g.config().shape;
    let row = shape.kv_heads as usize * shape.head_dim as usize;
    if row == 0 || staging.is_empty() || staging.len() % row != 0 {
        return Err(edgekv_hal::HalError::LengthMismatch);
    }
    let bytes: &[u8] = bytemuck::cast_slice(staging);
    edgekv_hal::line_aligned(bytes.as_ptr().addr(), bytes.len(), maint.line_size())?;
    g.check_write(seq, layer, start, staging.len())?;
    maint.invalidate_slice(bytemuck::cast_slice_mut(staging))?;
    g.write(seq, layer, kv, start, staging)?;
    // Checked above: `start + n` fits the sequence's u32 length.
    Ok((staging.len() / row) as u32)
}
