//! Int8 (Q8_0) rows with NEON: the scores of four rows at a time for `G` query heads, each
//! group's exact integer sums either with `SDOT` (the query's 16-bit codes split into bytes by
//! [`arrange_query`](super::arrange_query)) or with `SMLAL` on codes widened to 16 bits, then
//! the portable kernel's float steps four rows per instruction (the value accumulation is
//! `values`). Each score takes its terms in the portable kernel's order
//! (`kernels::int8_scores`), so the bits are its (the kernel check compares them).

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int32x4_t, vaddq_f32, vaddq_s32, vcvtq_f32_s32, vdupq_n_f32,
    vdupq_n_s8, vdupq_n_s32, vget_low_s8, vget_low_s16, vld1_u16, vld1q_s8, vld1q_s16,
    vmlal_high_s16, vmlal_s16, vmovl_high_s8, vmovl_s8, vmulq_f32, vpaddq_s32, vshlq_n_s32,
    vst1q_f32,
};
use core::arch::asm;

use super::isa::widen4;
use crate::arch::kernels::Row;
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;

/// Codes per step of the integer sums (one 128-bit register of key codes).
const CHUNK: usize = 16;

/// `acc + Σ` of the four byte products of each lane (`SDOT`: exact).
#[inline(always)]
fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: register-only; only reached where the CPU has the dot-product extension (the
    // `Neon<true>` kernels, picked by `attention::dispatch` and the kernel check only where
    // `dotprod()` said so).
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// `[Σ x0, Σ x1, Σ x2, Σ x3]`: four vectors' lanes summed each (exact, wrapping `i32`).
#[inline(always)]
fn sums4(x: [int32x4_t; 4]) -> int32x4_t {
    // SAFETY: register-only NEON operations.
    unsafe { vpaddq_s32(vpaddq_s32(x[0], x[1]), vpaddq_s32(x[2], x[3])) }
}

/// Group `b`'s exact integer sums of four key rows (`k[i]`: row `i`'s `g` codes of the group)
/// with `G` heads' query codes (`qc`: `G` heads of `hd` codes, laid out for `SDOT` by
/// [`arrange_query`](super::arrange_query) when `DOT`): per head, row `i`'s sum in lane `i`.
///
/// With `SDOT`, a query code `q = 256·hi + lo` (`hi = q >> 8`, `lo` its low byte) gives
/// `Σ q·k = 256·Σ hi·k + Σ (lo − 128)·k + 128·Σ k`, three byte dot products whose terms all
/// fit an `i8`; the sums are exact (`|Σ q·k| < 2³¹` for `g ≤ 256`, and the wrapping `i32`
/// steps give it). Without, the key codes widened to 16 bits and multiplied into `i32` lanes by
/// `SMLAL`.
///
/// # Safety
///
/// `k[i]` points at `g` readable bytes; `qc` at `G·hd` codes with `b·g + g ≤ hd`; `g` a
/// multiple of 16; `DOT` only where the CPU has `SDOT`.
#[inline(always)]
unsafe fn group_sums4<const DOT: bool, const G: usize, const CH: usize>(
    qc: *const i16,
    hd: usize,
    g: usize,
    b: usize,
    k: [*const i8; 4],
) -> [int32x4_t; G] {
    // A group of `CH` chunks known at compile time unrolls (Q8_0's 32 codes: `CH = 2`).
    let chunks = if CH > 0 { CH } else { g / CHUNK };
    // SAFETY: the caller's obligations: each key load reads 16 of a row's `g` codes, each query
    // load 16 bytes (8 codes, or 16 split bytes) of a head's group.
    unsafe {
        let zero = vdupq_n_s32(0);
        if DOT {
            let ones = vdupq_n_s8(1);
            let mut ksum = [zero; 4];
            for c in 0..chunks {
                for (s, k) in ksum.iter_mut().zip(k) {
                    *s = sdot(*s, ones, vld1q_s8(k.add(c * CHUNK)));
                }
            }
            let ksum = vshlq_n_s32::<7>(sums4(ksum));
            // Loops, not `array::from_fn`: its closure may be left out of line.
            let mut out = [zero; G];
            for (h, o) in out.iter_mut().enumerate() {
                let qb = qc.add(h * hd + b * g).cast::<i8>();
                // One accumulator per row: the high bytes' sums, times 256 (`SHL`), then the
                // low bytes' added (exact in wrapping `i32` steps: the sum fits).
                let mut a = [zero; 4];
                for c in 0..chunks {
                    let qh = vld1q_s8(qb.add(2 * c * CHUNK));
                    for (i, a) in a.iter_mut().enumerate() {
                        *a = sdot(*a, qh, vld1q_s8(k[i].add(c * CHUNK)));
                    }
                }
                for a in a.iter_mut() {
                    *a = vshlq_n_s32::<8>(*a);
                }
                for c in 0..chunks {
                    let ql = vld1q_s8(qb.add(2 * c * CHUNK + CHUNK));
                    for (i, a) in a.iter_mut().enumerate() {
                        *a = sdot(*a, ql, vld1q_s8(k[i].add(c * CHUNK)));
                    }
                }
                *o = vaddq_s32(sums4(a), ksum);
            }
            out
        } else {
            let mut p = [[zero; 4]; G];
            for c in 0..chunks {
                for i in 0..4 {
                    let kv = vld1q_s8(k[i].add(c * CHUNK));
                    let (klo, khi) = (vmovl_s8(vget_low_s8(kv)), vmovl_high_s8(kv));
                    for (h, p) in p.iter_mut().enumerate() {
                        let qp = qc.add(h * hd + b * g + c * CHUNK);
                        let (q0, q1) = (vld1q_s16(qp), vld1q_s16(qp.add(8)));
                        let mut a = vmlal_s16(p[i], vget_low_s16(q0), vget_low_s16(klo));
                        a = vmlal_high_s16(a, q0, klo);
                        a = vmlal_s16(a, vget_low_s16(q1), vget_low_s16(khi));
                        p[i] = vmlal_high_s16(a, q1, khi);
                    }
                }
            }
            let mut out = [zero; G];
            for (o, p) in out.iter_mut().zip(p) {
                *o = sums4(p);
            }
            out
        }
    }
}

/// The scores of four rows for `G` heads (`k[i]`, `s[i]`: row `i`'s codes and f16 scales):
/// per group `score += (q scale · k scale) · (f32)sum`, groups in order from zero, four rows
/// per instruction (`kernels::int8_scores`'s steps).
///
/// # Safety
///
/// `k[i]` points at `hd` readable codes and `s[i]` at `2·hd/g` scale bytes; `q.codes` holds
/// `G·hd` codes and `q.scales` `G·hd/g` scales; `g` a multiple of 16 dividing `hd`; `DOT` only
/// where the CPU has `SDOT`.
#[inline(always)]
pub(super) unsafe fn scores4<const DOT: bool, const G: usize, const CH: usize>(
    q: QueryCodes<'_>,
    hd: usize,
    g: usize,
    k: [*const i8; 4],
    s: [*const u8; 4],
) -> [float32x4_t; G] {
    let nb = hd / g;
    // SAFETY: the caller's obligations (each scale read is 2 of a row's `2·nb` bytes).
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); G];
        for b in 0..nb {
            let mut ks = [0u16; 4];
            let mut kb = k;
            for i in 0..4 {
                ks[i] = u16::from_le_bytes(s[i].add(2 * b).cast::<[u8; 2]>().read());
                kb[i] = k[i].add(b * g);
            }
            let kscale = widen4(vld1_u16(ks.as_ptr()));
            let sums = group_sums4::<DOT, G, CH>(q.codes.as_ptr(), hd, g, b, kb);
            for (h, (acc, sum)) in acc.iter_mut().zip(sums).enumerate() {
                let scale = vmulq_f32(vdupq_n_f32(*q.scales.get_unchecked(h * nb + b)), kscale);
                *acc = vaddq_f32(*acc, vmulq_f32(scale, vcvtq_f32_s32(sum)));
            }
        }
        acc
    }
}

