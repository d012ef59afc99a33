//! Whole pages of f16 rows with AVX2 and F16C: the x86-64 kernels behind
//! `PageKernels::f16_page_scores` and `PageKernels::f16_page_values`.
//!
//! As the Q8_0 page kernels (`page`): one check of the page's extent, then every row is a
//! pointer step. A K row's eight-element blocks are widened once for all `G` query heads into
//! each head's eight lanes, eight rows' lanes are summed at once (`Softmax::reduce8`); the value
//! accumulators of sixteen output elements stay in registers across all of the page's rows.
//! Each lane, score and output element takes its terms in the portable kernels' order
//! (`kernels::dot_lanes`, `kernels::add_scaled`), so the bits are theirs (tested below).

use core::arch::x86_64::{
    __m128i, __m256, _mm_loadu_si128, _mm256_add_ps, _mm256_cvtph_ps, _mm256_loadu_ps,
    _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
};

use crate::arch::Isa;
use crate::arch::rows::PageRows;

/// Elements per lane block (one `vcvtph2ps`).
const LANES: usize = 8;

/// Whether the page's rows hold `d` f16 values each (`d` whole blocks; the view checked the
/// rows against its slices when it was built).
#[inline(always)]
fn page_fits(rows: &PageRows<'_>, d: usize) -> bool {
    d > 0 && d % LANES == 0 && rows.stride >= 2 * d && rows.row_bytes >= 2 * d
}

/// `PageKernels::f16_page_scores`: `scores[h·p + r] = scale · reduce(lanes)` for every row `r` of the
/// page and `G` heads of `q` (`G` query rows side by side), where lane `l` of a head sums
/// `q[8k + l] · x[8k + l]` over blocks `k` in order from zero, as `kernels::dot_lanes`; the
/// lanes of up to eight rows then go to `D::reduce8` at once, as the general loop's
/// `flush_lanes`. `false`, nothing written, unless every length fits.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C; `D::reduce8` may use them.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn f16_scores<D: Isa, const G: usize>(
    q: &[f32],
    rows: &PageRows<'_>,
    scores: &mut [f32],
    p: usize,
    scale: f32,
) -> bool {
    let hd = q.len() / G;
    let n = rows.n;
    if G == 0 || !page_fits(rows, hd) || q.len() != G * hd || n > p || scores.len() < G * p {
        return false;
    }
    let k = rows.vals.as_ptr();
    for r0 in (0..n).step_by(LANES) {
        let m = (n - r0).min(LANES);
        // Lanes of up to eight rows per head (slots past `m` stay zero, never stored).
        let mut lanes = [[[0f32; LANES]; LANES]; G];
        for i in 0..m {
            // SAFETY: AVX2 and F16C are present (the caller's obligation). Row `r0 + i < n`
            // is within the page `page_fits` checked: each key load reads 16 of its `2·hd`
            // bytes; query loads read eight of a head's `hd` values; stores write one lane
            // array of eight.
            unsafe {
                let row = k.add((r0 + i) * rows.stride);
                let mut a = [_mm256_setzero_ps(); G];
                for b in 0..hd / LANES {
                    let x = _mm256_cvtph_ps(_mm_loadu_si128(row.add(16 * b).cast::<__m128i>()));
                    for (h, a) in a.iter_mut().enumerate() {
                        let qv = _mm256_loadu_ps(q.as_ptr().add(h * hd + b * LANES));
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(qv, x));
                    }
                }
                for (lanes, a) in lanes.iter_mut().zip(a) {
                    _mm256_storeu_ps(lanes[i].as_mut_ptr(), a);
                }
            }
        }
        for (h, lanes) in lanes.iter().enumerate() {
            let d = D::reduce8(lanes);
            for (s, d) in scores[h * p + r0..][..m].iter_mut().zip(d) {
                *s = d * scale;
            }
        }
    }
    true
}

/// `PageKernels::f16_page_values`: `acc[h·d + i] += w[h·p + r] · x[r][i]` for every row `r` of the
/// page in order and `G ≤ 4` heads (a multiply and an add, as `kernels::add_scaled`), sixteen
/// output elements at a time (eight for a last odd block) with their `G` heads' accumulators in
/// registers across the rows. `false`, nothing written, unless every length fits.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn f16_values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
) -> bool {
    let d = acc.len() / G;
    let n = rows.n;
    if G == 0 || G > 4 || !page_fits(rows, d) || acc.len() != G * d || n > p || w.len() < G * p {
        return false;
    }
    let mut at = 0;
    while at + 2 * LANES <= d {
        // SAFETY: AVX2 and F16C are present (the caller's obligation); `at + 16 ≤ d`.
        unsafe { values_at::<G, 2>(acc, d, w, p, rows, at) };
        at += 2 * LANES;
    }
    if at < d {
        // SAFETY: as above; `at + 8 = d` (`d` whole blocks).
        unsafe { values_at::<G, 1>(acc, d, w, p, rows, at) };
    }
    true
}

