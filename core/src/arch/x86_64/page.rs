//! Whole pages of Q8_0 rows with AVX2 and F16C: the x86-64 kernels behind `Strategy::int8_pages`.
//!
//! A page's rows of one KV head lie a fixed stride apart, so after one check of the page's
//! extent every row is a pointer step: no per-row slices, no gathers of eight rows' positions,
//! and the value accumulators stay in registers across all of the page's rows (up to [`CHUNK`]
//! at a time) instead of eight. Each score and each output element takes its terms in the
//! portable kernels' order, so the bits are theirs (`kernels::int8_scores`,
//! `kernels::int8_add_scaled_rows`; tested in `tests`).
//!

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _mm_cvtsi32_si128, _mm_loadl_epi64, _mm_loadu_si128,
    _mm_unpackhi_epi32, _mm_unpackhi_epi64, _mm_unpacklo_epi16, _mm_unpacklo_epi32,
    _mm_unpacklo_epi64, _mm256_add_epi32, _mm256_add_ps, _mm256_cvtepi8_epi16,
    _mm256_cvtepi8_epi32, _mm256_cvtepi32_ps, _mm256_cvtph_ps, _mm256_hadd_epi32, _mm256_loadu_ps,
    _mm256_loadu_si256, _mm256_madd_epi16, _mm256_mul_ps, _mm256_permute2x128_si256,
    _mm256_set1_ps, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_storeu_ps,
};

use crate::arch::Portable;
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::numeric::Widen;

/// Q8_0's group: 32 codes per scale.
const GROUP: usize = 32;

/// Rows whose scaled weights the value kernel keeps at a time (a page of 16 tokens: all).
const CHUNK: usize = 32;

/// The eight f16 scales of group `b` of rows `r0..r0 + 8`, as f32.
///
/// # Safety
///
/// AVX and F16C are present; `rows.scales` holds `2·b + 2` bytes at `(r0 + 7)·sstride`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales8(rows: &PageRows<'_>, r0: usize, b: usize) -> __m256 {
    let base = rows.scales.as_ptr();
    let s: [u16; 8] = core::array::from_fn(|i| {
        // SAFETY: the caller's bound on row `r0 + 7` covers every row up to it.
        unsafe {
            base.add((r0 + i) * rows.sstride + 2 * b)
                .cast::<[u8; 2]>()
                .read()
        }
    })
    .map(u16::from_le_bytes);
    // SAFETY: F16C is present; the load reads the 16 bytes of `s`.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast::<__m128i>())) }
}

/// Groups `b..b + W` (`W` = 4 or 2) of rows `r0..r0 + 8`'s f16 scales as f32, group-major:
/// element `j` holds the eight rows' scales of group `b + j`, row `i` in lane `i`. Each row's
/// `2·W` scale bytes come in one load, then an eight-by-`W` transpose of 16-bit words (unpacks of
/// words, dwords and quadwords): a fifth of [`scales8`]'s inserts and shuffles per group.
/// Elements `W..4` are unspecified.
///
/// # Safety
///
/// AVX2 and F16C are present; `rows.scales` holds `2·(b + W)` bytes at `(r0 + 7)·sstride`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales_of_groups<const W: usize>(
    rows: &PageRows<'_>,
    r0: usize,
    b: usize,
) -> [__m256; 4] {
    // SAFETY: the caller's bound on row `r0 + 7` covers every row up to it; each load reads
    // `2·W` of a row's scale bytes from group `b`.
    unsafe {
        let base = rows.scales.as_ptr().add(2 * b);
        let a: [__m128i; 8] = core::array::from_fn(|i| {
            let at = base.add((r0 + i) * rows.sstride);
            if W == 4 {
                _mm_loadl_epi64(at.cast::<__m128i>())
            } else {
                _mm_cvtsi32_si128(at.cast::<i32>().read_unaligned())
            }
        });
        // Rows 2j and 2j + 1 interleaved: dword g holds their scales of group g.
        let t: [__m128i; 4] = core::array::from_fn(|j| _mm_unpacklo_epi16(a[2 * j], a[2 * j + 1]));
        // Quadword g of `lo` (groups 0, 1) and `hi` (groups 2, 3): four rows' scales of group g.
        let lo = [
            _mm_unpacklo_epi32(t[0], t[1]),
            _mm_unpacklo_epi32(t[2], t[3]),
        ];
        let hi = [
            _mm_unpackhi_epi32(t[0], t[1]),
            _mm_unpackhi_epi32(t[2], t[3]),
        ];
        [
            _mm256_cvtph_ps(_mm_unpacklo_epi64(lo[0], lo[1])),
            _mm256_cvtph_ps(_mm_unpackhi_epi64(lo[0], lo[1])),
            _mm256_cvtph_ps(_mm_unpacklo_epi64(hi[0], hi[1])),
            _mm256_cvtph_ps(_mm_unpackhi_epi64(hi[0], hi[1])),
        ]
    }
}

