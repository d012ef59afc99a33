//! Activation quantization to Q8_0 and Q8_1 (`quant::q8_act`'s steps) with AVX2: each 32-value
//! block's largest `|x|` by `VMAXPS` (exact in any order for finite values), the codes
//! `roundf(x · id)` eight lanes at a time (the product is the portable one; `roundf`'s half away
//! from zero as truncation plus a step where the exact remainder reaches one half), packed to
//! bytes with saturation (as Rust's `as i8`), the Q8_1 block sum exact in i32 lanes. The block's
//! scale and its inverse are the portable scalar steps, the f16 roundings F16C's (the same
//! values). A block holding an infinity or NaN, or whose scale's inverse overflows, takes the
//! portable code (its `MAX` order and `as i8` of NaN and infinities decide there).
//!
//! Q8_K (`quant::q8_k`'s steps) by 256-value super-blocks: the largest `|x|` as the largest of
//! the magnitudes' bits (`VPMAXUD`), the first value holding it by a compare and a mask (its sign
//! sets the scale's), `iscale = −127 / max` and `d = 1 / iscale` the portable scalar steps, the
//! codes `nearest_int(iscale · x)` eight lanes at a time (`VMULPS` then `VADDPS` of 1.5·2²³, never
//! fused, then the mantissa bits: the portable operations), the 16-value sums exact in i32 lanes.
//! A super-block holding an infinity or NaN, or a nonzero value below the inputs' floor, or whose
//! `iscale` overflows, takes the portable code.

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
use core::arch::x86_64::{
    _mm_packs_epi32, _mm_storeu_si128, _mm256_castsi256_ps, _mm256_cmpeq_epi32, _mm256_hadd_epi32,
    _mm256_loadu_si256, _mm256_max_epu32, _mm256_min_epi32, _mm256_movemask_ps, _mm256_sub_epi32,
};

use crate::arch::quantize_rows::q8_k_rows;
use crate::gguf::QK_K;
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

/// Vectors of eight values per Q8_K super-block.
const K_VECTORS: usize = QK_K / 8;

/// Quantizes `x` to Q8_K with the portable code's bits, over as many super-blocks as every
/// buffer holds (the portable `zip`): codes into `qs`, scales into `d`, the 16-value sums into
/// `bsums`.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn q8_k(x: &[f32], qs: &mut [i8], d: &mut [f32], bsums: &mut [i16]) {
    // SAFETY: AVX2 is present (the caller's obligation).
    q8_k_rows(x, qs, d, bsums, |x, q, s| unsafe { block_k(x, q, s) })
}

/// One super-block's codes into `q` and 16-value sums into `sums`: its scale `1 / iscale` (0 for
/// an all-zero block), or `None` (nothing written) when it holds an infinity or NaN, or a nonzero
/// value below the inputs' floor, or its `iscale` overflows.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block_k(x: &[f32; QK_K], q: &mut [i8; QK_K], sums: &mut [i16; 16]) -> Option<f32> {
    // SAFETY: AVX2 is present; every load reads eight of the 256 floats of `x` (`i < 32`), every
    // store writes 32 of the 256 bytes of `q` or 8 of the 16 sums; the rest is register-only.
    unsafe {
        let load = |i: usize| _mm256_loadu_si256(x.as_ptr().add(8 * i).cast());
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let (zero, floor) = (
            _mm256_set1_epi32(0),
            _mm256_set1_epi32(floor::INPUT_FLOOR.to_bits() as i32),
        );
        let (mut m, mut tiny) = (zero, zero);
        for i in 0..K_VECTORS {
            let a = _mm256_and_si256(load(i), abs);
            m = _mm256_max_epu32(m, a);
            let small = _mm256_and_si256(_mm256_cmpgt_epi32(floor, a), _mm256_cmpgt_epi32(a, zero));
            tiny = _mm256_or_si256(tiny, small);
        }
        let h = largest_lane(m);
        // Infinity or NaN: |x|'s bits above the largest finite value's; a nonzero |x| below the
        // inputs' floor (the portable code reads it as zero).
        if h > 0x7f7f_ffff || _mm256_movemask_epi8(tiny) != 0 {
            return None;
        }
        if h == 0 {
            q.fill(0);
            sums.fill(0);
            return Some(0.0);
        }
        // The first value of largest magnitude (finite magnitudes order as their bits).
        let hv = _mm256_set1_epi32(h as i32);
        let mut at = QK_K;
        for i in 0..K_VECTORS {
            let eq = _mm256_cmpeq_epi32(_mm256_and_si256(load(i), abs), hv);
            let mask = _mm256_movemask_ps(_mm256_castsi256_ps(eq));
            if mask != 0 {
                at = 8 * i + mask.trailing_zeros() as usize;
                break;
            }
        }
        let max = *x.get(at)?;
        let iscale = -127.0 / max;
        if iscale.is_infinite() {
            return None;
        }
        let iv = _mm256_set1_ps(iscale);
        let magic = _mm256_set1_ps(12_582_912.0);
        let mantissa = _mm256_set1_epi32(0x007f_ffff);
        let bias = _mm256_set1_epi32(0x0040_0000);
        let top = _mm256_set1_epi32(127);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        // Four 16-value groups (eight vectors) at a time.
        for g in 0..QK_K / 64 {
            let c: [__m256i; 8] = core::array::from_fn(|i| {
                let v = _mm256_loadu_ps(x.as_ptr().add(64 * g + 8 * i));
                // `nearest_int(iscale · v)`: the product, then the add (two roundings, as the
                // portable code), then the low mantissa bits less 2²².
                let r = _mm256_add_ps(_mm256_mul_ps(v, iv), magic);
                let n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(r), mantissa), bias);
                _mm256_min_epi32(n, top)
            });
            for h in 0..2 {
                let k = 4 * h;
                let packed = _mm256_packs_epi16(
                    _mm256_packs_epi32(c[k], c[k + 1]),
                    _mm256_packs_epi32(c[k + 2], c[k + 3]),
                );
                _mm256_storeu_si256(
                    q.as_mut_ptr().add(64 * g + 32 * h).cast(),
                    _mm256_permutevar8x32_epi32(packed, order),
                );
            }
            // The four groups' sums: pairs of vectors added, then three horizontal adds.
            let s: [__m256i; 4] =
                core::array::from_fn(|j| _mm256_add_epi32(c[2 * j], c[2 * j + 1]));
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
            let four = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let words = _mm_packs_epi32(four, four);
            let mut out = [0i16; 8];
            _mm_storeu_si128(out.as_mut_ptr().cast(), words);
            sums[4 * g..4 * g + 4].copy_from_slice(&out[..4]);
        }
        Some(1.0 / iscale)
    }
}

/// The largest of the eight u32 lanes of `m`.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn largest_lane(m: __m256i) -> u32 {
    let mut lanes = [0u32; 8];
    // SAFETY: AVX2 is present; the store writes exactly the 32 bytes of `lanes`.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), m) };
    lanes.into_iter().max().unwrap_or(0)
}
