//! Int8 (Q8_0) rows with NEON: the scores of four rows at a time for `G` query heads, each
//! group's exact integer sums either with `SDOT` (the query's 16-bit codes split into bytes by
//! [`arrange_query`](super::arrange_query)) or with `SMLAL` on codes widened to 16 bits, then
//! the portable kernel's float steps four rows per instruction; and the value accumulation of
//! Q8_0 rows, sixteen lanes per head in registers across a page's rows. Each score and each
//! output element takes its terms in the portable kernels' order (`kernels::int8_scores`,
//! `kernels::int8_add_scaled_rows`), so the bits are theirs (the kernel check compares them).

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int32x4_t, vaddq_f32, vaddq_s32, vcvtq_f32_s32, vdupq_n_f32,
    vdupq_n_s8, vdupq_n_s32, vget_low_s8, vget_low_s16, vld1_u16, vld1q_f32, vld1q_s8, vld1q_s16,
    vmlal_high_s16, vmlal_s16, vmovl_high_s8, vmovl_high_s16, vmovl_s8, vmovl_s16, vmulq_f32,
    vmulq_n_f32, vpaddq_s32, vshlq_n_s32, vst1q_f32,
};
use core::arch::asm;

use super::isa::widen4;
use crate::arch::kernels::Row;
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::format::u16_at;
use crate::numeric::Widen;

/// Codes per step of the integer sums (one 128-bit register of key codes).
const CHUNK: usize = 16;

/// Q8_0's group: 32 codes per scale.
const Q8_GROUP: usize = 32;

