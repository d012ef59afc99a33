//! x86-64: the page loop compiled a second time with AVX2 and F16C enabled, taking
//! [`Avx2F16c`] as its [`Isa`](crate::arch::Isa), chosen per page where this CPU has both
//! (`arch::available`); the portable build elsewhere. Tests compare whole attention results of
//! both builds.

use super::super::page::{
    Declined, Heads, Inline, Keys, Layout, PageSlices, attend_page as page, attend_whole_page_with,
    whole_page_rows,
};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::arch::{Avx2F16c, Portable, available};

/// The page loop, its AVX2/F16C build when this CPU has both.
#[inline(always)]
pub(crate) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    if available() && !portable_only() {
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
    // Whole pages of int8 (or f16) rows, query heads in runs of the longest length up to four
    // that divides the group: the lean page loop.
    let whole = match l.group {
        g if g % 4 == 0 => whole_page_rows::<Avx2F16c, F, 4>(l, keys).map(|n| (4, n)),
        g if g % 3 == 0 => whole_page_rows::<Avx2F16c, F, 3>(l, keys).map(|n| (3, n)),
        g if g % 2 == 0 => whole_page_rows::<Avx2F16c, F, 2>(l, keys).map(|n| (2, n)),
        _ => whole_page_rows::<Avx2F16c, F, 1>(l, keys).map(|n| (1, n)),
    };
    match whole {
        // SAFETY: the caller's contract (AVX2 and F16C).
        Some((4, n)) => unsafe { whole_page_avx2::<4>(l, keys.kv, heads, n) },
        // SAFETY: as above.
        Some((3, n)) => unsafe { whole_page_avx2::<3>(l, keys.kv, heads, n) },
        // SAFETY: as above.
        Some((2, n)) => unsafe { whole_page_avx2::<2>(l, keys.kv, heads, n) },
        // SAFETY: as above.
        Some((_, n)) => unsafe { whole_page_avx2::<1>(l, keys.kv, heads, n) },
        None => page::<Avx2F16c, F>(l, keys, heads),
    }
}

/// [`attend_whole_page`] built with AVX2 and F16C enabled, out of line (its own set-up, not
/// the general page loop's).
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
unsafe fn whole_page_avx2<const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    heads: Heads<'_>,
    n: usize,
) {
    attend_whole_page_with::<Avx2F16c, OutOfLine, G>(l, kv, heads, n)
}

/// [`Declined`] with the general kernels out of line, each built with AVX2 and F16C: the
/// whole-page kernels take every page but partial ones (not a multiple of eight rows) and int8
/// groups other than 32, and inline these paths' set-up ran for every page (about a tenth of
/// SmolLM2's Q8_0 step in instructions).
struct OutOfLine;

impl Declined<Avx2F16c> for OutOfLine {
    #[inline(always)]
    fn int8_scores<const G: usize>(
        l: &Layout,
        kv: &PageSlices<'_>,
        kh: usize,
        qc: QueryCodes<'_>,
        scores: &mut [f32],
        h0: usize,
        n: usize,
        g: usize,
    ) {
        // SAFETY: only reached from the AVX2/F16C page loop, which requires AVX2 and F16C.
        unsafe { int8_scores_avx2::<G>(l, kv, kh, qc, scores, h0, n, g) }
    }

    #[inline(always)]
    fn other_scores<const G: usize>(
        l: &Layout,
        kv: &PageSlices<'_>,
        kh: usize,
        q: &[f32],
        scores: &mut [f32],
        h0: usize,
        n: usize,
    ) {
        // SAFETY: as above.
        unsafe { other_scores_avx2::<G>(l, kv, kh, q, scores, h0, n) }
    }

    #[inline(always)]
    fn int8_values<const G: usize>(
        l: &Layout,
        pr: &PageRows<'_>,
        acc: &mut [f32],
        w: &[f32],
        g: usize,
    ) {
        // SAFETY: as above.
        unsafe { int8_values_avx2::<G>(l, pr, acc, w, g) }
    }