/// The scales of the block of `width` ([`block_width`]) groups from `b` of rows `r0..r0 + 8`
/// (see [`scales_of_groups`]; one group by [`scales8`]).
///
/// # Safety
///
/// AVX2 and F16C are present; `rows.scales` holds `2·(b + width)` bytes at `(r0 + 7)·sstride`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_scales(rows: &PageRows<'_>, r0: usize, b: usize, width: usize) -> [__m256; 4] {
    // SAFETY: the caller's obligations.
    unsafe {
        match width {
            4 => scales_of_groups::<4>(rows, r0, b),
            2 => scales_of_groups::<2>(rows, r0, b),
            _ => [scales8(rows, r0, b); 4],
        }
    }
}

/// How many groups the block from group `b` of `nb` holds: four while four remain, then two,
/// then one.
#[inline(always)]
const fn block_width(b: usize, nb: usize) -> usize {
    match nb - b {
        4.. => 4,
        2 | 3 => 2,
        _ => 1,
    }
}

/// Whether the page's rows hold `hd` Q8_0 codes and their scales each (the view checked the
/// rows against its slices when it was built).
#[inline(always)]
fn page_fits(rows: &PageRows<'_>, hd: usize) -> bool {
    let nb = hd / GROUP;
    hd % GROUP == 0
        && hd > 0
        && rows.stride >= hd
        && rows.sstride >= 2 * nb
        && rows.row_bytes >= hd
        && rows.scale_bytes >= 2 * nb
}

/// `PageKernels::int8_page_scores` for Q8_0 rows and `G` heads, eight rows at a time: per group the
/// rows' exact integer sums ([`group_sums8`]), then `score += (q scale · k scale) · sum`, group
/// by group, eight rows per instruction, stored straight into each head's scores. `false`, nothing
/// written, unless the page has a multiple of eight rows and every length fits.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn q8_scores<const G: usize>(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / G;
    let nb = hd / GROUP;
    let n = rows.n;
    if G == 0
        || !page_fits(rows, hd)
        || n % 8 != 0
        || n > p
        || scores.len() < G * p
        || q.scales.len() < G * nb
    {
        return false;
    }
    let k = rows.vals.as_ptr();
    for r0 in (0..n).step_by(8) {
        // SAFETY: AVX2 and F16C are present (the caller's obligation). Rows `r0..r0 + 8` are
        // within the page (`n` a multiple of eight), whose extent `page_fits` checked: each key
        // load reads 16 of a row's `hd` codes; query loads read 16 of a head's `hd` codes;
        // stores write eight of a head's `p ≥ n` scores.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); G];
            let mut kscales = [_mm256_setzero_ps(); 4];
            let mut next = 0;
            for b in 0..nb {
                if b == next {
                    let width = block_width(b, nb);
                    kscales = block_scales(rows, r0, b, width);
                    next += width;
                }
                // Blocks start at multiples of their width, so `b % 4` is `b`'s place in its block.
                let kscale = kscales[b % 4];
                let isums = group_sums8::<G>(q.codes, hd, b, |i| {
                    k.add((r0 + i) * rows.stride + b * GROUP)
                });
                for (h, (acc, isum)) in acc.iter_mut().zip(isums).enumerate() {
                    let isum = _mm256_cvtepi32_ps(isum);
                    let scale = _mm256_mul_ps(_mm256_set1_ps(q.scales[h * nb + b]), kscale);
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(scale, isum));
                }
            }
            for (h, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(scores.as_mut_ptr().add(h * p + r0), *acc);
            }
        }
    }
    true
}

