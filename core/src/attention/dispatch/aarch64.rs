//! AArch64: the page loop with the NEON kernels, [`Neon<true>`](crate::arch::Neon) (int8 scores
//! with `SDOT`) where the CPU has the dot-product extension, `Neon<false>` elsewhere (chosen at
//! run time by `arch::build`, which also lays the query's codes out for it). A whole page of
//! Q8_0 or f16 rows (query heads in runs of four, three, two or one: the longest that divides
//! the group) goes to the lean page loop, other pages to the general one, each out of line.
//! Both share the portable code (the page loop and its kernels are `#[inline(always)]`), so the
//! bits are the portable build's (tested below and by the kernel check).

use super::super::page::{
    Heads, Keys, Layout, PageSlices, attend_page as page, attend_whole_page, whole_page_rows,
};
use crate::arch::{Build, Isa, Neon, build};

/// The page loop with this CPU's NEON kernels.
#[inline(always)]
pub(crate) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    match build() {
        Build::NeonDot => attend::<Neon<true>, F>(l, keys, heads),
        Build::Neon => attend::<Neon<false>, F>(l, keys, heads),
        Build::Portable => portable_page(l, keys, heads),
    }
}

/// The portable build (tests compare with it).
#[inline(never)]
fn portable_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    page::<crate::arch::Portable, F>(l, keys, heads)
}

/// Whole pages to [`whole_page`] in runs of the longest length up to four that divides the
/// group, other pages to [`general_page`].
#[inline(always)]
fn attend<D: Isa, F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    let whole = match l.group {
        g if g % 4 == 0 => whole_page_rows::<D, F, 4>(l, keys).map(|n| (4, n)),
        g if g % 3 == 0 => whole_page_rows::<D, F, 3>(l, keys).map(|n| (3, n)),
        g if g % 2 == 0 => whole_page_rows::<D, F, 2>(l, keys).map(|n| (2, n)),
        _ => whole_page_rows::<D, F, 1>(l, keys).map(|n| (1, n)),
    };
    match whole {
        Some((4, n)) => whole_page::<D, 4>(l, keys.kv, heads, n),
        Some((3, n)) => whole_page::<D, 3>(l, keys.kv, heads, n),
        Some((2, n)) => whole_page::<D, 2>(l, keys.kv, heads, n),
        Some((_, n)) => whole_page::<D, 1>(l, keys.kv, heads, n),
        None => general_page::<D, F>(l, keys, heads),
    }
}

/// [`attend_whole_page`] with the NEON kernels, out of line.
#[inline(never)]
fn whole_page<D: Isa, const G: usize>(l: &Layout, kv: &PageSlices<'_>, heads: Heads<'_>, n: usize) {
    attend_whole_page::<D, G>(l, kv, heads, n)
}

/// The general page loop with the NEON kernels, out of line.
#[inline(never)]
fn general_page<D: Isa, F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    page::<D, F>(l, keys, heads)
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use crate::alloc::FreeList;
    use crate::arch::{Build, force};
    use crate::attention::AttentionParams;
    use crate::attention::params::row_scratch_len;
    use crate::cache::tests::{arenas, cache};
    use crate::format::ElementFormat;
    use crate::plan::CacheConfig;
    use crate::sequence::SeqMode;
    use crate::shape::Shape;

    /// Decode and prefill attention of the portable build and of the NEON builds (with `SDOT`
    /// where the CPU has it, and without), f16, Q8_0 and other int8 pages at head_dim 64 to 256,
    /// full and windowed, groups of 1 to 4: the same bits.
    #[test]
    fn neon_builds_give_the_portable_bits() {
        let int8: &[ElementFormat] = &[
            ElementFormat::F16,
            ElementFormat::Q8_0,
            ElementFormat::Int8 { group: 64 },
        ];
        let cases: [(u16, &[ElementFormat]); 4] = [
            (256, int8),
            (128, int8),
            (
                64,
                &[
                    ElementFormat::F32,
                    ElementFormat::F16,
                    ElementFormat::Q8_0,
                    ElementFormat::Int8 { group: 16 },
                ],
            ),
            (36, &[ElementFormat::F16, ElementFormat::Int8 { group: 12 }]),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let tokens = 70u32;
        let mut builds = std::vec![Build::Neon];
        if crate::aarch64_dotprod() {
            builds.push(Build::NeonDot);
        }
        for (hd, fmts) in cases {
            let shape = Shape {
                layers: 1,
                kv_heads: 3,
                head_dim: hd,
            };
            let row = 3 * hd as usize;
            let k: Vec<f32> = (0..tokens as usize * row).map(|_| next() * 3.0).collect();
            let v: Vec<f32> = (0..tokens as usize * row).map(|_| next()).collect();
            let q: Vec<f32> = (0..4 * 4 * row).map(|_| next()).collect();
            for &fmt in fmts {
                for (k_fmt, v_fmt) in [(fmt, fmt), (ElementFormat::F16, fmt)] {
                    let cfg = CacheConfig::new(shape)
                        .with_page_tokens(16)
                        .with_formats(k_fmt, v_fmt)
                        .with_sequences(1, tokens);
                    let mut a = arenas(&cfg, 6);
                    let mut c = cache::<FreeList<'_>>(&mut a, cfg, 6);
                    let s = c.create_sequence(SeqMode::Paged).unwrap();
                    c.reserve(s, tokens).unwrap();
                    c.write_kv(s, 0, 0, &k, &v).unwrap();
                    for params in [
                        AttentionParams::new(shape, 9),
                        AttentionParams::new(shape, 12),
                        AttentionParams::new(shape, 6),
                        AttentionParams::new(shape, 3),
                        AttentionParams::new(shape, 6).with_window(4, 40),
                    ] {
                        let n = params.q_heads as usize * hd as usize;
                        let q = &q[..4 * n];
                        let mut scratch = std::vec![0f32; row_scratch_len(params.q_heads, 16, hd)];
                        let mut run = |b: Build| {
                            force(Some(b));
                            let mut out = std::vec![0f32; q.len()];
                            c.attention(s, 0, tokens - 4, q, &mut out, &params, &mut scratch)
                                .unwrap();
                            force(None);
                            out
                        };
                        let portable = run(Build::Portable);
                        for &b in &builds {
                            let got = run(b);
                            let same = got
                                .iter()
                                .zip(&portable)
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{b:?} {k_fmt:?}/{v_fmt:?} hd {hd} {params:?}");
                        }
                    }
                }
            }
        }
    }
}
