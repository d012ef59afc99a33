//! AArch64: the page loop with the NEON kernels, [`Neon<true>`](crate::arch::Neon) (int8 scores
//! with `SDOT`) where the CPU has the dot-product extension, `Neon<false>` elsewhere (chosen at
//! run time by `arch::build`, which also lays the query's codes out for it). A whole page of
//! int8 K and Q8_0 V rows goes to [`q8_page`] (runs of up to four query heads in the lanes of one
//! register, see `arch::aarch64::page`), other whole pages of Q8_0 or f16 rows to the lean page
//! loop (`fast::attend_whole_page`; query heads in runs of four, three, two or one: the longest
//! that divides the group), other pages to the general one, each out of line. Every step keeps
//! the portable page loop's arithmetic in its order, so the bits are the portable build's
//! (tested below and by the kernel check).

use super::super::page::{
    Heads, Keys, Layout, PageSlices, attend_page as page, attend_whole_page, rescale,
    whole_page_rows,
};
use crate::arch::query::{self, QueryCodes};
use crate::arch::{Build, Isa, Neon, build};
use crate::format::ElementFormat;
use crate::numeric::larger;

/// The page loop with this CPU's NEON kernels.
#[inline(always)]
pub(crate) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    match build() {
        Build::NeonDot => attend_neon::<true, F>(l, keys, heads),
        Build::Neon => attend_neon::<false, F>(l, keys, heads),
        Build::Portable => portable_page(l, keys, heads),
    }
}

/// The portable build (tests compare with it).
#[inline(never)]
fn portable_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    page::<crate::arch::Portable, F>(l, keys, heads)
}

/// Whole pages of int8 K and Q8_0 V rows to [`q8_page`] in runs of the longest length up to
/// four that divides the group, other pages to [`attend`].
#[inline(always)]
fn attend_neon<const DOT: bool, F: Fn(u32) -> bool>(
    l: &Layout,
    keys: &Keys<'_, F>,
    heads: Heads<'_>,
) {
    let q8 = match l.group {
        g if g % 4 == 0 => q8_rows::<DOT, F, 4>(l, keys).map(|n| (4, n)),
        g if g % 3 == 0 => q8_rows::<DOT, F, 3>(l, keys).map(|n| (3, n)),
        g if g % 2 == 0 => q8_rows::<DOT, F, 2>(l, keys).map(|n| (2, n)),
        _ => q8_rows::<DOT, F, 1>(l, keys).map(|n| (1, n)),
    };
    match q8 {
        Some((4, n)) => q8_page::<DOT, 4>(l, keys.kv, heads, n),
        Some((3, n)) => q8_page::<DOT, 3>(l, keys.kv, heads, n),
        Some((2, n)) => q8_page::<DOT, 2>(l, keys.kv, heads, n),
        Some((_, n)) => q8_page::<DOT, 1>(l, keys.kv, heads, n),
        None => attend::<Neon<DOT>, F>(l, keys, heads),
    }
}

/// The rows of a whole page (no window drops any) of int8 K rows and Q8_0 V rows whose geometry
/// [`q8_page`] takes for runs of `G` query heads (every KV head's rows of a page share it).
#[inline(always)]
fn q8_rows<const DOT: bool, F: Fn(u32) -> bool, const G: usize>(
    l: &Layout,
    keys: &Keys<'_, F>,
) -> Option<usize> {
    if l.v_fmt != ElementFormat::Q8_0 {
        return None;
    }
    let g = query::int8_group(l.k_fmt)?;
    let n = whole_page_rows::<Neon<DOT>, F, G>(l, keys)?;
    let (k, v) = (
        l.page_rows(keys.kv, false, 0, n),
        l.page_rows(keys.kv, true, 0, n),
    );
    Neon::<DOT>::q8_run_takes::<G>(l.head_dim, g, &k, &v).then_some(n)
}

