//! Whole pages of int8 rows for three query heads per KV head (SmolLM2's group, and many
//! models'): the Cortex-M page kernels behind [`Isa::PAGE_ROWS`]. A page's rows lie a fixed
//! stride apart, so each row is one pointer step, the query's slices and scales are taken once
//! per page, and the value accumulators stay in registers across all of the page's rows (up to
//! [`CHUNK`] at a time) instead of eight. Each score and each output element takes its terms in
//! the portable kernels' order: the same bits.

use super::Arm;
#[cfg(edgekv_arm_dsp)]
use super::dsp;
#[cfg(edgekv_arm_mve)]
use super::mve;
use crate::arch::Isa;
use crate::attention::page::PageRows;
use crate::attention::query::QueryCodes;
use crate::format::u16_at;

/// Groups per head row the score kernel takes (SmolLM2: two of 32).
const MAX_GROUPS: usize = 8;

/// Integer sums (of three heads each) the score kernel keeps between its two passes: [`CHUNK`]
/// rows of up to four groups, fewer rows of more.
const SUMS: usize = 64;

/// Rows whose weights the value kernel scales at a time (a page of SmolLM2's cache: 16).
const CHUNK: usize = 16;

/// Lanes of one step of the value kernel: Helium's eight, or the DSP build's four (whose
/// twelve accumulators fill half the FPU's registers).
#[cfg(edgekv_arm_mve)]
const V_LANES: usize = 8;
#[cfg(not(edgekv_arm_mve))]
const V_LANES: usize = 4;

/// Codes per step of the ISA's score loop: Helium's sixteen, the DSP loop's eight.
#[cfg(edgekv_arm_mve)]
const SCORE_STEP: usize = 16;
#[cfg(not(edgekv_arm_mve))]
const SCORE_STEP: usize = 8;

/// What the ISAs' page score loops read (at these offsets): the three query rows' starts, steps
/// per group, bytes from a key row's end to the next row's start, groups per row, rows.
#[repr(C)]
pub(super) struct Dot3Page {
    q: [*const i16; 3],
    steps: usize,
    advance: usize,
    groups: usize,
    pub(super) rows: usize,
}

/// The integer dot products of three query heads' codes with every group of `g` codes of `n`
/// rows `stride` bytes apart from `k`'s start: `out[r·groups + b]`, `groups = out.len() / n`, in
/// the ISA's loop nest. Nothing is written unless every length fits (and [`dot3_takes`] `g`).
#[inline(always)]
fn dot3_page(q: [&[i16]; 3], k: &[u8], stride: usize, n: usize, g: usize, out: &mut [[i32; 3]]) {
    let groups = out.len() / n.max(1);
    let row = groups * g;
    let fits = n > 0
        && groups > 0
        && stride >= row
        && dot3_takes(g, q[0])
        && q.iter()
            .all(|q| q.len() >= row && q.as_ptr().align_offset(4) == 0)
        && k.len() >= (n - 1) * stride + row;
    if !fits {
        return;
    }
    let p = Dot3Page {
        q: q.map(<[i16]>::as_ptr),
        steps: g / SCORE_STEP,
        advance: stride - row,
        groups,
        rows: n,
    };
    // SAFETY: checked above: every count ≥ 1 (`g ≥ SCORE_STEP`), each query row aligned and
    // `groups · g` codes long, the `n` key rows `stride` apart within `k`, `out` `n · groups`
    // long.
    #[cfg(edgekv_arm_mve)]
    unsafe {
        mve::dot3_page(&p, k.as_ptr(), out.as_mut_ptr())
    };
    // SAFETY: as above.
    #[cfg(not(edgekv_arm_mve))]
    unsafe {
        dsp::dot3_page(&p, k.as_ptr(), out.as_mut_ptr())
    };
}

/// Whether [`dot3_page`] takes groups of `g` codes (exact in `i32` up to 256, whole steps of
/// [`SCORE_STEP`]) and this query (the DSP loop reads its codes two words at a time, aligned).
#[inline(always)]
fn dot3_takes(g: usize, q: &[i16]) -> bool {
    g != 0 && g % SCORE_STEP == 0 && g <= 256 && q.as_ptr().align_offset(4) == 0
}

