//! [`Avx2F16c`]: the [`Isa`] of the page loop's AVX2 and F16C build (`attention::dispatch`
//! compiles the loop a second time with these instructions enabled and takes this type there).
//!
//! The same source as the portable path (the page loop and every kernel it calls are
//! `#[inline(always)]`), so the compiler only gets wider registers: eight-lane blocks become one
//! 256-bit operation instead of two 128-bit ones, int8 codes widen with one `vpmovsxbd`. It never
//! reorders or fuses floating-point operations (Rust does neither without explicit intrinsics),
//! so the results have the portable path's bits. The explicit differences: f16 decoding (f16
//! pages, int8 scales) with F16C's exact `vcvtph2ps`, equal to the portable decoder on all
//! 65,536 codes (tested), the K dot products' lane sums, eight rows at once with `vhaddps`,
//! whose adds are exactly those of the portable fixed tree (tested), and the int8 and f16 page
//! kernels of `page` and `page_f16` (tested against the portable kernels).

use core::arch::x86_64::{
    __m128i, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm256_add_ps,
    _mm256_cvtepi32_ps, _mm256_cvtph_ps, _mm256_hadd_ps, _mm256_loadu_ps, _mm256_mul_ps,
    _mm256_permute2f128_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
};

use super::page::{add_row, group_sums8, q8_scores, q8_values};
use super::page_f16::{f16_scores, f16_values};
use crate::arch::kernels::{self, Row};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::arch::{Isa, PageKernels, Softmax, Strategy};
use crate::format::u16_at;
use crate::numeric::Widen;

/// [`Isa`] with F16C and AVX horizontal adds. Its methods require AVX2 and F16C: only
/// `attention::dispatch` names it, inside its `#[target_feature(enable = "avx2,f16c")]` builds
/// of the page loop, which run only where [`available`](super::available) said so.
pub(crate) struct Avx2F16c;

impl Widen for Avx2F16c {
    #[inline(always)]
    fn one(h: u16) -> f32 {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires F16C; register-only.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))) }
    }

    #[inline(always)]
    fn block(b: &[u8; 16]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX and F16C; the load
        // reads exactly the 16 bytes of `b` (unaligned load), the store writes exactly the 32
        // bytes of `out`.
        unsafe {
            let h = _mm_loadu_si128(b.as_ptr().cast::<__m128i>());
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        out
    }
}

impl Softmax for Avx2F16c {
    #[inline(always)]
    fn reduce8(x: &[[f32; 8]; 8]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX; each load reads
        // exactly the 32 bytes of one `x[i]`, the store writes exactly the 32 bytes of `out`.
        unsafe {
            let v = |i: usize| _mm256_loadu_ps(x[i].as_ptr());
            // Per 128-bit half, hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3]: twice gives row i's
            // (x0+x1)+(x2+x3) in the low half and (x4+x5)+(x6+x7) in the high half, rows 0–3
            // in one vector and 4–7 in the other; their halves added give the tree's last add.
            let lo4 = _mm256_hadd_ps(_mm256_hadd_ps(v(0), v(1)), _mm256_hadd_ps(v(2), v(3)));
            let hi4 = _mm256_hadd_ps(_mm256_hadd_ps(v(4), v(5)), _mm256_hadd_ps(v(6), v(7)));
            let first = _mm256_permute2f128_ps::<0x20>(lo4, hi4);
            let second = _mm256_permute2f128_ps::<0x31>(lo4, hi4);
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(first, second));
        }
        out
    }

    /// Two vector steps and a tree (`softmax::max_of`) where `s` is whole blocks of eight.
    #[inline(always)]
    fn max_of(s: &[f32]) -> f32 {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX.
        unsafe { super::softmax::max_of(s) }.unwrap_or_else(|| crate::numeric::exp::max_of(s))
    }

    /// Whole pages' sums eight heads at a time, one per lane (`softmax::sum_rows`).
    #[inline(always)]
    fn sums(sums: &mut [f32], w: &[f32], row: usize, n: usize) -> bool {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX.
        n == row && unsafe { super::softmax::sum_rows(sums, w, row) }
    }

    /// A page's weights in AVX2 intrinsics (`exp::exp_rows`), the portable lanes for rows that
    /// are not whole blocks of eight.
    #[inline(always)]
    fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2.
        if !unsafe { super::exp::exp_rows(xs, row, shifts) } {
            crate::numeric::exp::exp_shifted_rows(xs, row, shifts);
        }
    }
}

