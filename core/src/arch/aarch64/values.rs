//! The value accumulation of Q8_0 rows with NEON: `acc[h·d + i] += w[h][r] · x_r[i]` for `G ≤ 4`
//! query heads of one KV head, every V row's codes widened to f32 once for all of them, sixteen
//! output lanes per head in registers across a page's rows.
//!
//! Per group of 32, each row's weights are first multiplied by the row's f16 scale
//! (`kernels::scale_weights`' one rounding), four rows per instruction; then each row's terms go
//! into the accumulators as an `FMUL` by one lane of those four rows' weights and an `FADD` (no
//! fused multiply-add: the portable kernel's two roundings), row by row in order. Each output
//! element takes its terms in the portable kernels' order (`kernels::int8_add_scaled_rows`), so
//! the bits are theirs (the kernel check and `attention::dispatch`'s tests compare them).

use core::arch::aarch64::{
    float32x4_t, vaddq_f32, vcvtq_n_f32_s32, vdupq_n_f32, vld1_u16, vld1q_f32, vld1q_u8, vmulq_f32,
    vmulq_laneq_f32, vmulq_n_f32, vqtbl1q_u8, vreinterpretq_s32_u8, vst1q_f32,
};

use super::int8::page_fits;
use super::isa::widen4;
use crate::arch::kernels::Row;
use crate::arch::rows::PageRows;
use crate::format::u16_at;
use crate::numeric::Widen;

/// Q8_0's group: 32 codes per scale.
const Q8_GROUP: usize = 32;

/// Rows whose scaled weights [`page_values`] keeps at a time (a page of 16 tokens: all).
const ROWS: usize = 32;

/// Byte indices of `TBL` that put code `4m + j` of 16 in the top byte of lane `j` of vector `m`
/// (the other bytes zero: index 255 is out of range).
const TOP_BYTES: [[u8; 16]; 4] = {
    let mut t = [[255u8; 16]; 4];
    let mut i = 0;
    while i < 16 {
        t[i / 4][4 * (i % 4) + 3] = i as u8;
        i += 1;
    }
    t
};

/// The 16 codes at `c` widened to f32 (exact): each code into the top byte of an `i32` lane
/// (`TBL`), then converted with 24 fraction bits (`SCVTF`: `code · 2²⁴ / 2²⁴`).
///
/// # Safety
///
/// `c` points at 16 readable bytes.
#[inline(always)]
pub(super) unsafe fn widen16(c: *const i8) -> [float32x4_t; 4] {
    // SAFETY: the caller's obligation: the load reads the 16 bytes at `c`; the index loads read
    // the 16 bytes of a `TOP_BYTES` row.
    unsafe {
        let v = vld1q_u8(c.cast::<u8>());
        let mut x = [vdupq_n_f32(0.0); 4];
        for (x, idx) in x.iter_mut().zip(&TOP_BYTES) {
            let top = vqtbl1q_u8(v, vld1q_u8(idx.as_ptr()));
            *x = vcvtq_n_f32_s32::<24>(vreinterpretq_s32_u8(top));
        }
        x
    }
}

/// One V row's terms for `G` heads' accumulators of 16 lanes: the 16 codes at `c` widened to
/// f32 (exact), then `a[h][j] + w(h) · x[j]`, an `FMUL` and an `FADD`.
///
/// # Safety
///
/// `c` points at 16 readable bytes.
#[inline(always)]
unsafe fn add_row16<const G: usize>(a: &mut [[float32x4_t; 4]; G], c: *const i8, w: [f32; G]) {
    // SAFETY: the caller's obligation.
    let x = unsafe { widen16(c) };
    for (a, &w) in a.iter_mut().zip(&w) {
        for (a, x) in a.iter_mut().zip(x) {
            // SAFETY: register-only NEON operations.
            *a = unsafe { vaddq_f32(*a, vmulq_n_f32(x, w)) };
        }
    }
}

/// Row `L` of four rows' terms: as [`add_row16`] with head `h`'s weight lane `L` of `w[h]`
/// (`FMUL` by element: the same product).
///
/// # Safety
///
/// `c` points at 16 readable bytes.
#[inline(always)]
unsafe fn add_row16_lane<const G: usize, const L: i32>(
    a: &mut [[float32x4_t; 4]; G],
    c: *const i8,
    w: &[float32x4_t; G],
) {
    // SAFETY: the caller's obligation.
    let x = unsafe { widen16(c) };
    for (a, w) in a.iter_mut().zip(w) {
        for (a, x) in a.iter_mut().zip(x) {
            // SAFETY: register-only NEON operations.
            *a = unsafe { vaddq_f32(*a, vmulq_laneq_f32::<L>(x, *w)) };
        }
    }
}

/// The 16 accumulators `acc[h·d + at..][..16]` of `G` heads, loaded.
///
/// # Safety
///
/// `acc` holds `G·d` elements and `at + 16 ≤ d`.
#[inline(always)]
pub(super) unsafe fn load_acc16<const G: usize>(
    acc: &[f32],
    d: usize,
    at: usize,
) -> [[float32x4_t; 4]; G] {
    // SAFETY: the caller's obligation: each load reads 4 of a head's 16 elements at `at`.
    unsafe {
        let mut a = [[vdupq_n_f32(0.0); 4]; G];
        for (h, a) in a.iter_mut().enumerate() {
            for (j, a) in a.iter_mut().enumerate() {
                *a = vld1q_f32(acc.as_ptr().add(h * d + at + 4 * j));
            }
        }
        a
    }
}