/// Group `b`'s exact integer sums of eight Q8_0 rows for `G` heads: per head `h`, one vector of
/// the eight rows' sums of products with the head's 32 query codes (`q[h·hd + 32b..]`), row `i`
/// in lane `i`. Each row's codes widened to i16 and multiplied into i32 pairs with `vpmaddwd`,
/// then per four rows `hadd(a, b)` (per 128-bit half: `[a0+a1, a2+a3, b0+b1, b2+b3]`) twice:
/// the four rows' half sums, low halves in the low lane and high halves in the high lane, the
/// halves' sums last. Exact in `i32` (32 products of at most 2^15 · 2^7), so in any order.
///
/// # Safety
///
/// AVX2 is present; `row(i)` (`i < 8`) points at 32 readable code bytes; `q` holds `G·hd`
/// codes with `32b + 32 ≤ hd`.
#[inline(always)]
pub(super) unsafe fn group_sums8<const G: usize>(
    q: &[i16],
    hd: usize,
    b: usize,
    row: impl Fn(usize) -> *const u8,
) -> [__m256i; G] {
    // SAFETY: the caller's obligations: AVX2; each query load reads 16 of a head's codes, each
    // key load 16 of a row's 32 code bytes.
    unsafe {
        let mut qv = [[_mm256_setzero_si256(); 2]; G];
        for (h, qv) in qv.iter_mut().enumerate() {
            let c = q.as_ptr().add(h * hd + b * GROUP);
            qv[0] = _mm256_loadu_si256(c.cast::<__m256i>());
            qv[1] = _mm256_loadu_si256(c.add(16).cast::<__m256i>());
        }
        let mut quads = [[_mm256_setzero_si256(); G]; 2];
        for (qd, quad) in quads.iter_mut().enumerate() {
            let mut part = [[_mm256_setzero_si256(); G]; 4];
            for (i, part) in part.iter_mut().enumerate() {
                let k = row(qd * 4 + i);
                let lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(k.cast::<__m128i>()));
                let hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(k.add(16).cast::<__m128i>()));
                for (p, qv) in part.iter_mut().zip(&qv) {
                    *p = _mm256_add_epi32(
                        _mm256_madd_epi16(qv[0], lo),
                        _mm256_madd_epi16(qv[1], hi),
                    );
                }
            }
            for (h, quad) in quad.iter_mut().enumerate() {
                *quad = _mm256_hadd_epi32(
                    _mm256_hadd_epi32(part[0][h], part[1][h]),
                    _mm256_hadd_epi32(part[2][h], part[3][h]),
                );
            }
        }
        core::array::from_fn(|h| {
            let lows = _mm256_permute2x128_si256::<0x20>(quads[0][h], quads[1][h]);
            let highs = _mm256_permute2x128_si256::<0x31>(quads[0][h], quads[1][h]);
            _mm256_add_epi32(lows, highs)
        })
    }
}

/// `PageKernels::int8_page_values` for Q8_0 rows and `G ≤ 4`
/// heads: per group, each row's weights times its scale (eight rows per instruction, one
/// rounding each, as `kernels::scale_weights`), then per sixteen lanes the heads' accumulators
/// in registers across up to [`CHUNK`] rows, `acc + w · x` row by row in order. `false`, nothing
/// written, unless every length fits.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn q8_values<const G: usize>(
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
    let v = rows.vals.as_ptr();
    let nb = d / GROUP;
    let mut k0 = 0;
    while k0 < nb {
        let width = block_width(k0, nb);
        for c0 in (0..n).step_by(CHUNK) {
            let m = (n - c0).min(CHUNK);
            // Each group's weights × scales: `ps[j][h][r]` for group `k0 + j`.
            let mut ps = [[[0f32; CHUNK]; G]; 4];
            // SAFETY: AVX2 and F16C are present (the caller's obligation). Rows `r < n` are
            // within the page `page_fits` checked (their `nb` groups' scales too); weight loads
            // read eight of a head's `p ≥ n` weights; stores write eight of `ps[j][h]`'s `CHUNK`.
            unsafe {
                let mut r = 0;
                while r + 8 <= m {
                    let s = block_scales(rows, c0 + r, k0, width);
                    for h in 0..G {
                        let wv = _mm256_loadu_ps(w.as_ptr().add(h * p + c0 + r));
                        for (ps, s) in ps.iter_mut().zip(s).take(width) {
                            _mm256_storeu_ps(ps[h].as_mut_ptr().add(r), _mm256_mul_ps(wv, s));
                        }
                    }
                    r += 8;
                }
                for r in r..m {
                    for (j, ps) in ps.iter_mut().enumerate().take(width) {
                        let at = (c0 + r) * rows.sstride + 2 * (k0 + j);
                        let s = Portable::one(u16::from_le_bytes([
                            rows.scales[at],
                            rows.scales[at + 1],
                        ]));
                        for (h, ps) in ps.iter_mut().enumerate() {
                            ps[r] = w[h * p + c0 + r] * s;
                        }
                    }
                }
            }
            for (j, ps) in ps.iter().enumerate().take(width) {
                // Runs of up to two heads take a whole group of 32 lanes a pass (their
                // accumulators fit the sixteen registers), longer runs two passes of 16.
                for part in 0..GROUP / lanes::<G>() {
                    let at = (k0 + j) * GROUP + part * lanes::<G>();
                    // SAFETY: AVX2 is present (the caller's obligation); `at + lanes ≤ d` (a
                    // group's lanes); rows `c0..c0 + m` lie within the checked page; `ps[h]`
                    // holds `CHUNK ≥ m` weights.
                    unsafe {
                        if lanes::<G>() == 32 {
                            values_pass::<G, 4>(acc, d, at, v, rows.stride, c0, m, ps);
                        } else {
                            values_pass::<G, 2>(acc, d, at, v, rows.stride, c0, m, ps);
                        }
                    }
                }
            }
        }
        k0 += width;
    }
    true
}