impl PageKernels for Avx2F16c {
    #[inline(always)]
    fn int8_scores<const G: usize>(q: QueryCodes<'_>, rows: &[Row<'_>], g: usize) -> [[f32; 8]; G] {
        match rows.try_into() {
            // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
            Ok(rows) if g == 32 && (q.codes.len() / G) % 32 == 0 => unsafe {
                q8_scores8::<G>(q, rows)
            },
            _ => kernels::int8_scores::<Self, G>(q, rows, g),
        }
    }

    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn int8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>], g: usize) {
        if g == 32 && acc.len() % (32 * G) == 0 && G <= 4 {
            // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
            unsafe { q8_add_rows::<G>(acc, p, rows) }
        } else {
            kernels::int8_add_scaled_rows::<Self, G>(acc, p, rows, g)
        }
    }

    #[inline(always)]
    fn int8_page_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        g: usize,
        scores: &mut [f32],
        p: usize,
    ) -> bool {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
        g == 32 && unsafe { q8_scores::<G>(q, rows, scores, p) }
    }

    #[inline(always)]
    fn f16_page_scores<const G: usize>(
        q: &[f32],
        rows: &PageRows<'_>,
        scores: &mut [f32],
        p: usize,
        scale: f32,
    ) -> bool {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C (as does
        // this type's `reduce8`).
        unsafe { f16_scores::<Self, G>(q, rows, scores, p, scale) }
    }

    #[inline(always)]
    fn f16_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
    ) -> bool {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
        unsafe { f16_values::<G>(acc, w, p, rows) }
    }

    #[inline(always)]
    fn int8_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
        g: usize,
    ) -> bool {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
        g == 32 && unsafe { q8_values::<G>(acc, w, p, rows) }
    }
}

impl Isa for Avx2F16c {
    const STRATEGY: Strategy = Strategy {
        int8_pages: true,

        f16_pages: true,
        ..Strategy::GENERAL
    };
}

/// `PageKernels::int8_add_rows` of up to eight Q8_0 rows (`head_dim` a multiple of 32): per group and
/// half group, each head's 16 accumulators stay in registers across the rows; each row's codes
/// are widened to f32 once for every head. The portable kernel's operations, in its order: each
/// weight times the row's group scale, then per element `acc + w · x`, rows in order.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[cfg(not(feature = "small-code"))]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>]) {
    let d = acc.len() / G;
    let m = p.len().min(rows.len()).min(8);
    let (p, rows) = (&p[..m], &rows[..m]);
    for k in 0..d / 32 {
        let mut ps = [[0f32; G]; 8];
        kernels::scale_weights::<Avx2F16c, G>(&mut ps, p, rows, k);
        for half in 0..2 {
            let at = k * 32 + half * 16;
            // SAFETY: AVX2 and F16C are present (the caller's obligation). Every load and store
            // covers exactly a bounds-checked array reference: 8 accumulators (32 bytes), or the
            // 16 codes `add_row` reads.
            unsafe {
                let mut a = [[_mm256_setzero_ps(); 2]; G];
                for (h, a) in a.iter_mut().enumerate() {
                    for (b, a) in a.iter_mut().enumerate() {
                        let v: &[f32; 8] = acc[h * d + at + b * 8..][..8].try_into().expect("8");
                        *a = _mm256_loadu_ps(v.as_ptr());
                    }
                }
                for (ps, row) in ps.iter().zip(rows) {
                    let c: &[u8; 16] = row.vals[at..at + 16].try_into().expect("16 codes");
                    add_row::<G, 2>(&mut a, c.as_ptr(), |h| ps[h]);
                }
                for (h, a) in a.iter().enumerate() {
                    for (b, a) in a.iter().enumerate() {
                        let v: &mut [f32; 8] =
                            (&mut acc[h * d + at + b * 8..][..8]).try_into().expect("8");
                        _mm256_storeu_ps(v.as_mut_ptr(), *a);
                    }
                }
            }
        }
    }
}