/// [`load_acc16`]'s accumulators stored back.
///
/// # Safety
///
/// As [`load_acc16`].
#[inline(always)]
pub(super) unsafe fn store_acc16<const G: usize>(
    acc: &mut [f32],
    d: usize,
    at: usize,
    a: &[[float32x4_t; 4]; G],
) {
    // SAFETY: the caller's obligation: each store writes 4 of a head's 16 elements at `at`.
    unsafe {
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
                let mut a = load_acc16::<G>(acc, d, at);
                for (ps, row) in ps.iter().zip(rows) {
                    add_row16::<G>(&mut a, row.vals.as_ptr().add(at).cast::<i8>(), *ps);
                }
                store_acc16::<G>(acc, d, at, &a);
            }
        }
    }
    true
}

/// Group `k`'s scaled weights of rows `c0..c0 + m` (`m ≤ ROWS`) for `G` heads: `ps[h][r] =
/// w[h·p + c0 + r] · scale(c0 + r, k)`, one rounding each (`kernels::scale_weights`), four rows
/// per instruction (the scales widened by `FCVTL`).
///
/// # Safety
///
/// Rows `c0..c0 + m` lie within the checked page (their scale bytes of group `k` readable);
/// `w` holds `G·p` weights and `c0 + m ≤ p`.
#[inline(always)]
unsafe fn scaled_weights<const G: usize>(
    rows: &PageRows<'_>,
    w: &[f32],
    p: usize,
    k: usize,
    c0: usize,
    m: usize,
) -> [[f32; ROWS]; G] {
    let mut ps = [[0f32; ROWS]; G];
    let quads = m / 4 * 4;
    let s = rows.scales.as_ptr();
    for r in (0..quads).step_by(4) {
        // SAFETY: the caller's obligations: each scale read is 2 of a row's scale bytes, each
        // weight load 4 of head `h`'s `p` weights (`c0 + r + 4 ≤ c0 + m ≤ p`), each store 4 of
        // `ps[h]`'s `ROWS` (`r + 4 ≤ m ≤ ROWS`).
        unsafe {
            let mut sc = [0u16; 4];
            for (i, sc) in sc.iter_mut().enumerate() {
                let at = s.add((c0 + r + i) * rows.sstride + 2 * k);
                *sc = u16::from_le_bytes(at.cast::<[u8; 2]>().read());
            }
            let sv = widen4(vld1_u16(sc.as_ptr()));
            for (h, ps) in ps.iter_mut().enumerate() {
                let wv = vld1q_f32(w.as_ptr().add(h * p + c0 + r));
                vst1q_f32(ps.as_mut_ptr().add(r), vmulq_f32(wv, sv));
            }
        }
    }
    for r in quads..m {
        let sc =
            <super::Neon<false> as Widen>::one(u16_at(&rows.scales[(c0 + r) * rows.sstride..], k));
        for (h, ps) in ps.iter_mut().enumerate() {
            ps[r] = w[h * p + c0 + r] * sc;
        }
    }
    ps
}

/// `PageKernels::int8_page_values` for Q8_0 rows and `G ≤ 4` heads: per group, each row's
/// weights times its scale ([`scaled_weights`]), then per 16 lanes the heads' accumulators in
/// registers across up to [`ROWS`] rows, four rows at a time, `acc + w · x` row by row in order.
/// `false`, nothing written, unless every length fits.
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
            // SAFETY: rows `c0..c0 + m < n` lie within the checked page; `w` holds `G·p`
            // weights and `c0 + m ≤ n ≤ p` (checked above).
            let ps = unsafe { scaled_weights::<G>(rows, w, p, k, c0, m) };
            let quads = m / 4 * 4;
            for half in 0..2 {
                let at = k * Q8_GROUP + half * 16;
                // SAFETY: `at + 16 ≤ d`, `acc` holds `G·d` (checked above); rows `< n` lie
                // within the checked page (`d` codes each); each weight load reads 4 of a
                // head's `ROWS` scaled weights (`r + 4 ≤ quads ≤ ROWS`).
                unsafe {
                    let mut a = load_acc16::<G>(acc, d, at);
                    let c = v.add(c0 * rows.stride + at).cast::<i8>();
                    let st = rows.stride;
                    for r in (0..quads).step_by(4) {
                        let mut wq = [vdupq_n_f32(0.0); G];
                        for (wq, ps) in wq.iter_mut().zip(&ps) {
                            *wq = vld1q_f32(ps.as_ptr().add(r));
                        }
                        add_row16_lane::<G, 0>(&mut a, c.add(r * st), &wq);
                        add_row16_lane::<G, 1>(&mut a, c.add((r + 1) * st), &wq);
                        add_row16_lane::<G, 2>(&mut a, c.add((r + 2) * st), &wq);
                        add_row16_lane::<G, 3>(&mut a, c.add((r + 3) * st), &wq);
                    }
                    for r in quads..m {
                        let mut wr = [0f32; G];
                        for (wr, ps) in wr.iter_mut().zip(&ps) {
                            *wr = ps[r];
                        }
                        add_row16::<G>(&mut a, c.add(r * st), wr);
                    }
                    store_acc16::<G>(acc, d, at, &a);
                }
            }
        }
    }
    true
}
