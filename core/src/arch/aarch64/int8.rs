//! Int8 (Q8_0) rows with NEON: the scores of four rows at a time for `G` query heads, each
//! group's exact integer sums either with `SDOT` by element on the four rows' codes loaded rows
//! in lanes (the query's 16-bit codes split into bytes by
//! [`arrange_query`](super::arrange_query)) or with `SMLAL` on codes widened to 16 bits, then
//! the portable kernel's float steps four rows per instruction (the value accumulation is
//! `values`). Each score takes its terms in the portable kernel's order
//! (`kernels::int8_scores`), so the bits are its (the kernel check compares them).

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int32x4_t, vaddq_f32, vaddq_s32, vcvtq_f32_s32, vdupq_n_f32,
    vdupq_n_s8, vdupq_n_s32, vget_low_s8, vget_low_s16, vld1_u16, vld1q_s8, vld1q_s16,
    vld4q_dup_s32, vld4q_lane_s32, vmlal_high_s16, vmlal_s16, vmovl_high_s8, vmovl_s8, vmulq_f32,
    vpaddq_s32, vreinterpretq_s8_s32, vshlq_n_s32, vst1q_f32,
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

/// Chunk `t`'s codes (16 from code `16·t`) of four rows (`k[i]`: row `i`), rows in lanes:
/// vector `j` holds row `i`'s codes `4j..4j + 4` in lane `i` (`LD4R` for row 0, then `LD4` by
/// lane: one load per row, the transposition free).
///
/// # Safety
///
/// `k[i]` points at `16·t + 16` readable bytes (no alignment needed: `LD4` takes any address).
#[inline(always)]
unsafe fn rows_in_lanes(k: [*const i8; 4], t: usize) -> [int8x16_t; 4] {
    // SAFETY: the caller's obligation: each load reads 16 bytes of one row.
    unsafe {
        let at = |i: usize| k[i].add(CHUNK * t).cast::<i32>();
        let mut x = vld4q_dup_s32(at(0));
        x = vld4q_lane_s32::<1>(at(1), x);
        x = vld4q_lane_s32::<2>(at(2), x);
        x = vld4q_lane_s32::<3>(at(3), x);
        let b = vreinterpretq_s8_s32;
        [b(x.0), b(x.1), b(x.2), b(x.3)]
    }
}

