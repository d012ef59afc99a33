//! A page's per-head maxima and sums of weights with AVX.
//!
//! The portable page loop takes each head's sum of weights as one chain of dependent adds in row
//! order (four cycles each), and LLVM builds its eight-lane maximum from 128-bit inserts. Here a
//! head's maximum is two vector steps and a short tree, and eight heads' sums run in the eight
//! lanes of one vector: each block of eight rows of eight heads is transposed (heads into
//! lanes), then added row by row. Each lane adds its head's weights in row order from its
//! running sum, and the maximum takes `exp::max_of`'s lanes and tree: the portable bits.

use core::arch::x86_64::{
    __m128, __m256, _mm_add_ps, _mm_cvtss_f32, _mm_loadu_ps, _mm_max_ss, _mm_movehl_ps,
    _mm_movelh_ps, _mm_storeu_ps, _mm_unpackhi_ps, _mm_unpacklo_ps, _mm256_add_ps,
    _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_loadu_ps, _mm256_max_ps,
    _mm256_movehdup_ps, _mm256_permute_ps, _mm256_permute2f128_ps, _mm256_set1_ps,
    _mm256_shuffle_ps, _mm256_storeu_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
};

/// The largest of `s` not NaN (−∞ if none) with `exp::max_of`'s lanes and tree (the same bits,
/// zeros' signs included). `None` unless `s.len()` is a nonzero multiple of eight.
///
/// # Safety
///
/// The CPU supports AVX.
#[target_feature(enable = "avx")]
#[inline]
pub(super) unsafe fn max_of(s: &[f32]) -> Option<f32> {
    if s.is_empty() || s.len() % 8 != 0 {
        return None;
    }
    // SAFETY: AVX is present (the caller's obligation); each load reads one whole block of
    // eight floats of `s`.
    unsafe {
        // `_mm256_max_ps(x, m)` is `x > m ? x : m` per lane: `numeric::larger(m, x)`.
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for b in s.chunks_exact(8) {
            m = _mm256_max_ps(_mm256_loadu_ps(b.as_ptr()), m);
        }
        // The tree: lanes 2i take larger(m[2i], m[2i + 1]), lanes 4i larger of those pairs,
        // then larger(lane 0, lane 4).
        let pairs = _mm256_max_ps(_mm256_movehdup_ps(m), m);
        let quads = _mm256_max_ps(_mm256_permute_ps::<0b10>(pairs), pairs);
        let lo = _mm256_castps256_ps128(quads);
        let hi = _mm256_extractf128_ps::<1>(quads);
        Some(_mm_cvtss_f32(_mm_max_ss(hi, lo)))
    }
}

/// `sums[h] = sums[h] + w[h·row] + w[h·row + 1] + … + w[h·row + row − 1]`, in that order, for
/// every head `h` of `sums`: eight heads (then four) at a time, one per lane, the rest one by
/// one. `false`, nothing written, unless `row` is a nonzero multiple of eight and `w` holds
/// `sums.len()` rows of `row` weights.
///
/// # Safety
///
/// The CPU supports AVX.
#[target_feature(enable = "avx")]
#[inline]
pub(super) unsafe fn sum_rows(sums: &mut [f32], w: &[f32], row: usize) -> bool {
    if row == 0 || row % 8 != 0 || w.len() / row < sums.len() {
        return false;
    }
    let mut eights = sums.chunks_exact_mut(8);
    let mut h0 = 0;
    for s in &mut eights {
        // SAFETY: AVX is present; the loads and the store cover exactly the eight floats of
        // `s`, and each head's eight weights at `(h0 + j)·row + r0` lie within `w` (heads
        // `h0 + j < sums.len()`, `r0 + 8 ≤ row`).
        unsafe {
            let mut acc = _mm256_loadu_ps(s.as_ptr());
            for r0 in (0..row).step_by(8) {
                let at = |j: usize| _mm256_loadu_ps(w.as_ptr().add((h0 + j) * row + r0));
                let rows = transpose8([at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)]);
                for x in rows {
                    acc = _mm256_add_ps(acc, x);
                }
            }
            _mm256_storeu_ps(s.as_mut_ptr(), acc);
        }
        h0 += 8;
    }
    let mut fours = eights.into_remainder().chunks_exact_mut(4);
    for s in &mut fours {
        // SAFETY: as above, for four heads and four rows at a time (`row` is a multiple of 4).
        unsafe {
            let mut acc = _mm_loadu_ps(s.as_ptr());
            for r0 in (0..row).step_by(4) {
                let at = |j: usize| _mm_loadu_ps(w.as_ptr().add((h0 + j) * row + r0));
                for x in transpose4([at(0), at(1), at(2), at(3)]) {
                    acc = _mm_add_ps(acc, x);
                }
            }
            _mm_storeu_ps(s.as_mut_ptr(), acc);
        }
        h0 += 4;
    }
    for (j, s) in fours.into_remainder().iter_mut().enumerate() {
        let head = &w[(h0 + j) * row..(h0 + j + 1) * row];
        *s = head.iter().fold(*s, |s, w| s + w);
    }
    true
}