/// Rows whose scaled weights [`page_values`] keeps at a time (a page of 16 tokens: all).
const ROWS: usize = 32;

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
unsafe fn group_sums4<const DOT: bool, const G: usize>(
    qc: *const i16,
    hd: usize,
    g: usize,
    b: usize,
    k: [*const i8; 4],
) -> [int32x4_t; G] {
    // SAFETY: the caller's obligations: each key load reads 16 of a row's `g` codes, each query
    // load 16 bytes (8 codes, or 16 split bytes) of a head's group.
    unsafe {
        let zero = vdupq_n_s32(0);
        if DOT {
            let ones = vdupq_n_s8(1);
            let mut ksum = [zero; 4];
            for c in 0..g / CHUNK {
                for (s, k) in ksum.iter_mut().zip(k) {
                    *s = sdot(*s, ones, vld1q_s8(k.add(c * CHUNK)));
                }
            }
            let ksum = vshlq_n_s32::<7>(sums4(ksum));
            core::array::from_fn(|h| {
                let qb = qc.add(h * hd + b * g).cast::<i8>();
                let (mut hi, mut lo) = ([zero; 4], [zero; 4]);
                for c in 0..g / CHUNK {
                    let qh = vld1q_s8(qb.add(2 * c * CHUNK));
                    let ql = vld1q_s8(qb.add(2 * c * CHUNK + CHUNK));
                    for i in 0..4 {
                        let kv = vld1q_s8(k[i].add(c * CHUNK));
                        hi[i] = sdot(hi[i], qh, kv);
                        lo[i] = sdot(lo[i], ql, kv);
                    }
                }
                vaddq_s32(vaddq_s32(vshlq_n_s32::<8>(sums4(hi)), sums4(lo)), ksum)
            })
        } else {
            let mut p = [[zero; 4]; G];
            for c in 0..g / CHUNK {
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
            core::array::from_fn(|h| sums4(p[h]))
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
unsafe fn scores4<const DOT: bool, const G: usize>(
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
            let ks: [u16; 4] = s.map(|s| u16::from_le_bytes(s.add(2 * b).cast::<[u8; 2]>().read()));
            let kscale = widen4(vld1_u16(ks.as_ptr()));
            let kb = k.map(|k| k.add(b * g));
            let sums = group_sums4::<DOT, G>(q.codes.as_ptr(), hd, g, b, kb);
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
        let acc = unsafe { scores4::<DOT, G>(q, hd, g, k, s) };
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
fn page_fits(rows: &PageRows<'_>, hd: usize, g: usize) -> bool {
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
            scores4::<DOT, G>(
                q,
                hd,
                g,
                core::array::from_fn(|i| k.add(at(i) * rows.stride).cast::<i8>()),
                core::array::from_fn(|i| s.add(at(i) * rows.sstride)),
            )
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

/// One V row's terms for `G` heads' accumulators of 16 lanes: the 16 codes at `c` widened to
/// f32 (exact), then `a[h][j] + w(h) · x[j]`, an `FMUL` and an `FADD` (no fused multiply-add:
/// the portable kernel's rounding).
///
/// # Safety
///
/// `c` points at 16 readable bytes.
#[inline(always)]
unsafe fn add_row16<const G: usize>(
    a: &mut [[float32x4_t; 4]; G],
    c: *const i8,
    w: impl Fn(usize) -> f32,
) {
    // SAFETY: the caller's obligation: the load reads the 16 bytes at `c`.
    unsafe {
        let v = vld1q_s8(c);
        let (lo, hi) = (vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v));
        let x = [
            vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
            vcvtq_f32_s32(vmovl_high_s16(lo)),
            vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
            vcvtq_f32_s32(vmovl_high_s16(hi)),
        ];
        for (h, a) in a.iter_mut().enumerate() {
            let w = w(h);
            for (a, x) in a.iter_mut().zip(x) {
                *a = vaddq_f32(*a, vmulq_n_f32(x, w));
            }
        }
    }
}

/// The 16 accumulators `acc[h·d + at..][..16]` of `G` heads, through `f`.
///
/// # Safety
///
/// `acc` holds `G·d` elements and `at + 16 ≤ d`.
#[inline(always)]
unsafe fn with_acc16<const G: usize>(
    acc: &mut [f32],
    d: usize,
    at: usize,
    f: impl FnOnce(&mut [[float32x4_t; 4]; G]),
) {
    // SAFETY: the caller's obligation: loads and stores cover 16 of each head's `d` elements.
    unsafe {
        let mut a = [[vdupq_n_f32(0.0); 4]; G];
        for (h, a) in a.iter_mut().enumerate() {
            for (j, a) in a.iter_mut().enumerate() {
                *a = vld1q_f32(acc.as_ptr().add(h * d + at + 4 * j));
            }
        }
        f(&mut a);
        for (h, a) in a.iter().enumerate() {
            for (j, a) in a.iter().enumerate() {
                vst1q_f32(acc.as_mut_ptr().add(h * d + at + 4 * j), *a);
            }
        }
    }
}

/// `PageKernels::int8_add_rows` of up to eight Q8_0 rows (`head_dim` a multiple of 32, `G ≤
/// 4`): per group each row's weights times its scale (`kernels::scale_weights`), then per 16
/// lanes each head's accumulators in registers across the rows, `acc + w · x` row by row.
/// `false`, nothing written, unless every length fits.
#[inline(always)]
pub(super) fn add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>]) -> bool {
    let d = acc.len() / G.max(1);
    let m = p.len().min(rows.len()).min(8);
    let (p, rows) = (&p[..m], &rows[..m]);
    let nb = d / Q8_GROUP;
    if G == 0
        || G > 4
        || d % Q8_GROUP != 0
        || rows
            .iter()
            .any(|r| r.vals.len() < d || r.scales.len() < 2 * nb)
    {
        return false;
    }
    for k in 0..nb {
        let mut ps = [[0f32; G]; 8];
        crate::arch::kernels::scale_weights::<super::Neon<false>, G>(&mut ps, p, rows, k);
        for half in 0..2 {
            let at = k * Q8_GROUP + half * 16;
            // SAFETY: `at + 16 ≤ d`, `acc` holds `G·d` (checked above); each row holds `d`
            // codes.
            unsafe {
                with_acc16::<G>(acc, d, at, |a| {
                    for (ps, row) in ps.iter().zip(rows) {
                        add_row16::<G>(a, row.vals.as_ptr().add(at).cast::<i8>(), |h| ps[h]);
                    }
                });
            }
        }
    }
    true
}

/// `PageKernels::int8_page_values` for Q8_0 rows and `G ≤ 4` heads: per group, each row's
/// weights times its scale (one rounding each, as `kernels::scale_weights`), then per 16 lanes
/// the heads' accumulators in registers across up to [`ROWS`] rows, `acc + w · x` row by row in
/// order. `false`, nothing written, unless every length fits.
#[inline(always)]
pub(super) fn page_values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
) -> bool {
    let d = acc.len() / G.max(1);
    let n = rows.n;
    if G == 0
        || G > 4
        || !page_fits(rows, d, Q8_GROUP)
        || acc.len() != G * d
        || n > p
        || w.len() < G * p
    {
        return false;
    }
    let v = rows.vals.as_ptr();
    for k in 0..d / Q8_GROUP {
        for c0 in (0..n).step_by(ROWS) {
            let m = (n - c0).min(ROWS);
            let mut ps = [[0f32; ROWS]; G];
            for r in 0..m {
                let s = <super::Neon<false> as Widen>::one(u16_at(
                    &rows.scales[(c0 + r) * rows.sstride..],
                    k,
                ));
                for (h, ps) in ps.iter_mut().enumerate() {
                    ps[r] = w[h * p + c0 + r] * s;
                }
            }
            for half in 0..2 {
                let at = k * Q8_GROUP + half * 16;
                // SAFETY: `at + 16 ≤ d`, `acc` holds `G·d` (checked above); rows `< n` lie
                // within the checked page (`d` codes each).
                unsafe {
                    with_acc16::<G>(acc, d, at, |a| {
                        (0..m).for_each(|r| {
                            let c = v.add((c0 + r) * rows.stride + at).cast::<i8>();
                            add_row16::<G>(a, c, |h| ps[h][r]);
                        });
                    });
                }
            }
        }
    }
    true
}