    #[inline(always)]
    fn f16_values<const G: usize>(l: &Layout, pr: &PageRows<'_>, acc: &mut [f32], w: &[f32]) {
        // SAFETY: as above.
        unsafe { f16_values_avx2::<G>(l, pr, acc, w) }
    }
}

/// [`Declined::int8_scores`], inline's code, built with AVX2 and F16C.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
#[cold]
#[allow(clippy::too_many_arguments)]
unsafe fn int8_scores_avx2<const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    kh: usize,
    qc: QueryCodes<'_>,
    scores: &mut [f32],
    h0: usize,
    n: usize,
    g: usize,
) {
    <Inline as Declined<Avx2F16c>>::int8_scores::<G>(l, kv, kh, qc, scores, h0, n, g)
}

/// [`Declined::other_scores`], inline's code, built with AVX2 and F16C.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
#[cold]
unsafe fn other_scores_avx2<const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    kh: usize,
    q: &[f32],
    scores: &mut [f32],
    h0: usize,
    n: usize,
) {
    <Inline as Declined<Avx2F16c>>::other_scores::<G>(l, kv, kh, q, scores, h0, n)
}

/// [`Declined::int8_values`], inline's code, built with AVX2 and F16C.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
#[cold]
unsafe fn int8_values_avx2<const G: usize>(
    l: &Layout,
    pr: &PageRows<'_>,
    acc: &mut [f32],
    w: &[f32],
    g: usize,
) {
    <Inline as Declined<Avx2F16c>>::int8_values::<G>(l, pr, acc, w, g)
}

/// [`Declined::f16_values`], inline's code, built with AVX2 and F16C.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
#[cold]
unsafe fn f16_values_avx2<const G: usize>(
    l: &Layout,
    pr: &PageRows<'_>,
    acc: &mut [f32],
    w: &[f32],
) {
    <Inline as Declined<Avx2F16c>>::f16_values::<G>(l, pr, acc, w)
}

#[cfg(test)]
pub(crate) mod tests {
    use core::sync::atomic::{AtomicBool, Ordering};
    use std::vec::Vec;

    use crate::alloc::FreeList;
    use crate::arch::available;
    use crate::attention::AttentionParams;
    use crate::attention::params::row_scratch_len;
    use crate::cache::tests::{arenas, cache};
    use crate::format::ElementFormat;
    use crate::plan::CacheConfig;
    use crate::sequence::SeqMode;
    use crate::shape::Shape;

    /// Set by the test below: route every page through the portable build. Other tests running
    /// meanwhile then take the portable path too, which gives them the same bits.
    static PORTABLE_ONLY: AtomicBool = AtomicBool::new(false);

    pub(super) fn portable_only() -> bool {
        PORTABLE_ONLY.load(Ordering::Relaxed)
    }

    /// Decode and prefill attention of both builds, every format (head_dim 64 and 36, so whole
    /// blocks and leftovers; int8 and f16 pages at head_dim 128 and 256 too), full and
    /// windowed, groups of 1 to 4: the same bits.
    #[test]
    fn avx2_build_gives_the_portable_bits() {
        if !available() {
            return;
        }
        let wide: &[ElementFormat] = &[
            ElementFormat::F16,
            ElementFormat::Q8_0,
            ElementFormat::Int8 { group: 64 },
        ];
        let cases: [(u16, &[ElementFormat]); 4] = [
            (128, wide),
            (256, wide),
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
        let mut next = crate::testing::uniform(0x2545_f491_4f6c_dd1d);
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
            let q: Vec<f32> = (0..8 * 4 * row).map(|_| next()).collect();
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
                        // Groups of four, two and one: whole pages in runs of four, two, one.
                        AttentionParams::new(shape, 12),
                        AttentionParams::new(shape, 6),
                        AttentionParams::new(shape, 3),
                        AttentionParams::new(shape, 6).with_window(4, 40),
                    ] {
                        let n = params.q_heads as usize * hd as usize;
                        let q = &q[..8 * n];
                        let mut scratch = std::vec![0f32; row_scratch_len(params.q_heads, 16, hd)];
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