/// `acc + Σ_j k[j] · q[4j..4j + 4]` (`SDOT` by element: lane `i` takes the four bytes of lane
/// `i` of `k[j]` times query bytes `4j..4j + 4`; exact).
///
/// # Safety
///
/// Only where the CPU has the dot-product extension.
#[inline(always)]
unsafe fn sdot_rows(acc: int32x4_t, k: &[int8x16_t; 4], q: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only; the caller's obligation (`SDOT`).
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "sdot {acc:v}.4s, {k0:v}.16b, {q:v}.4b[0]",
            "sdot {acc:v}.4s, {k1:v}.16b, {q:v}.4b[1]",
            "sdot {acc:v}.4s, {k2:v}.16b, {q:v}.4b[2]",
            "sdot {acc:v}.4s, {k3:v}.16b, {q:v}.4b[3]",
            acc = inout(vreg) acc,
            k0 = in(vreg) k[0],
            k1 = in(vreg) k[1],
            k2 = in(vreg) k[2],
            k3 = in(vreg) k[3],
            q = in(vreg) q,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// The scores of four rows for `G` heads with `SDOT` (`qc`: `G` heads of `hd` codes laid out
/// by [`arrange_query`](super::arrange_query), `qs` their scales; `k[i]`, `s[i]`: row `i`'s
/// codes and f16 scales), rows in lanes ([`rows_in_lanes`]): per group, each head's exact sum
/// in one accumulator, then `score += (q scale · k scale) · (f32)sum`, groups in order from zero
/// (`kernels::int8_scores`' steps).
///
/// A query code `q = 256·hi + lo` (`hi = q >> 8`, `lo` its low byte) gives
/// `Σ q·k = 256·Σ hi·k + Σ (lo − 128)·k + 128·Σ k`: the high bytes' sums, shifted by 8, then the
/// low bytes' added, then the keys' sum times 128 (exact in wrapping `i32` steps: the sum fits,
/// `|Σ q·k| < 2³¹` for `g ≤ 256`).
///
/// # Safety
///
/// As [`scores4`]'s; `CH` is `g / 16` or 0; only where the CPU has `SDOT`.
#[inline(always)]
unsafe fn dot_scores4<const G: usize, const CH: usize>(
    qc: *const i16,
    qs: &[f32],
    hd: usize,
    g: usize,
    k: [*const i8; 4],
    s: [*const u8; 4],
) -> [float32x4_t; G] {
    // A group of `CH` chunks known at compile time unrolls and keeps its keys in registers
    // between the high and the low bytes (Q8_0's 32 codes: `CH = 2`); otherwise they load twice.
    let chunks = if CH > 0 { CH } else { g / CHUNK };
    let nb = hd / g;
    // SAFETY: the caller's obligations: each key load reads 16 of a row's `hd` codes (chunk
    // `t < hd/16`), each query load 16 bytes of a head's split chunk, each scale read 2 of a row's
    // `2·nb` bytes; `SDOT` only where the CPU has it.
    unsafe {
        let ones = vdupq_n_s8(1);
        let mut score = [vdupq_n_f32(0.0); G];
        for b in 0..nb {
            let kscale = kscales4(s, b);
            let mut acc = [vdupq_n_s32(0); G];
            let mut ksum = vdupq_n_s32(0);
            let mut kept = [[vdupq_n_s8(0); 4]; CH];
            for c in 0..chunks {
                let t = b * chunks + c;
                let kv = rows_in_lanes(k, t);
                if let Some(kept) = kept.get_mut(c) {
                    *kept = kv;
                }
                for kv in kv {
                    ksum = sdot(ksum, kv, ones);
                }
                for (h, acc) in acc.iter_mut().enumerate() {
                    let qh = vld1q_s8(qc.add(h * hd + t * CHUNK).cast::<i8>());
                    *acc = sdot_rows(*acc, &kv, qh);
                }
            }
            for acc in acc.iter_mut() {
                *acc = vshlq_n_s32::<8>(*acc);
            }
            for c in 0..chunks {
                let t = b * chunks + c;
                let kv = match kept.get(c) {
                    Some(&kv) => kv,
                    None => rows_in_lanes(k, t),
                };
                for (h, acc) in acc.iter_mut().enumerate() {
                    let ql = vld1q_s8(qc.add(h * hd + t * CHUNK).cast::<i8>().add(CHUNK));
                    *acc = sdot_rows(*acc, &kv, ql);
                }
            }
            let kfix = vshlq_n_s32::<7>(ksum);
            for (h, (score, acc)) in score.iter_mut().zip(acc).enumerate() {
                let scale = vmulq_f32(vdupq_n_f32(*qs.get_unchecked(h * nb + b)), kscale);
                let sum = vaddq_s32(acc, kfix);
                *score = vaddq_f32(*score, vmulq_f32(scale, vcvtq_f32_s32(sum)));
            }
        }
        score
    }
}

/// Group `b`'s scales of four rows (`s[i]`: row `i`'s f16 scales), widened (`FCVTL`: exact).
///
/// # Safety
///
/// `s[i]` points at `2·b + 2` readable bytes.
#[inline(always)]
unsafe fn kscales4(s: [*const u8; 4], b: usize) -> float32x4_t {
    let mut ks = [0u16; 4];
    for (i, ks) in ks.iter_mut().enumerate() {
        // SAFETY: the caller's obligation.
        *ks = u16::from_le_bytes(unsafe { s[i].add(2 * b).cast::<[u8; 2]>().read() });
    }
    // SAFETY: reads the 8 bytes of `ks`.
    widen4(unsafe { vld1_u16(ks.as_ptr()) })
}

/// Group `b`'s exact integer sums of four key rows (`k[i]`: row `i`'s `g` codes of the group)
/// with `G` heads' query codes (`qc`: `G` heads of `hd` codes) without `SDOT`: the key codes
/// widened to 16 bits and multiplied into `i32` lanes by `SMLAL`; per head, row `i`'s sum in
/// lane `i`.
///
/// # Safety
///
/// `k[i]` points at `g` readable bytes; `qc` at `G·hd` codes with `b·g + g ≤ hd`; `g` a
/// multiple of 16.
#[inline(always)]
unsafe fn group_sums4<const G: usize, const CH: usize>(
    qc: *const i16,
    hd: usize,
    g: usize,
    b: usize,
    k: [*const i8; 4],
) -> [int32x4_t; G] {
    // A group of `CH` chunks known at compile time unrolls (Q8_0's 32 codes: `CH = 2`).
    let chunks = if CH > 0 { CH } else { g / CHUNK };
    // SAFETY: the caller's obligations: each key load reads 16 of a row's `g` codes, each query
    // load 8 codes of a head's group.
    unsafe {
        let zero = vdupq_n_s32(0);
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
    if DOT {
        // SAFETY: the caller's obligations.
        return unsafe { dot_scores4::<G, CH>(q.codes.as_ptr(), q.scales, hd, g, k, s) };
    }
    let nb = hd / g;
    // SAFETY: the caller's obligations (each scale read is 2 of a row's `2·nb` bytes).
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); G];
        for b in 0..nb {
            let mut kb = k;
            for (kb, k) in kb.iter_mut().zip(k) {
                *kb = k.add(b * g);
            }
            let kscale = kscales4(s, b);
            let sums = group_sums4::<G, CH>(q.codes.as_ptr(), hd, g, b, kb);
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
