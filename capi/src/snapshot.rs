//! Snapshots through C: a sequence's image (header, token ids, pages, CRC-32; the layout of
//! `edgekv::snapshot`) written into a caller's RAM buffer, and restored from one. A board copies
//! the buffer to flash (or maps flash as the buffer to restore from) with its own driver.

use core::ffi::c_void;

use edgekv::SeqId;
use edgekv::snapshot::{Header, RamFlash, SliceFlash};

use super::cache::query;
use super::handle::{EkvCache, Handle, dispatch_flat};
use super::ptr::{Buf, Out, disjoint, opt_span};
use super::status::{EKV_ERR_BUFFER_TOO_SMALL, EkvStatus, Fail, status};
use super::types::EkvSeq;

/// Bytes of the snapshot image of `seq` in its current length (header, one token id per
/// position, its pages in every layer, CRC-32), written to `out` (required): the `buf_bytes`
/// `ekv_snapshot_to_buffer` needs.
///
/// Errors: `EKV_ERR_NULL`, `EKV_ERR_BAD_HANDLE`, `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_OVERFLOW`
/// (an image past 4 GiB).
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `out` (required) is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_snapshot_size(
    cache: *mut EkvCache,
    seq: EkvSeq,
    out: *mut usize,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            dispatch_flat!(c, c => {
                let len = c.seq_len(SeqId::from_raw(seq))?;
                Ok(Header::new(c.config(), len, 0)?.image as usize)
            })
        })
    })
}