/// Eight vectors of eight heads' rows (`v[j]`: head `j`, rows 0–7) as eight vectors of rows
/// (`[i]`: row `i` of heads 0–7).
///
/// # Safety
///
/// The CPU supports AVX. (An `unsafe fn`: Rust 1.85, the workspace's oldest, allows
/// `#[target_feature]` on no other.)
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose8(v: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: register-only shuffles; AVX is present (the caller's obligation).
    unsafe {
        // Per 128-bit half: heads j, j + 1 interleaved (rows 0, 1 / 2, 3 of the half).
        let t0 = _mm256_unpacklo_ps(v[0], v[1]);
        let t1 = _mm256_unpackhi_ps(v[0], v[1]);
        let t2 = _mm256_unpacklo_ps(v[2], v[3]);
        let t3 = _mm256_unpackhi_ps(v[2], v[3]);
        let t4 = _mm256_unpacklo_ps(v[4], v[5]);
        let t5 = _mm256_unpackhi_ps(v[4], v[5]);
        let t6 = _mm256_unpacklo_ps(v[6], v[7]);
        let t7 = _mm256_unpackhi_ps(v[6], v[7]);
        // Per half: one row of four heads (heads 0–3, then 4–7).
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xee>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xee>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xee>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xee>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

/// [`transpose8`] for four heads' rows 0–3 in 128-bit vectors.
///
/// # Safety
///
/// The CPU supports AVX.
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose4(v: [__m128; 4]) -> [__m128; 4] {
    // SAFETY: register-only shuffles; AVX is present (the caller's obligation).
    unsafe {
        let t0 = _mm_unpacklo_ps(v[0], v[1]);
        let t1 = _mm_unpackhi_ps(v[0], v[1]);
        let t2 = _mm_unpacklo_ps(v[2], v[3]);
        let t3 = _mm_unpackhi_ps(v[2], v[3]);
        [
            _mm_movelh_ps(t0, t2),
            _mm_movehl_ps(t2, t0),
            _mm_movelh_ps(t1, t3),
            _mm_movehl_ps(t3, t1),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numeric::exp;
    use crate::testing::xorshift;

    #[test]
    fn maxima_and_sums_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        let mut next = xorshift(0x5eed_50f7);
        // Values of every kind a page's scores and weights hold: signed zeros, NaN, infinities,
        // subnormals, and ordinary values of many magnitudes.
        let mut value = move || match next() % 16 {
            0 => 0.0,
            1 => -0.0,
            2 => f32::NAN,
            3 => f32::NEG_INFINITY,
            4 => f32::INFINITY,
            5 => f32::from_bits(1 + (next() as u32 & 0x7f_ffff)),
            _ => f32::from_bits(next() as u32 & 0xbf7f_ffff),
        };
        for row in [8, 16, 24, 32, 64] {
            for heads in 1..=19 {
                for _ in 0..8 {
                    let w: std::vec::Vec<f32> = (0..heads * row).map(|_| value()).collect();
                    let start: std::vec::Vec<f32> = (0..heads).map(|_| value()).collect();
                    let mut got = start.clone();
                    // SAFETY: `available()` checked AVX2 and F16C.
                    assert!(unsafe { sum_rows(&mut got, &w, row) });
                    for h in 0..heads {
                        let head = &w[h * row..(h + 1) * row];
                        let want = head.iter().fold(start[h], |s, w| s + w);
                        // (A NaN's payload depends on operand order, which no result relies on.)
                        let same = got[h].to_bits() == want.to_bits()
                            || (got[h].is_nan() && want.is_nan());
                        assert!(same, "sum, head {h} of {heads}: {} {want}", got[h]);
                        // SAFETY: as above.
                        let max = unsafe { max_of(head) }.expect("a multiple of eight");
                        let want = exp::max_of(head);
                        assert_eq!(max.to_bits(), want.to_bits(), "max, head {h}, row {row}");
                    }
                }
            }
        }
        // SAFETY: as above.
        unsafe {
            assert!(!sum_rows(&mut [0.0; 2], &[0.0; 24], 12));
            assert!(!sum_rows(&mut [0.0; 2], &[0.0; 8], 8));
            assert!(!sum_rows(&mut [0.0; 2], &[0.0; 32], 0));
            assert_eq!(max_of(&[0.0; 12]), None);
            assert_eq!(max_of(&[]), None);
        }
    }
}