/// A whole page of `n` int8 K and Q8_0 V rows that [`q8_rows`] took, KV head by KV head, run
/// by run of `G` query heads: the run's scores and page maxima (`Neon::q8_run_scores`), each
/// head's rescale to its new maximum (as `attention::fast`'s softmax), then its weights, sums and
/// V pass (`Neon::q8_run_values`). Each head's steps are those of the portable page loop.
#[inline(never)]
fn q8_page<const DOT: bool, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    heads: Heads<'_>,
    n: usize,
) {
    let Heads {
        qc, out, max, sum, ..
    } = heads;
    let hd = l.head_dim;
    let g = query::int8_group(l.k_fmt).unwrap_or(hd);
    let nb = hd / g;
    let mut w = Neon::<DOT>::q8_run_rows();
    for kh in 0..l.kv_heads {
        let (k, v) = (l.page_rows(kv, false, kh, n), l.page_rows(kv, true, kh, n));
        for h0 in (kh * l.group..(kh + 1) * l.group).step_by(G) {
            let q = QueryCodes {
                codes: &qc.codes[h0 * hd..(h0 + G) * hd],
                scales: &qc.scales[h0 * nb..(h0 + G) * nb],
            };
            // `q8_rows` checked the geometry these kernels check: they take every run.
            let Some(page_max) = Neon::<DOT>::q8_run_scores::<G>(q, &k, g, &mut w) else {
                return;
            };
            let mut shifts = [0f32; 4];
            for (h, shift) in shifts.iter_mut().enumerate().take(G) {
                let i = h0 + h;
                let new_max = larger(max[i], page_max[h]);
                rescale(
                    &mut out[i * hd..(i + 1) * hd],
                    &mut max[i],
                    &mut sum[i],
                    new_max,
                );
                *shift = max[i];
            }
            let acc = &mut out[h0 * hd..(h0 + G) * hd];
            Neon::<DOT>::q8_run_values::<G>(&mut w, shifts, &mut sum[h0..h0 + G], acc, &v);
        }
    }
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
    use crate::cache::KvCache;
    use crate::cache::tests::{arenas, cache};
    use crate::format::ElementFormat;
    use crate::plan::CacheConfig;
    use crate::sequence::{SeqId, SeqMode};
    use crate::shape::Shape;
    use crate::testing::uniform;

    /// The NEON builds this CPU runs: without `SDOT`, and with it where the CPU has it.
    fn neon_builds() -> Vec<Build> {
        let mut builds = std::vec![Build::Neon];
        if crate::aarch64_dotprod() {
            builds.push(Build::NeonDot);
        }
        builds
    }

    /// Asserts that every NEON build's attention of the query rows `q` from position `start`
    /// (head_dim `hd`, pages of 16 tokens) has the portable build's bits; `what` names the case.
    fn assert_portable_bits<'a>(
        c: &KvCache<'a, FreeList<'a>>,
        (s, start): (SeqId, u32),
        q: &[f32],
        params: &AttentionParams,
        hd: u16,
        what: &dyn core::fmt::Debug,
    ) {
        let mut scratch = std::vec![0f32; row_scratch_len(params.q_heads, 16, hd)];
        let mut run = |b: Build| {
            force(Some(b));
            let mut out = std::vec![0f32; q.len()];
            c.attention(s, 0, start, q, &mut out, params, &mut scratch)
                .unwrap();
            force(None);
            out
        };
        let portable = run(Build::Portable);
        for b in neon_builds() {
            let got = run(b);
            let same = got
                .iter()
                .zip(&portable)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{b:?} {what:?} hd {hd} {params:?}");
        }
    }

    /// Decode and prefill attention of the portable build and of the NEON builds (with `SDOT`
    /// where the CPU has it, and without), f16, Q8_0 and other int8 pages (and int8 K rows of
    /// every group with Q8_0 V rows: `q8_page`) at head_dim 36 to 256, full and windowed, groups
    /// of 1 to 4: the same bits.
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
        let mut next = uniform(0x2545_f491_4f6c_dd1d);
        let tokens = 70u32;
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
                let mut pairs = std::vec![(fmt, fmt), (ElementFormat::F16, fmt)];
                if hd % 32 == 0 {
                    pairs.push((fmt, ElementFormat::Q8_0));
                }
                for (k_fmt, v_fmt) in pairs {
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
                        let what = (k_fmt, v_fmt);
                        let at = (s, tokens - 4);
                        assert_portable_bits(&c, at, &q[..4 * n], &params, hd, &what);
                    }
                }
            }
        }
    }

    /// Sharp attention on whole Q8_0 pages (`q8_page`): queries scaled so that scores span far
    /// more than 87.3 below each head's maximum, where the weights' `exp` leaves the lanes it
    /// takes without checks (they go to the checked `exp` again, `weights_at_edges`) and
    /// weights underflow to subnormals and zero. The same bits as the portable build.
    #[test]
    fn sharp_scores_on_q8_pages_give_the_portable_bits() {
        let mut next = uniform(0x9e37_79b9_7f4a_7c15);
        let tokens = 70u32;
        for hd in [64u16, 256] {
            let shape = Shape {
                layers: 1,
                kv_heads: 3,
                head_dim: hd,
            };
            let row = 3 * hd as usize;
            let k: Vec<f32> = (0..tokens as usize * row).map(|_| next() * 3.0).collect();
            let v: Vec<f32> = (0..tokens as usize * row).map(|_| next()).collect();
            let cfg = CacheConfig::new(shape)
                .with_page_tokens(16)
                .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
                .with_sequences(1, tokens);
            let mut a = arenas(&cfg, 6);
            let mut c = cache::<FreeList<'_>>(&mut a, cfg, 6);
            let s = c.create_sequence(SeqMode::Paged).unwrap();
            c.reserve(s, tokens).unwrap();
            c.write_kv(s, 0, 0, &k, &v).unwrap();
            for q_heads in [3u16, 6, 9, 12] {
                let params = AttentionParams::new(shape, q_heads);
                let n = q_heads as usize * hd as usize;
                // Scores of a few hundred in magnitude: most rows' weights far below e^-87.
                let q: Vec<f32> = (0..n).map(|_| next() * 40.0).collect();
                assert_portable_bits(&c, (s, tokens - 1), &q, &params, hd, &"sharp Q8_0");
            }
        }
    }
}
