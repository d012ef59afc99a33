//! Whole pages of int8 rows for a run of any `G` query heads (1 to 4) and any head_dim whose key
//! groups the ISA's integer dot products take: the Cortex-M page kernels behind
//! `Strategy::int8_pages` for the runs and shapes the three-head `asm!` loop nests of `page.rs`
//! do not serve (Gemma 3's run of four heads over head_dim 256, Qwen3's two over 128, Llama
//! 3.2's four over 64), on DSP cores with an FPU (M4, M7, M33; with Helium the general loop's
//! eight-row kernels cost less). Plain Rust, generic in the run length: a page's rows lie a
//! fixed stride apart, the query's slices and scales are taken once per page, each key word is
//! decoded once for all the run's heads (`SXTB16`, then two `SMLAD` per head), and the value
//! accumulators of a block of lanes stay in registers across all of the page's
//! rows. Each score and each output element takes its terms in the portable kernels' order:
//! the same bits.

use super::Arm;
use super::dsp;
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::format::u16_at;
use crate::numeric::Widen;

/// Key groups per head row these kernels take (head_dim 256 in groups of 32).
const MAX_GROUPS: usize = 8;

/// Lanes of one step of the value kernel (a run of four heads' accumulators: sixteen floats).
const V_LANES: usize = 4;

/// Whether the `SMLAD` loop takes groups of `g` codes: four codes a word (the query
/// interleaved by `arrange_query`, as `super::dsp_takes` says), exact in `i32` up to 256.
#[inline(always)]
fn takes(g: usize) -> bool {
    g != 0 && g % 4 == 0 && g <= 256
}

/// `PageKernels::int8_page_scores` for a run of `G` heads: `scores[h·p + r]` for every row `r`
/// of `rows` (int8 K rows of group `g`), [`kernels::int8_scores`](crate::arch::kernels::int8_scores)'s
/// bits. `false`, nothing written, unless the shape fits (`g` taken by the ISA's dot product,
/// head_dim a multiple of `g` of at most [`MAX_GROUPS`] groups, every row's codes and scales
/// within the view, `G` heads' `p` scores within `scores`).
#[inline(always)]
pub(super) fn scores<const G: usize>(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    g: usize,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / G;
    if G == 0 || !takes(g) || hd % g != 0 || hd / g > MAX_GROUPS || rows.n > p {
        return false;
    }
    let nb = hd / g;
    if rows.row_bytes < hd
        || rows.scale_bytes < 2 * nb
        || scores.len() < G * p
        || q.scales.len() < G * nb
    {
        return false;
    }
    // The DSP loop reads the query's codes two words at a time, aligned.
    let Ok(quads) = bytemuck::try_cast_slice::<i16, [u32; 2]>(q.codes) else {
        return false;
    };
    let mut qs = [[0f32; G]; MAX_GROUPS];
    for (b, qs) in qs.iter_mut().enumerate().take(nb) {
        *qs = core::array::from_fn(|h| q.scales[h * nb + b]);
    }
    let (vals, scales) = (rows.vals.as_ptr(), rows.scales.as_ptr());
    let qrow: [*const [u32; 2]; G] = core::array::from_fn(|h| quads[h * hd / 4..].as_ptr());
    for r in 0..rows.n {
        // Row `r < n`'s `hd` codes and `nb` scales lie within the view (checked above).
        let codes = vals.wrapping_add(r * rows.stride);
        let sc = scales.wrapping_add(r * rows.sstride);
        let mut s = [0f32; G];
        for (b, qs) in qs.iter().enumerate().take(nb) {
            // SAFETY: group `b < nb`'s scale lies within row `r`'s `2·nb` scale bytes.
            let ks = Arm::one(u16::from_le_bytes(unsafe {
                sc.add(2 * b).cast::<[u8; 2]>().read()
            }));
            let kc = codes.wrapping_add(b * g);
            let isum = {
                let mut isum = [0i32; G];
                let qb: [*const [u32; 2]; G] = qrow.map(|q| q.wrapping_add(b * g / 4));
                for w in 0..g / 4 {
                    // SAFETY: word `w < g / 4` of group `b` lies within row `r`'s `hd` codes
                    // (unaligned: `read_unaligned`); each head's quad `w` of group `b` lies
                    // within its `hd` query codes, aligned (`try_cast_slice` above).
                    let (k, qw) = unsafe {
                        (
                            kc.add(4 * w).cast::<u32>().read_unaligned(),
                            qb.map(|q| q.add(w).read()),
                        )
                    };
                    let (even, odd) = dsp::halves(k);
                    for (s, [q0, q1]) in isum.iter_mut().zip(qw) {
                        *s = dsp::smlad(odd, q1, dsp::smlad(even, q0, *s));
                    }
                }
                isum
            };
            for h in 0..G {
                s[h] += (qs[h] * ks) * isum[h] as f32;
            }
        }
        for (h, s) in s.into_iter().enumerate() {
            scores[h * p + r] = s;
        }
    }
    true
}