/// `PageKernels::int8_scores` for up to eight rows (group `g`, a multiple of 16 up to 256):
/// `None` unless every length fits (the portable kernel then runs).
#[inline(always)]
pub(super) fn row_scores<const DOT: bool, const G: usize>(
    q: QueryCodes<'_>,
    rows: &[Row<'_>],
    g: usize,
) -> Option<[[f32; 8]; G]> {
    let hd = q.codes.len() / G;
    let nb = hd / g;
    let n = rows.len().min(8);
    let fits = G > 0
        && n > 0
        && hd % g == 0
        && q.scales.len() >= G * nb
        && rows[..n]
            .iter()
            .all(|r| r.vals.len() >= hd && r.scales.len() >= 2 * nb);
    if !fits {
        return None;
    }
    let mut out = [[0f32; 8]; G];
    for r0 in (0..n).step_by(4) {
        // Rows past `n` repeat the last (their lanes are not stored).
        let row = |i: usize| rows[(r0 + i).min(n - 1)];
        let k = core::array::from_fn(|i| row(i).vals.as_ptr().cast::<i8>());
        let s = core::array::from_fn(|i| row(i).scales.as_ptr());
        // SAFETY: every row holds `hd` codes and `2·nb` scale bytes, the query `G·hd` codes and
        // `G·nb` scales (checked above); `g` divides `hd` and is a multiple of 16 (the
        // caller's `scores_take`); `DOT` only where the CPU has `SDOT` (the type's contract).
        let acc = unsafe {
            if g == 32 {
                scores4::<DOT, G, 2>(q, hd, g, k, s)
            } else {
                scores4::<DOT, G, 0>(q, hd, g, k, s)
            }
        };
        for (o, acc) in out.iter_mut().zip(acc) {
            let mut v = [0f32; 4];
            // SAFETY: writes the 16 bytes of `v`.
            unsafe { vst1q_f32(v.as_mut_ptr(), acc) };
            let m = (n - r0).min(4);
            o[r0..r0 + m].copy_from_slice(&v[..m]);
        }
    }
    // Lanes past the rows stay zero, as the portable kernel leaves them.
    Some(out)
}

/// Whether the page's rows hold `hd` codes in groups of `g` and their scales each (the view
/// checked the rows against its slices when it was built).
#[inline(always)]
pub(super) fn page_fits(rows: &PageRows<'_>, hd: usize, g: usize) -> bool {
    let nb = hd / g.max(1);
    g > 0
        && hd % g == 0
        && hd > 0
        && rows.stride >= hd
        && rows.sstride >= 2 * nb
        && rows.row_bytes >= hd
        && rows.scale_bytes >= 2 * nb
}

/// `PageKernels::int8_page_scores` for `G` heads (group `g`, a multiple of 16 up to 256): four
/// rows at a time ([`scores4`]), each head's scores stored straight into `scores[h·p..]`.
/// `false`, nothing written, unless every length fits.
#[inline(always)]
pub(super) fn page_scores<const DOT: bool, const G: usize>(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    g: usize,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / G.max(1);
    let n = rows.n;
    if G == 0
        || !page_fits(rows, hd, g)
        || n > p
        || scores.len() < G * p
        || q.scales.len() < G * (hd / g)
    {
        return false;
    }
    let (k, s) = (rows.vals.as_ptr(), rows.scales.as_ptr());
    for r0 in (0..n).step_by(4) {
        // Rows past `n` repeat the last (their lanes are not stored).
        let at = |i: usize| (r0 + i).min(n - 1);
        // SAFETY: rows `< n` lie within the checked page (`hd` codes, `2·hd/g` scale bytes
        // each); the query's lengths are checked above; `DOT` only where the CPU has `SDOT`.
        let acc = unsafe {
            let (mut kr, mut sr) = ([k.cast::<i8>(); 4], [s; 4]);
            for i in 0..4 {
                kr[i] = k.add(at(i) * rows.stride).cast::<i8>();
                sr[i] = s.add(at(i) * rows.sstride);
            }
            if g == 32 {
                scores4::<DOT, G, 2>(q, hd, g, kr, sr)
            } else {
                scores4::<DOT, G, 0>(q, hd, g, kr, sr)
            }
        };
        let m = (n - r0).min(4);
        for (h, acc) in acc.iter().enumerate() {
            if m == 4 {
                // SAFETY: writes four of head `h`'s `p ≥ n ≥ r0 + 4` scores.
                unsafe { vst1q_f32(scores.as_mut_ptr().add(h * p + r0), *acc) };
            } else {
                let mut v = [0f32; 4];
                // SAFETY: writes the 16 bytes of `v`.
                unsafe { vst1q_f32(v.as_mut_ptr(), *acc) };
                scores[h * p + r0..][..m].copy_from_slice(&v[..m]);
            }
        }
    }
    true
}