/// [`Isa::int8_page_scores`] for three heads: the integer sums of up to [`CHUNK`] rows and all
/// their groups in one `asm!` loop nest, then each row's score from its groups in order.
/// ([`SUMS`] ≥ [`MAX_GROUPS`], so every chunk holds a row.)
#[inline(always)]
pub(super) fn scores3(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    g: usize,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / 3;
    if !dot3_takes(g, q.codes) || hd % g != 0 || hd / g > MAX_GROUPS || rows.n > p {
        return false;
    }
    let nb = hd / g;
    let mut qs = [[0f32; 3]; MAX_GROUPS];
    for (b, qs) in qs.iter_mut().enumerate().take(nb) {
        *qs = core::array::from_fn(|h| q.scales[h * nb + b]);
    }
    let qh: [&[i16]; 3] = core::array::from_fn(|h| &q.codes[h * hd..][..hd]);
    let (s0, rest) = scores.split_at_mut(p);
    let (s1, s2) = rest.split_at_mut(p);
    let n = rows.n;
    let mut isums = [[0i32; 3]; SUMS];
    let chunk = (SUMS / nb).min(CHUNK);
    for r0 in (0..n).step_by(chunk) {
        let m = (n - r0).min(chunk);
        let isums = &mut isums[..m * nb];
        dot3_page(qh, &rows.vals[r0 * rows.stride..], rows.stride, m, g, isums);
        let scales = rows.scales[r0 * rows.sstride..].chunks(rows.sstride);
        for (j, (isums, sc)) in isums.chunks_exact(nb).zip(scales).enumerate() {
            let mut s = [0f32; 3];
            for (b, (qs, isum)) in qs.iter().zip(isums).enumerate() {
                let ks = Arm::one(u16_at(sc, b));
                for h in 0..3 {
                    s[h] += (qs[h] * ks) * isum[h] as f32;
                }
            }
            let r = r0 + j;
            (s0[r], s1[r], s2[r]) = (s[0], s[1], s[2]);
        }
    }
    true
}

/// [`Isa::int8_page_values`] for three heads: per group of `g` values, each row's three
/// weights times its scale, then one `asm!` loop over the rows per block of lanes.
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
pub(super) fn values3(acc: &mut [f32], w: &[f32], p: usize, rows: &PageRows<'_>, g: usize) -> bool {
    let d = acc.len() / 3;
    let n = rows.n;
    // Every row's `d` value bytes lie within `rows.vals` (so do the pointers below).
    let fits = n > 0 && rows.vals.len() >= (n - 1) * rows.stride + d;
    if g == 0 || g % V_LANES != 0 || d % g != 0 || !fits || n > p || w.len() < 3 * p {
        return false;
    }
    let acc_ptr = acc.as_mut_ptr();
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        for (k, off) in (0..d).step_by(g).enumerate() {
            // `kernels::scale_weights`'s products.
            let mut ps = [[0f32; 3]; CHUNK];
            let (w0, w1, w2) = (&w[r0..][..m], &w[p + r0..][..m], &w[2 * p + r0..][..m]);
            let scales = rows.scales[r0 * rows.sstride + 2 * k..].chunks(rows.sstride);
            for ((((ps, sc), w0), w1), w2) in ps.iter_mut().zip(scales).zip(w0).zip(w1).zip(w2) {
                let s = Arm::one(u16_at(sc, 0));
                *ps = [w0 * s, w1 * s, w2 * s];
            }
            let first = rows.vals[r0 * rows.stride + off..].as_ptr();
            for at in (0..g).step_by(V_LANES) {
                // `off + at + V_LANES ≤ d` and `acc.len() = 3d`: the three blocks at
                // `off + at`, `d + off + at` and `2d + off + at` lie within `acc`.
                let base = acc_ptr.wrapping_add(off + at);
                let row = first.wrapping_add(at);
                // SAFETY: `base` derives from the whole `acc` slice (borrowed mutably by this
                // function, no other reference to it in use), f32-aligned, and its three blocks
                // lie within it (above); rows `r0..r0 + m` (≤ n) lie `rows.stride` apart from
                // `row`, and each one's bytes `[off + at, off + at + V_LANES)` lie within its
                // `d` bytes, within `rows.vals` (`fits`).
                unsafe { add_rows3(base, d, &ps[..m], row, rows.stride) };
            }
        }
    }
    true
}

/// The ISA's value loop over `ps.len()` rows `stride` bytes apart from `row`: the accumulator
/// blocks at `acc`, `acc + d` and `acc + 2d` (`V_LANES` floats each).
///
/// # Safety
///
/// As the ISA's `add_rows3`.
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
unsafe fn add_rows3(acc: *mut f32, d: usize, ps: &[[f32; 3]], row: *const u8, stride: usize) {
    #[cfg(edgekv_arm_mve)]
    // SAFETY: the caller's contract; the three heads' blocks are `d` floats apart.
    unsafe {
        mve::add_rows3(
            [acc, acc.wrapping_add(d), acc.wrapping_add(2 * d)],
            ps,
            row,
            stride,
        )
    };
    #[cfg(not(edgekv_arm_mve))]
    // SAFETY: the caller's contract.
    unsafe {
        dsp::add_rows3(acc, d, ps, row, stride)
    };
}