/// [`f16_values`] for output elements `at..at + 8·B` of every head.
///
/// # Safety
///
/// AVX2 and F16C are present; `f16_values`' checks passed and `at + 8·B ≤ d`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn values_at<const G: usize, const B: usize>(
    acc: &mut [f32],
    d: usize,
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
    at: usize,
) {
    let v = rows.vals.as_ptr();
    // SAFETY: the caller's obligations. Accumulator loads and stores cover eight of `acc`'s
    // `G·d` elements (`at + 8·B ≤ d`); value loads read 16 of row `r`'s `2·d` bytes (`r < n`,
    // within the checked page); weights are `w[h·p + r]`, `r < n ≤ p`.
    unsafe {
        let mut a = [[_mm256_setzero_ps(); B]; G];
        for (h, a) in a.iter_mut().enumerate() {
            for (b, a) in a.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(acc.as_ptr().add(h * d + at + b * LANES));
            }
        }
        for r in 0..rows.n {
            let c = v.add(r * rows.stride + 2 * at);
            let x: [__m256; B] = core::array::from_fn(|b| {
                _mm256_cvtph_ps(_mm_loadu_si128(c.add(16 * b).cast::<__m128i>()))
            });
            for (h, a) in a.iter_mut().enumerate() {
                let wv = _mm256_set1_ps(*w.get_unchecked(h * p + r));
                for (a, x) in a.iter_mut().zip(x) {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, x));
                }
            }
        }
        for (h, a) in a.iter().enumerate() {
            for (b, a) in a.iter().enumerate() {
                _mm256_storeu_ps(acc.as_mut_ptr().add(h * d + at + b * LANES), *a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::super::page::tests::{same, xorshift};
    use super::*;
    use crate::arch::Portable;
    use crate::arch::kernels::{Row, add_scaled, dot_lanes};
    use crate::format::ElementFormat;
    use crate::numeric::reduce;

    /// A random page of `n` f16 rows `stride` bytes apart (`d` values each): ordinary values,
    /// with zeros of both signs, subnormals, the largest finite, infinities and NaNs among them.
    fn page(next: &mut impl FnMut() -> u64, n: usize, d: usize) -> (Vec<u8>, usize) {
        let stride = 2 * d + 16 * (next() % 3) as usize;
        let special = [
            0x0000u16, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x7c00, 0xfc00, 0x7e01,
        ];
        let vals = (0..n * stride / 2)
            .flat_map(|_| {
                let r = next();
                let h = if r % 23 == 0 {
                    special[(r >> 8) as usize % special.len()]
                } else {
                    // Exponents around one: sums that round.
                    ((r >> 16) as u16 & 0x83ff) | (0x3400 + (r >> 32) as u16 % 0x0c00) & 0x7c00
                };
                h.to_le_bytes()
            })
            .collect();
        (vals, stride)
    }

    fn rows(vals: &[u8], stride: usize, n: usize, d: usize) -> PageRows<'_> {
        PageRows::new(vals, &[], stride, 0, n, 2 * d, 0).expect("a page")
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scores<const G: usize>(
        q: &[f32],
        rows: &PageRows<'_>,
        s: &mut [f32],
        p: usize,
        scale: f32,
    ) -> bool {
        // SAFETY: the caller checked AVX2 and F16C; the portable `reduce8` needs neither.
        unsafe { f16_scores::<Portable, G>(q, rows, s, p, scale) }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
    ) -> bool {
        // SAFETY: the caller checked AVX2 and F16C.
        unsafe { f16_values::<G>(acc, w, p, rows) }
    }

    /// Every row count up to two blocks of eight, one to four heads, head_dim 8 to 72: each
    /// score is the portable lanes' fixed-tree sum times the scale, to the bit.
    #[test]
    fn page_scores_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        fn check<const G: usize>(next: &mut impl FnMut() -> u64) {
            let d = 8 * (1 + next() % 9) as usize;
            let (p, scale) = (16, 0.125);
            for n in 1..=p {
                let (vals, stride) = page(next, n, d);
                let rows = rows(&vals, stride, n, d);
                let q: Vec<f32> = (0..G * d)
                    .map(|_| (next() % 4001) as f32 * 1e-3 - 2.0)
                    .collect();
                let mut wide = std::vec![7.0f32; G * p];
                // SAFETY: AVX2 and F16C are present (checked by the caller).
                assert!(unsafe { scores::<G>(&q, &rows, &mut wide, p, scale) });
                let mut want = std::vec![7.0f32; G * p];
                for r in 0..n {
                    let row = Row {
                        vals: &vals[r * stride..][..2 * d],
                        scales: &[],
                    };
                    let lanes = dot_lanes::<Portable, G>(ElementFormat::F16, &q, row);
                    for (h, lanes) in lanes.iter().enumerate() {
                        want[h * p + r] = reduce(*lanes) * scale;
                    }
                }
                assert!(same(&wide, &want), "G {G} d {d} n {n}");
            }
        }
        let mut next = xorshift();
        for _ in 0..40 {
            check::<1>(&mut next);
            check::<2>(&mut next);
            check::<3>(&mut next);
            check::<4>(&mut next);
        }
    }

    /// Every row count up to a page of sixteen, one to four heads, head_dim 8 to 72 (a last
    /// block of eight or not): each output element the portable row-by-row bits.
    #[test]
    fn page_values_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        fn check<const G: usize>(next: &mut impl FnMut() -> u64) {
            let d = 8 * (1 + next() % 9) as usize;
            let p = 16;
            for n in 1..=p {
                let (vals, stride) = page(next, n, d);
                let rows = rows(&vals, stride, n, d);
                let w: Vec<f32> = (0..G * p)
                    .map(|_| (next() % 10_000) as f32 * 1e-4)
                    .collect();
                let start: Vec<f32> = (0..G * d)
                    .map(|_| (next() % 2000) as f32 * 0.01 - 10.0)
                    .collect();
                let mut wide = start.clone();
                // SAFETY: AVX2 and F16C are present (checked by the caller).
                assert!(unsafe { values::<G>(&mut wide, &w, p, &rows) });
                let mut want = start;
                for r in 0..n {
                    let row = Row {
                        vals: &vals[r * stride..][..2 * d],
                        scales: &[],
                    };
                    let wr: [f32; G] = core::array::from_fn(|h| w[h * p + r]);
                    add_scaled::<Portable, G, 1>(ElementFormat::F16, &mut want, [wr], [row]);
                }
                assert!(same(&wide, &want), "G {G} d {d} n {n}");
            }
        }
        let mut next = xorshift();
        for _ in 0..40 {
            check::<1>(&mut next);
            check::<2>(&mut next);
            check::<3>(&mut next);
            check::<4>(&mut next);
        }
    }

    /// Lengths that do not fit (a short page, a head_dim not of whole blocks, too few scores,
    /// weights or heads) are refused with nothing written.
    #[test]
    fn page_kernels_refuse_what_does_not_fit() {
        if !super::super::available() {
            return;
        }
        let mut next = xorshift();
        let (vals, stride) = page(&mut next, 16, 64);
        let whole = rows(&vals, stride, 16, 64);
        let short = PageRows::new(&vals, &[], stride, 0, 16, 100, 0).expect("a page");
        let q = std::vec![1.0f32; 3 * 64];
        let w = std::vec![1.0f32; 3 * 16];
        // SAFETY: AVX2 and F16C are present (checked above).
        unsafe {
            let mut s = std::vec![5.0f32; 3 * 16];
            assert!(!scores::<3>(&q, &short, &mut s, 16, 1.0));
            assert!(!scores::<3>(&q[..3 * 60], &whole, &mut s, 16, 1.0));
            assert!(!scores::<3>(&q, &whole, &mut s[..40], 16, 1.0));
            assert!(!scores::<3>(&q, &whole, &mut s, 8, 1.0));
            assert!(s.iter().all(|&s| s == 5.0));
            let mut acc = std::vec![5.0f32; 3 * 64];
            assert!(!values::<3>(&mut acc, &w, 16, &short));
            assert!(!values::<3>(&mut acc, &w[..40], 16, &whole));
            assert!(!values::<5>(&mut std::vec![5.0f32; 5 * 64], &w, 16, &whole));
            assert!(!values::<3>(&mut acc[..3 * 60], &w, 16, &whole));
            assert!(acc.iter().all(|&a| a == 5.0));
        }
    }
}
