//! What the K-quant kernels (Q4_K, Q6_K × Q8_K) share: the byte order that keeps the portable
//! dot products' eight integer lanes apart, and their f32 state in the portable order.
//!
//! The portable K-quant dot products sum, per super-block, eight i32 lanes `aux32[l]` over the
//! values `k ≡ l (mod 8)` and add each lane to its own f32 sum (`quant/k_lanes.rs`), so a kernel
//! must not add products of two lanes: [`by_lane`] reorders a 32-value chunk (weights and
//! activations alike) so that the four bytes `VPMADDUBSW` + `VPMADDWD` add into one i32 are the
//! values `l`, `l + 8`, `l + 16`, `l + 24` of one lane `l`, and the i32 lanes come out in lane
//! order.

use core::arch::x86_64::*;

/// A 32-value chunk's bytes reordered: i32 lane `l` (0..8) holds values `l`, `l + 8`, `l + 16`,
/// `l + 24` in that order (`VPERMD` gathers dwords 0, 2, 4, 6 into the low half and 1, 3, 5, 7
/// into the high half, `VPSHUFB` then transposes each half's 4 × 4 bytes).
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn by_lane(x: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 (the caller's contract).
    unsafe {
        let d = _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        let t = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
            10, 14, 3, 7, 11, 15,
        );
        _mm256_shuffle_epi8(d, t)
    }
}

/// The f32 state of one K-quant dot product, as the portable `Lanes`: eight lane sums in one
/// register and the minimums' `sumf`.
#[derive(Clone, Copy)]
pub(super) struct Lanes {
    sums: __m256,
    sumf: f32,
}

impl Lanes {
    /// Zero.
    ///
    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(super) unsafe fn new() -> Self {
        Lanes {
            // SAFETY: register-only AVX (the caller's contract).
            sums: unsafe { _mm256_setzero_ps() },
            sumf: 0.0,
        }
    }

    /// `sums[l] += d · (f32)aux32[l]` for the eight lanes of `aux32` (`VMULPS`, `VADDPS`: the
    /// portable lanes' operations, no FMA).
    ///
    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(super) unsafe fn block(&mut self, aux32: __m256i, d: f32) {
        // SAFETY: register-only AVX2 (the caller's contract).
        unsafe {
            let t = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(aux32));
            self.sums = _mm256_add_ps(self.sums, t);
        }
    }

    /// `sumf −= dmin · (f32)sumi`.
    #[inline(always)]
    pub(super) fn minus(&mut self, dmin: f32, sumi: i32) {
        self.sumf -= dmin * sumi as f32;
    }

    /// `sumf` plus the lanes one at a time, in lane order.
    ///
    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(super) unsafe fn total(self) -> f32 {
        let mut lanes = [0f32; 8];
        // SAFETY: 8 f32s written to a local array, unaligned store.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), self.sums) };
        let mut sumf = self.sumf;
        for s in lanes {
            sumf += s;
        }
        sumf
    }
}

/// The sum of the eight i32 lanes of `x` (exact: integers).
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn hsum(x: __m256i) -> i32 {
    // SAFETY: register-only AVX2 (the caller's contract).
    unsafe {
        let q = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
        let q = _mm_hadd_epi32(q, q);
        _mm_cvtsi128_si32(_mm_hadd_epi32(q, q))
    }
}
