//! Activation quantization to Q8_0 and Q8_1 (`quant::q8_act`'s steps) with AVX2: each 32-value
//! block's largest `|x|` by `VMAXPS` (exact in any order for finite values), the codes
//! `roundf(x · id)` eight lanes at a time (the product is the portable one; `roundf`'s half away
//! from zero as truncation plus a step where the exact remainder reaches one half), packed to
//! bytes with saturation (as Rust's `as i8`), the Q8_1 block sum exact in i32 lanes. The block's
//! scale and its inverse are the portable scalar steps, the f16 roundings F16C's (the same
//! values). A block holding an infinity or NaN, or whose scale's inverse overflows, takes the
//! portable code (its `MAX` order and `as i8` of NaN and infinities decide there).

use core::arch::x86_64::{
    __m256, __m256i, _CMP_GE_OQ, _MM_FROUND_NO_EXC, _MM_FROUND_TO_ZERO, _mm_add_epi32,
    _mm_cvtph_ps, _mm_cvtps_ph, _mm_cvtsi128_si32, _mm_cvtss_f32, _mm_max_ps, _mm_movehl_ps,
    _mm_set_ss, _mm_shuffle_epi32, _mm_shuffle_ps, _mm256_add_epi32, _mm256_add_ps, _mm256_and_ps,
    _mm256_and_si256, _mm256_andnot_ps, _mm256_castps_si256, _mm256_castps256_ps128,
    _mm256_castsi256_si128, _mm256_cmp_ps, _mm256_cmpgt_epi32, _mm256_cvttps_epi32,
    _mm256_extractf128_ps, _mm256_extracti128_si256, _mm256_loadu_ps, _mm256_max_ps,
    _mm256_movemask_epi8, _mm256_mul_ps, _mm256_or_ps, _mm256_or_si256, _mm256_packs_epi16,
    _mm256_packs_epi32, _mm256_permutevar8x32_epi32, _mm256_round_ps, _mm256_set1_epi32,
    _mm256_set1_ps, _mm256_setr_epi32, _mm256_storeu_si256, _mm256_sub_ps,
};

use crate::quant::{BLOCK, floor, q8_act};

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) with the portable code's
/// bits, over as many blocks as every buffer holds (the portable `zip`).
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn q8(x: &[f32], qs: &mut [i8], d: &mut [f32], mut s: Option<&mut [f32]>) {
    let mut blocks = (x.len() / BLOCK).min(qs.len() / BLOCK).min(d.len());
    if let Some(s) = &s {
        blocks = blocks.min(s.len());
    }
    for b in 0..blocks {
        let xb: &[f32; BLOCK] = x[b * BLOCK..][..BLOCK].try_into().expect("a block");
        let qb: &mut [i8; BLOCK] = (&mut qs[b * BLOCK..][..BLOCK]).try_into().expect("a block");
        // SAFETY: AVX2 is present (the caller's obligation).
        let done = unsafe { block(xb, qb) };
        match done {
            Some((scale, sum)) => {
                // SAFETY: F16C is present (the caller's obligation).
                d[b] = unsafe { through_f16(scale) };
                if let Some(s) = s.as_deref_mut() {
                    // SAFETY: as above.
                    s[b] = unsafe { through_f16(sum as f32 * scale) };
                }
            }
            None => match s.as_deref_mut() {
                Some(s) => q8_act::quantize_q8_1(xb, qb, &mut d[b..=b], &mut s[b..=b]),
                None => q8_act::quantize_q8_0(xb, qb, &mut d[b..=b]),
            },
        }
    }
}

/// One block's codes into `q`: its unrounded scale `amax / 127` and the sum of its codes, or
/// `None` (nothing written) when it holds an infinity or NaN, or its scale is so small that its
/// inverse overflows.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> Option<(f32, i32)> {
    // SAFETY: AVX2 is present; the four loads cover exactly the 32 floats of `x`, the store
    // exactly the 32 bytes of `q`.
    unsafe {
        let v: [__m256; 4] = core::array::from_fn(|i| _mm256_loadu_ps(x.as_ptr().add(8 * i)));
        let sign = _mm256_set1_ps(-0.0);
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        // Infinity or NaN: |x|'s bits above the largest finite value's; a nonzero |x| below
        // the inputs' floor (the portable code reads it as zero).
        let big = _mm256_set1_epi32(0x7f7f_ffff);
        let floor = _mm256_set1_epi32(floor::INPUT_FLOOR.to_bits() as i32);
        let zero = _mm256_set1_epi32(0);
        let over = a
            .iter()
            .map(|&a| {
                let a = _mm256_castps_si256(a);
                let tiny =
                    _mm256_and_si256(_mm256_cmpgt_epi32(floor, a), _mm256_cmpgt_epi32(a, zero));
                _mm256_or_si256(_mm256_cmpgt_epi32(a, big), tiny)
            })
            .fold(zero, |m, o| _mm256_or_si256(m, o));
        if _mm256_movemask_epi8(over) != 0 {
            return None;
        }
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ps(m, _mm_shuffle_ps::<0b01>(m, m));
        let amax = _mm_cvtss_f32(m);
        let scale = amax / 127.0;
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        if id.is_infinite() {
            // A subnormal scale: the products overflow and `as i8` saturates them.
            return None;
        }
        let idv = _mm256_set1_ps(id);
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        let codes = v.map(|v| {
            let p = _mm256_mul_ps(v, idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            // `p − t` is exact; a remainder of at least one half steps away from zero.
            let rem = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            let step = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(rem, half), one);
            let r = _mm256_add_ps(t, _mm256_or_ps(step, _mm256_and_ps(p, sign)));
            _mm256_cvttps_epi32(r)
        });
        let sum = codes
            .iter()
            .fold(_mm256_set1_epi32(0), |s, &c| _mm256_add_epi32(s, c));
        let packed = _mm256_packs_epi16(
            _mm256_packs_epi32(codes[0], codes[1]),
            _mm256_packs_epi32(codes[2], codes[3]),
        );
        // The packs interleave 128-bit halves: dwords 0, 4, 1, 5, … back into value order.
        let ordered: __m256i =
            _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.as_mut_ptr().cast(), ordered);
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256::<1>(sum),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b0100_1110>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b1011_0001>(s));
        Some((scale, _mm_cvtsi128_si32(s)))
    }
}

/// `x` rounded through f16 by `VCVTPS2PH` (nearest even, subnormals kept: what
/// [`q8_act::through_f16`]'s software conversion gives for every finite `x`).
///
/// # Safety
///
/// The CPU supports F16C.
#[target_feature(enable = "f16c")]
#[inline]
unsafe fn through_f16(x: f32) -> f32 {
    // SAFETY: F16C is present (the caller's obligation); registers only.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<0>(_mm_set_ss(x)))) }
}