/// `PageKernels::int8_scores` of eight Q8_0 rows (group 32, `head_dim` a multiple of 32): per group,
/// the rows' exact integer sums (`page::group_sums8`), then the float steps of the portable
/// kernel, eight rows per instruction. (A `target_feature`
/// function so that its closures are built with AVX2 too: intrinsics inline only there.)
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q8_scores8<const G: usize>(q: QueryCodes<'_>, rows: &[Row<'_>; 8]) -> [[f32; 8]; G] {
    let hd = q.codes.len() / G;
    let nb = hd / 32;
    let mut out = [[0f32; 8]; G];
    // SAFETY: AVX2 and F16C are present (the caller's obligation). The scale load reads exactly
    // the 16 bytes of `ks`; `group_sums8` gets each row's 32 codes of the group as a
    // bounds-checked reference, and the heads' `hd` query codes (`q.codes` is `G·hd` long).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); G];
        for b in 0..nb {
            let mut ks = [0u16; 8];
            for (s, row) in ks.iter_mut().zip(rows) {
                *s = u16_at(row.scales, b);
            }
            let kscale = _mm256_cvtph_ps(_mm_loadu_si128(ks.as_ptr().cast::<__m128i>()));
            let k: [&[u8; 32]; 8] =
                core::array::from_fn(|i| rows[i].vals[b * 32..][..32].try_into().expect("32"));
            let isums = group_sums8::<G>(q.codes, hd, b, |i| k[i].as_ptr());
            for (h, (acc, isum)) in acc.iter_mut().zip(isums).enumerate() {
                let isum = _mm256_cvtepi32_ps(isum);
                let scale = _mm256_mul_ps(_mm256_set1_ps(q.scales[h * nb + b]), kscale);
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(scale, isum));
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            _mm256_storeu_ps(o.as_mut_ptr(), a);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::vec::Vec;

    use super::*;
    use crate::arch::Portable;

    #[test]
    fn f16c_decodes_every_code_like_the_portable_decoder() {
        if !super::super::available() {
            return;
        }
        for c in 0..=u16::MAX {
            let bytes: [u8; 16] = core::array::from_fn(|i| c.to_le_bytes()[i % 2]);
            // SAFETY: F16C is present (checked above).
            let (one, block) = unsafe { (f16c_one(c), f16c_block(&bytes)) };
            let want = Portable::one(c).to_bits();
            assert_eq!(one.to_bits(), want, "{c:#06x}");
            assert!(block.iter().all(|x| x.to_bits() == want), "{c:#06x}");
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn f16c_one(c: u16) -> f32 {
        Avx2F16c::one(c)
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn f16c_block(b: &[u8; 16]) -> [f32; 8] {
        Avx2F16c::block(b)
    }

    /// Eight rows' lane sums with horizontal adds: the portable tree's bits.
    #[test]
    fn avx2_lane_sums_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::MIN_POSITIVE / 8.0,
            1e30,
            -1e30,
        ];
        for round in 0..2000 {
            let lanes: [[f32; 8]; 8] = core::array::from_fn(|_| {
                core::array::from_fn(|_| {
                    let x = next();
                    if round % 4 == 0 && x % 5 == 0 {
                        specials[(x >> 8) as usize % specials.len()]
                    } else {
                        f32::from_bits((x >> 32) as u32 & 0x807f_ffff | 0x3c00_0000)
                            * (1 + (x >> 24) % 2000) as f32
                    }
                })
            });
            // SAFETY: AVX2 and F16C are present (checked above).
            let wide = unsafe { avx2_reduce8(&lanes) };
            let portable = Portable::reduce8(&lanes);
            for (a, b) in wide.iter().zip(&portable) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{lanes:?}"
                );
            }
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn avx2_reduce8(x: &[[f32; 8]; 8]) -> [f32; 8] {
        Avx2F16c::reduce8(x)
    }

    /// Eight Q8_0 rows' scores with `vpmaddwd` and integer horizontal adds: the portable bits,
    /// for random and extreme codes (−128 keys, ±32767 queries) and scales (subnormal, huge,
    /// infinite and NaN f16 key scales).
    #[test]
    fn avx2_int8_scores_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let scales16 = [
            0x0001u16, 0x03ff, 0x7bff, 0x7c00, 0x7e00, 0xfc00, 0x8000, 0x3c00,
        ];
        for round in 0..500 {
            let hd = 32 * (1 + round % 3);
            let extreme = round % 5 == 0;
            let vals: Vec<Vec<u8>> = (0..8)
                .map(|_| {
                    (0..hd)
                        .map(|_| if extreme { 0x80 } else { next() as u8 })
                        .collect()
                })
                .collect();
            let scales: Vec<Vec<u8>> = (0..8)
                .map(|_| {
                    (0..hd / 32)
                        .flat_map(|_| {
                            let r = next();
                            let s = if r % 7 == 0 {
                                scales16[(r >> 8) as usize % scales16.len()]
                            } else {
                                0x2000 + (r >> 16) as u16 % 0x2800
                            };
                            s.to_le_bytes()
                        })
                        .collect()
                })
                .collect();
            let rows: [Row<'_>; 8] = core::array::from_fn(|i| Row {
                vals: &vals[i],
                scales: &scales[i],
            });
            let codes: Vec<i16> = (0..3 * hd)
                .map(|_| if extreme { -32767 } else { next() as i16 })
                .collect();
            let qs: Vec<f32> = (0..3 * hd / 32)
                .map(|_| (next() % 1000) as f32 * 1e-4)
                .collect();
            let q = QueryCodes {
                codes: &codes,
                scales: &qs,
            };
            // SAFETY: AVX2 and F16C are present (checked above).
            let wide = unsafe { avx2_int8_scores(q, &rows) };
            let portable = kernels::int8_scores::<Portable, 3>(q, &rows, 32);
            for (a, b) in wide.iter().flatten().zip(portable.iter().flatten()) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "round {round}: {wide:?} vs {portable:?}"
                );
            }
        }
    }

    /// One to eight Q8_0 V rows accumulated with AVX2 for one to four heads: the portable bits.
    #[cfg(not(feature = "small-code"))]
    #[test]
    fn avx2_int8_rows_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        fn check<const G: usize>(next: &mut impl FnMut() -> u64) {
            let d = 64;
            let vals: Vec<Vec<u8>> = (0..8)
                .map(|_| (0..d).map(|_| next() as u8).collect())
                .collect();
            let scales: Vec<Vec<u8>> = (0..8)
                .map(|_| {
                    (0..2)
                        .flat_map(|_| (0x2000 + (next() % 0x3000) as u16).to_le_bytes())
                        .collect()
                })
                .collect();
            let rows: Vec<Row<'_>> = (0..8)
                .map(|i| Row {
                    vals: &vals[i],
                    scales: &scales[i],
                })
                .collect();
            let p: Vec<[f32; G]> = (0..8)
                .map(|_| core::array::from_fn(|_| (next() % 10_000) as f32 * 1.3e-4))
                .collect();
            for m in 1..=8 {
                let start: Vec<f32> = (0..G * d)
                    .map(|_| (next() % 2000) as f32 * 0.01 - 10.0)
                    .collect();
                let mut wide = start.clone();
                // SAFETY: AVX2 and F16C are present (checked by the caller).
                unsafe { avx2_int8_rows::<G>(&mut wide, &p[..m], &rows[..m]) };
                let mut portable = start;
                kernels::int8_add_scaled_rows::<Portable, G>(
                    &mut portable,
                    &p[..m],
                    &rows[..m],
                    32,
                );
                let same = wide
                    .iter()
                    .zip(&portable)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "G {G} rows {m}");
            }
        }
        let mut next = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..50 {
            check::<1>(&mut next);
            check::<2>(&mut next);
            check::<3>(&mut next);
            check::<4>(&mut next);
        }
    }

    #[cfg(not(feature = "small-code"))]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn avx2_int8_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>]) {
        Avx2F16c::int8_add_rows::<G>(acc, p, rows, 32)
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn avx2_int8_scores(q: QueryCodes<'_>, rows: &[Row<'_>; 8]) -> [[f32; 8]; 3] {
        Avx2F16c::int8_scores::<3>(q, rows, 32)
    }
}