/// Writes the snapshot image of `seq` with its `tokens` (one id per position, which the cache
/// does not keep) and `fingerprint` (model / namespace) into `buf`, and its size to
/// `image_bytes` (optional: may be NULL). The cache is not changed. Everything is checked
/// before `buf` is written: on error it is untouched.
///
/// The image (little-endian): a 64-byte header (magic "EKVS", layout version, the fingerprint,
/// shape, K and V formats and rotations, page_tokens, token / page / payload / image sizes), the
/// token ids, the pages' bytes in every layer (rows past the length zero; independent of the
/// cache's alignment and pool size), then a CRC-32 (ISO-HDLC) of everything before it. Version
/// 1 unless pages are 4-bit or rotated (then 2, which older libraries refuse).
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_BUFFER_TOO_SMALL` (`buf_bytes` below
/// `ekv_snapshot_size`; `image_bytes` then holds the bytes needed), `EKV_ERR_LENGTH_MISMATCH`
/// (`n_tokens` not the sequence's length), `EKV_ERR_WINDOWED_SEQUENCE` (pages released by
/// `ekv_seq_slide`), `EKV_ERR_OVERFLOW`, `EKV_ERR_OVERLAP`, `EKV_ERR_NULL`.
///
/// # Safety
///
/// `cache` as `ekv_snapshot_size`; `tokens` NULL (with `n_tokens` 0) or `n_tokens` readable
/// `uint32_t`s; `buf` NULL (with 0) or `buf_bytes` writable bytes; `image_bytes` (optional)
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_snapshot_to_buffer(
    cache: *mut EkvCache,
    seq: EkvSeq,
    tokens: *const u32,
    n_tokens: usize,
    fingerprint: u64,
    buf: *mut c_void,
    buf_bytes: usize,
    image_bytes: *mut usize,
) -> EkvStatus {
    let r = (|| {
        let tokens = Buf::input(tokens, n_tokens)?;
        let buf = Buf::output(buf.cast::<u8>(), buf_bytes)?;
        let image = Out::optional(image_bytes)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let (n, r) = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[buf.span(), tokens.span(), opt_span(&image), s, d, m])?;
            // SAFETY: valid by the caller's obligation; disjoint from each other and from the
            // cache's memory (checked above).
            let (tokens, bytes) = unsafe { (tokens.get(), buf.get_mut()) };
            let seq = SeqId::from_raw(seq);
            dispatch_flat!(c, c => {
                let len = c.seq_len(seq)?;
                let need = Header::new(c.config(), len, fingerprint)?.image as usize;
                let Some(bytes) = bytes.get_mut(..need) else {
                    return Ok((need, Err(Fail(EKV_ERR_BUFFER_TOO_SMALL))));
                };
                // RAM: no erase or program granularity, and no failure once the checks
                // `snapshot` makes before its first erase have passed.
                let mut flash = RamFlash::<1, 1>::new(bytes);
                let header = c.snapshot(seq, tokens, fingerprint, &mut flash, 0)?;
                Ok((header.image as usize, Ok(())))
            })
        })?;
        if let Some(out) = image {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(n) };
        }
        r
    })();
    status(r)
}

/// Restores an image from `buf` (as `ekv_snapshot_to_buffer` wrote it) into a new paged
/// sequence, whose handle goes to `out` (required); its token ids go to `tokens` (`capacity`
/// entries) and their number to `n_tokens` (optional: may be NULL). Everything is verified
/// before the pool is touched (magic, version, header, CRC-32, `fingerprint`, shape / formats /
/// page size), then the pages are allocated all or nothing; with a prefix index the image's
/// tokens are committed as prompt and its whole chunks published. On error the cache and the
/// outputs are as they were.
///
/// Compatible caches: the same layers, kv_heads, head_dim, page_tokens, K and V formats and
/// rotations as the cache that wrote the image (else `EKV_ERR_CONFIG_MISMATCH`); alignment,
/// pool size, sequence limits, allocator and namespace may differ. `fingerprint` must equal the
/// one it was written with (`EKV_ERR_FINGERPRINT_MISMATCH`): use one that names the model and
/// namespace. The sequence is paged (even if the saved one was contiguous) and its pages hold
/// the saved bytes bit for bit, so reads and attention give what they gave before the save.
/// Every single-bit flip of an image is detected.
///
/// Errors: `EKV_ERR_TRUNCATED`, `EKV_ERR_BAD_MAGIC`, `EKV_ERR_UNSUPPORTED_VERSION`,
/// `EKV_ERR_CORRUPT_SNAPSHOT`, `EKV_ERR_CRC_MISMATCH`, `EKV_ERR_FINGERPRINT_MISMATCH`,
/// `EKV_ERR_CONFIG_MISMATCH`, `EKV_ERR_LENGTH_MISMATCH` (`capacity` below the image's token
/// count), `EKV_ERR_TOO_MANY_SEQUENCES`, `EKV_ERR_SEQUENCE_FULL`, `EKV_ERR_OUT_OF_PAGES`,
/// `EKV_ERR_OVERLAP`, `EKV_ERR_NULL`.
///
/// # Safety
///
/// `cache` as `ekv_snapshot_size`; `buf` NULL (with 0) or `buf_bytes` readable bytes that
/// nothing writes during the call; `tokens` NULL (with `capacity` 0) or writable for
/// `capacity` `uint32_t`s; `n_tokens` (optional) NULL or writable; `out` (required) NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_restore_from_buffer(
    cache: *mut EkvCache,
    buf: *const c_void,
    buf_bytes: usize,
    fingerprint: u64,
    tokens: *mut u32,
    capacity: usize,
    n_tokens: *mut usize,
    out: *mut EkvSeq,
) -> EkvStatus {
    let r = (|| {
        let buf = Buf::input(buf.cast::<u8>(), buf_bytes)?;
        let tokens = Buf::output(tokens, capacity)?;
        let n_out = Out::optional(n_tokens)?;
        let out = Out::new(out)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let (seq, n) = h.with(|c, a| {
            let [s, d, m] = a.spans();
            let outs = [tokens.span(), opt_span(&n_out), out.span()];
            disjoint(&[buf.span(), outs[0], outs[1], outs[2], s, d, m])?;
            // SAFETY: valid by the caller's obligation; disjoint from each other and from the
            // cache's memory (checked above).
            let (bytes, toks) = unsafe { (buf.get(), tokens.get_mut()) };
            let (seq, header) =
                dispatch_flat!(c, c => c.restore(&mut SliceFlash(bytes), 0, fingerprint, toks))?;
            Ok((seq.to_raw(), header.tokens as usize))
        })?;
        // SAFETY: checked, writable by the caller's obligation.
        unsafe {
            out.set(seq);
            if let Some(o) = n_out {
                o.set(n);
            }
        }
        Ok(())
    })();
    status(r)
}