/// The lanes of one V pass for runs of `G` heads: 32 (a whole group) for up to two heads, 16
/// for more (their accumulators would not fit the registers).
const fn lanes<const G: usize>() -> usize {
    if G <= 2 { 32 } else { 16 }
}

/// One pass of [`q8_values`] over `8·V` lanes from `at` for rows `c0..c0 + m`: the `G` heads'
/// accumulators loaded, then each row's terms in order ([`add_row`]), two rows a step (half the
/// loop's count, compare and branch per row), then stored.
///
/// # Safety
///
/// AVX2 is present; `acc` holds `G·d` elements with `at + 8·V ≤ d`; rows `c0..c0 + m` hold
/// `at + 8·V` readable codes from `v + row·stride`; `m ≤ CHUNK`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn values_pass<const G: usize, const V: usize>(
    acc: &mut [f32],
    d: usize,
    at: usize,
    v: *const u8,
    stride: usize,
    c0: usize,
    m: usize,
    ps: &[[f32; CHUNK]; G],
) {
    // SAFETY: the caller's obligations: accumulator loads and stores cover `8·V` of head `h`'s
    // `d` elements from `at`; code loads read `8·V` of a row's codes from `at`; `r < m ≤ CHUNK`
    // indexes `ps` unchecked.
    unsafe {
        let mut a = [[_mm256_setzero_ps(); V]; G];
        for (h, a) in a.iter_mut().enumerate() {
            for (b, a) in a.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(acc.as_ptr().add(h * d + at + b * 8));
            }
        }
        let mut c = v.add(c0 * stride + at);
        let mut r = 0;
        while r + 2 <= m {
            add_row::<G, V>(&mut a, c, |h| *ps[h].get_unchecked(r));
            add_row::<G, V>(&mut a, c.add(stride), |h| *ps[h].get_unchecked(r + 1));
            c = c.add(2 * stride);
            r += 2;
        }
        if r < m {
            add_row::<G, V>(&mut a, c, |h| *ps[h].get_unchecked(r));
        }
        for (h, a) in a.iter().enumerate() {
            for (b, a) in a.iter().enumerate() {
                _mm256_storeu_ps(acc.as_mut_ptr().add(h * d + at + b * 8), *a);
            }
        }
    }
}

