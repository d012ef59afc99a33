//! The attention page loop compiled a second time for AVX2 and F16C, chosen at run time.
//!
//! The same source as the portable path (`attend_page` and every kernel it calls are
//! `#[inline(always)]`), so the compiler only gets wider registers: eight-lane blocks become one
//! 256-bit operation instead of two 128-bit ones, int8 codes widen with one `vpmovsxbd`. It never
//! reorders or fuses floating-point operations (Rust does neither without explicit intrinsics),
//! so the results have the portable path's bits. The explicit differences: f16 decoding (f16
//! pages, int8 scales) with F16C's exact `vcvtph2ps`, equal to the portable decoder on all
//! 65,536 codes (tested), and the K dot products' lane sums, eight rows at once with `vhaddps`,
//! whose adds are exactly those of the portable fixed tree (tested). Tests compare whole
//! attention results of both builds.

use core::arch::x86_64::{
    __m128i, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm256_add_ps,
    _mm256_cvtph_ps, _mm256_hadd_ps, _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_storeu_ps,
};

use crate::arch::{Isa, Portable};
use crate::attention::page::{Heads, Keys, Layout, attend_page as page};

/// The page loop, its AVX2/F16C build when this CPU has both.
#[inline(always)]
pub(crate) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    if super::available() && !portable_only() {
        // SAFETY: the CPU supports AVX2 and F16C (checked just above).
        unsafe { attend_page_avx2(l, keys, heads) }
    } else {
        page::<Portable, F>(l, keys, heads)
    }
}

/// Whether a test asked for the portable build only.
#[inline(always)]
fn portable_only() -> bool {
    #[cfg(test)]
    {
        tests::portable_only()
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// The page loop built with AVX2 and F16C enabled.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn attend_page_avx2<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    page::<Avx2F16c, F>(l, keys, heads)
}

/// [`Isa`] with F16C and AVX horizontal adds. Private to this module and used only inside
/// [`attend_page_avx2`], so its methods only run where AVX2 and F16C are present.
struct Avx2F16c;

impl Isa for Avx2F16c {
    #[inline(always)]
    fn one(h: u16) -> f32 {
        // SAFETY: only reached from `attend_page_avx2`, which requires F16C; register-only.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))) }
    }

    #[inline(always)]
    fn block(b: &[u8; 16]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: only reached from `attend_page_avx2`, which requires AVX and F16C; the load
        // reads exactly the 16 bytes of `b` (unaligned load), the store writes exactly the 32
        // bytes of `out`.
        unsafe {
            let h = _mm_loadu_si128(b.as_ptr().cast::<__m128i>());
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        out
    }

    #[inline(always)]
    fn reduce8(x: &[[f32; 8]; 8]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: only reached from `attend_page_avx2`, which requires AVX; each load reads
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
}

#[cfg(test)]
pub(crate) mod tests {
    use core::sync::atomic::{AtomicBool, Ordering};
    use std::vec::Vec;

    use super::*;
    use crate::alloc::FreeList;
    use crate::attention::{AttentionParams, scratch_len};
    use crate::cache::tests::{arenas, cache};
    use crate::format::ElementFormat;
    use crate::planner::CacheConfig;
    use crate::sequence::SeqMode;
    use crate::shape::Shape;

    /// Set by the test below: route every page through the portable build. Other tests running
    /// meanwhile then take the portable path too, which gives them the same bits.
    static PORTABLE_ONLY: AtomicBool = AtomicBool::new(false);

    pub(super) fn portable_only() -> bool {
        PORTABLE_ONLY.load(Ordering::Relaxed)
    }

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
        let mut x = 0x2545_f491_4f6c_dd1du64;
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
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
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

    /// Decode and prefill attention of both builds, every format (head_dim 64 and 36, so whole
    /// blocks and leftovers), full and windowed: the same bits.
    #[test]
    fn avx2_build_gives_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        let cases: [(u16, &[ElementFormat]); 2] = [
            (
                64,
                &[
                    ElementFormat::F32,
                    ElementFormat::F16,
                    ElementFormat::Bf16,
                    ElementFormat::Q8_0,
                    ElementFormat::Int8 { group: 64 },
                    ElementFormat::Fp8Tile {
                        dv: 64,
                        tile: 64,
                        bf16: false,
                    },
                    ElementFormat::Fp8Tile {
                        dv: 48,
                        tile: 16,
                        bf16: true,
                    },
                ],
            ),
            (
                36,
                &[
                    ElementFormat::F32,
                    ElementFormat::F16,
                    ElementFormat::Int8 { group: 12 },
                    ElementFormat::Fp8Tile {
                        dv: 20,
                        tile: 4,
                        bf16: false,
                    },
                ],
            ),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let tokens = 150u32;
        for (hd, fmts) in cases {
            let shape = Shape {
                layers: 1,
                kv_heads: 3,
                head_dim: hd,
            };
            let row = 3 * hd as usize;
            let k: Vec<f32> = (0..tokens as usize * row).map(|_| next() * 3.0).collect();
            let v: Vec<f32> = (0..tokens as usize * row).map(|_| next()).collect();
            let q: Vec<f32> = (0..8 * 3 * row).map(|_| next()).collect();
            for &fmt in fmts {
                for (k_fmt, v_fmt) in [(fmt, fmt), (ElementFormat::F16, fmt)] {
                    let cfg = CacheConfig::new(shape)
                        .with_page_tokens(16)
                        .with_formats(k_fmt, v_fmt)
                        .with_sequences(1, tokens);
                    let mut a = arenas(&cfg, 10);
                    let mut c = cache::<FreeList<'_>>(&mut a, cfg, 10);
                    let s = c.create_sequence(SeqMode::Paged).unwrap();
                    c.reserve(s, tokens).unwrap();
                    c.write_kv(s, 0, 0, &k, &v).unwrap();
                    for params in [
                        AttentionParams::new(shape, 9),
                        AttentionParams::new(shape, 6).with_window(4, 40),
                    ] {
                        let n = params.q_heads as usize * hd as usize;
                        let q = &q[..8 * n];
                        let mut scratch = std::vec![0f32; scratch_len(params.q_heads, 16)];
                        let run = |portable: bool, scratch: &mut [f32]| {
                            PORTABLE_ONLY.store(portable, Ordering::Relaxed);
                            let mut out = std::vec![0f32; q.len()];
                            c.attention(s, 0, tokens - 8, q, &mut out, &params, scratch)
                                .unwrap();
                            out
                        };
                        let wide = run(false, &mut scratch);
                        let portable = run(true, &mut scratch);
                        PORTABLE_ONLY.store(false, Ordering::Relaxed);
                        let same = wide
                            .iter()
                            .zip(&portable)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{k_fmt:?}/{v_fmt:?} hd {hd} {params:?}");
                    }
                }
            }
        }
    }
}