/// `PageKernels::int8_page_values` for a run of `G` heads: `acc[h·d + i] += w[h·p + r] ·
/// rows[r][i]` for every row `r` of `rows` (int8 V rows of group `g`) in order,
/// [`kernels::int8_add_scaled_rows`](crate::arch::kernels::int8_add_scaled_rows)'s bits: each
/// row's weights times its group's scale (`kernels::scale_weights`'s products), then each
/// product of that and a code added in row order. `false`, nothing written, unless the shape
/// fits (`g` a multiple of [`V_LANES`], head_dim a multiple of `g`, every row's values and
/// scales within the view, `G` heads' `p` weights within `w`).
#[inline(always)]
pub(super) fn values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
    g: usize,
) -> bool {
    let d = acc.len() / G;
    let n = rows.n;
    if G == 0 || g == 0 || g % V_LANES != 0 || d % g != 0 || n > p || w.len() < G * p {
        return false;
    }
    if rows.row_bytes < d || rows.scale_bytes < 2 * (d / g) {
        return false;
    }
    /// Rows whose weights × scales are taken at a time.
    const CHUNK: usize = 16;
    let mut ps = [[0f32; G]; CHUNK];
    let (vals, accp) = (rows.vals.as_ptr(), acc.as_mut_ptr());
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        for (k, off) in (0..d).step_by(g).enumerate() {
            for (j, ps) in ps.iter_mut().enumerate().take(m) {
                let s = Arm::one(u16_at(&rows.scales[(r0 + j) * rows.sstride..], k));
                *ps = core::array::from_fn(|h| w[h * p + r0 + j] * s);
            }
            for at in (off..off + g).step_by(V_LANES) {
                let heads = accp.wrapping_add(at);
                let row = vals.wrapping_add(r0 * rows.stride + at);
                // SAFETY: `m ≥ 1`; `at + V_LANES ≤ d` and `acc.len() ≥ G·d`: each head's block
                // `[h·d + at, h·d + at + V_LANES)` lies within `acc`, which this function borrows
                // mutably (no other reference in use); `ps` holds the `m` rows' products,
                // written above; rows `r0..r0 + m` (≤ n) lie `stride` apart from `row`, each
                // one's bytes `[at, at + V_LANES)` within its `d` value bytes, within the view.
                if unsafe { dsp::add_rows_run::<G>(heads, d, ps.as_ptr(), m, row, rows.stride) } {
                    continue;
                }
                let heads: [*mut f32; G] = core::array::from_fn(|h| heads.wrapping_add(h * d));
                // SAFETY: `at + V_LANES ≤ d` and `acc.len() ≥ G·d`: each head's block lies
                // within `acc`, which this function borrows mutably (no other reference in use).
                let mut a: [[f32; V_LANES]; G] =
                    heads.map(|a| unsafe { a.cast::<[f32; V_LANES]>().read_unaligned() });
                let mut row = vals.wrapping_add(r0 * rows.stride + at);
                for ps in &ps[..m] {
                    // SAFETY: rows `r0..r0 + m` (≤ n) lie `stride` apart, each one's bytes
                    // `[at, at + V_LANES)` within its `d` value bytes, within the view.
                    let c = unsafe { row.cast::<u32>().read_unaligned() };
                    row = row.wrapping_add(rows.stride);
                    let x: [f32; V_LANES] =
                        core::array::from_fn(|l| ((c << (24 - 8 * l)) as i32 >> 24) as f32);
                    for (a, ps) in a.iter_mut().zip(ps) {
                        for l in 0..V_LANES {
                            a[l] += ps * x[l];
                        }
                    }
                }
                for (a, h) in a.iter().zip(heads) {
                    // SAFETY: as the loads above.
                    unsafe { h.cast::<[f32; V_LANES]>().write_unaligned(*a) };
                }
            }
        }
    }
    true
}