/// One V row's terms for `G` heads' accumulators of `8·V` lanes: the `8·V` codes at `c` widened
/// to f32 (blocks of eight), then `a[h][b] + w(h) · x[b]`, a multiply and an add (no fused
/// multiply-add: the portable kernel's rounding).
///
/// # Safety
///
/// AVX2 is present; `c` points at `8·V` readable bytes.
#[inline(always)]
pub(super) unsafe fn add_row<const G: usize, const V: usize>(
    a: &mut [[__m256; V]; G],
    c: *const u8,
    w: impl Fn(usize) -> f32,
) {
    // SAFETY: the caller's obligations: AVX2; each load reads 8 of the `8·V` bytes at `c`.
    unsafe {
        let x: [__m256; V] = core::array::from_fn(|b| {
            let c = c.add(8 * b);
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(c.cast::<__m128i>())))
        });
        for (h, a) in a.iter_mut().enumerate() {
            let w = _mm256_set1_ps(w(h));
            for (a, x) in a.iter_mut().zip(x) {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(w, x));
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::vec::Vec;

    use super::*;
    use crate::arch::kernels::{self, Row};

    /// A random page: `n` rows `stride` bytes apart (`hd` codes each, −128 and 127 among them),
    /// f16 scales `sstride` bytes apart (subnormal, huge, infinite and NaN ones among them).
    struct Page {
        vals: Vec<u8>,
        scales: Vec<u8>,
        stride: usize,
        sstride: usize,
        n: usize,
    }

    impl Page {
        fn new(next: &mut impl FnMut() -> u64, n: usize, hd: usize) -> Self {
            let (stride, sstride) = (hd + 32 * (next() % 3) as usize, hd / 16 + 2);
            let special = [0x0001u16, 0x03ff, 0x7bff, 0x7c00, 0x7e00, 0xfc00, 0x8000];
            let vals = (0..n * stride)
                .map(|_| match next() % 9 {
                    0 => 0x80,
                    1 => 0x7f,
                    _ => (next() >> 24) as u8,
                })
                .collect();
            let scales = (0..n * sstride / 2)
                .flat_map(|_| {
                    let r = next();
                    let s = if r % 11 == 0 {
                        special[(r >> 8) as usize % special.len()]
                    } else {
                        0x2000 + (r >> 16) as u16 % 0x2800
                    };
                    s.to_le_bytes()
                })
                .collect();
            Page {
                vals,
                scales,
                stride,
                sstride,
                n,
            }
        }

        fn rows(&self, hd: usize) -> PageRows<'_> {
            self.rows_of(hd, hd)
        }

        /// The page's rows as a view of `row_bytes` value bytes each.
        fn rows_of(&self, hd: usize, row_bytes: usize) -> PageRows<'_> {
            PageRows::new(
                &self.vals,
                &self.scales,
                self.stride,
                self.sstride,
                self.n,
                row_bytes,
                hd / 16,
            )
            .expect("a page")
        }

        fn row(&self, r: usize, hd: usize) -> Row<'_> {
            self.rows(hd).row(r, hd)
        }
    }

    /// The xorshift64 stream of the page kernels' tests (`page_f16`'s too).
    pub(crate) fn xorshift() -> impl FnMut() -> u64 {
        crate::testing::xorshift(0x2545_f491_4f6c_dd1d)
    }

    /// The same bits, any NaN equal to any NaN.
    pub(crate) fn same(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        s: &mut [f32],
        p: usize,
    ) -> bool {
        // SAFETY: the caller checked AVX2 and F16C.
        unsafe { q8_scores::<G>(q, rows, s, p) }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
    ) -> bool {
        // SAFETY: the caller checked AVX2 and F16C.
        unsafe { q8_values::<G>(acc, w, p, rows) }
    }

    /// Pages of 8 to 40 rows, one to four heads, `head_dim` 32 to 256, rows and scales further
    /// apart than one row: each head's scores have the portable kernel's bits (and rows past the
    /// page are left alone); pages of other lengths are refused, nothing written.
    #[test]
    fn page_scores_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        fn check<const G: usize>(next: &mut impl FnMut() -> u64) {
            for n in 1..=40 {
                let hd = 32 * (1 + next() % 8) as usize;
                let page = Page::new(next, n, hd);
                let codes: Vec<i16> = (0..G * hd)
                    .map(|_| match next() % 13 {
                        0 => -32767,
                        1 => 32767,
                        _ => next() as i16,
                    })
                    .collect();
                let qs: Vec<f32> = (0..G * hd / 32)
                    .map(|_| (next() % 1000) as f32 * 1e-4)
                    .collect();
                let q = QueryCodes {
                    codes: &codes,
                    scales: &qs,
                };
                let p = n + (next() % 3) as usize;
                let mut got = std::vec![-7.0f32; G * p];
                // SAFETY: AVX2 and F16C are present (checked by the test).
                let took = unsafe { scores::<G>(q, &page.rows(hd), &mut got, p) };
                assert_eq!(took, n % 8 == 0, "G {G} n {n}");
                if !took {
                    assert!(got.iter().all(|&s| s == -7.0));
                    continue;
                }
                let mut want = std::vec![-7.0f32; G * p];
                for r0 in (0..n).step_by(8) {
                    let rows: Vec<Row<'_>> = (r0..r0 + 8).map(|r| page.row(r, hd)).collect();
                    let s = kernels::int8_scores::<Portable, G>(q, &rows, 32);
                    for (h, s) in s.iter().enumerate() {
                        want[h * p + r0..][..8].copy_from_slice(s);
                    }
                }
                assert!(same(&got, &want), "G {G} n {n} hd {hd}");
            }
        }
        let mut next = xorshift();
        for _ in 0..5 {
            check::<1>(&mut next);
            check::<2>(&mut next);
            check::<3>(&mut next);
            check::<4>(&mut next);
        }
    }

    /// Pages of 1 to 40 rows (more than one chunk, eight-row blocks and tails), one to four
    /// heads, head_dim 32 to 256: every output element has the portable kernel's bits, rows
    /// taken in order.
    #[test]
    fn page_values_give_the_portable_bits() {
        if !super::super::available() {
            return;
        }
        fn check<const G: usize>(next: &mut impl FnMut() -> u64) {
            for n in 1..=40 {
                let hd = 32 * (1 + next() % 8) as usize;
                let page = Page::new(next, n, hd);
                let p = n + (next() % 9) as usize;
                let w: Vec<f32> = (0..G * p)
                    .map(|_| (next() % 10_000) as f32 * 1.3e-4)
                    .collect();
                let start: Vec<f32> = (0..G * hd)
                    .map(|_| (next() % 2000) as f32 * 0.01 - 10.0)
                    .collect();
                let mut got = start.clone();
                // SAFETY: AVX2 and F16C are present (checked by the test).
                assert!(unsafe { values::<G>(&mut got, &w, p, &page.rows(hd)) });
                let mut want = start;
                for r0 in (0..n).step_by(8) {
                    let m = (n - r0).min(8);
                    let rows: Vec<Row<'_>> = (r0..r0 + m).map(|r| page.row(r, hd)).collect();
                    let ws: Vec<[f32; G]> = (r0..r0 + m)
                        .map(|r| core::array::from_fn(|h| w[h * p + r]))
                        .collect();
                    kernels::int8_add_scaled_rows::<Portable, G>(&mut want, &ws, &rows, 32);
                }
                assert!(same(&got, &want), "G {G} n {n} hd {hd}");
            }
        }
        let mut next = xorshift();
        for _ in 0..5 {
            check::<1>(&mut next);
            check::<2>(&mut next);
            check::<3>(&mut next);
            check::<4>(&mut next);
        }
    }

    /// Pages whose slices are shorter than their rows say, or heads of other lengths, are
    /// refused: nothing written.
    #[test]
    fn page_kernels_refuse_what_does_not_fit() {
        if !super::super::available() {
            return;
        }
        let mut next = xorshift();
        let page = Page::new(&mut next, 16, 64);
        let short = page.rows_of(64, 63);
        let codes = std::vec![1i16; 3 * 64];
        let qs = std::vec![1.0f32; 6];
        let q = QueryCodes {
            codes: &codes,
            scales: &qs,
        };
        let mut s = std::vec![0.5f32; 3 * 16];
        let mut acc = std::vec![0.5f32; 3 * 64];
        let w = std::vec![1.0f32; 3 * 16];
        // SAFETY: AVX2 and F16C are present (checked above).
        unsafe {
            assert!(!scores::<3>(q, &short, &mut s, 16));
            assert!(!values::<3>(&mut acc, &w, 16, &short));
            // Fewer scores or weights than three heads' pages.
            assert!(!scores::<3>(q, &page.rows(64), &mut s[..47], 16));
            assert!(!values::<3>(&mut acc, &w[..47], 16, &page.rows(64)));
            // Rows of 48 codes (not whole groups) and an accumulator not three heads long.
            assert!(!values::<3>(&mut acc[..3 * 48], &w, 16, &page.rows(48)));
            assert!(!values::<3>(&mut acc[..190], &w, 16, &page.rows(64)));
        }
        assert!(s.iter().all(|&x| x == 0.5) && acc.iter().all(|&x| x == 0.5));
    }
}
