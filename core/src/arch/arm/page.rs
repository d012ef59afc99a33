//! Whole pages of int8 rows for three query heads per KV head (SmolLM2's group, and many
//! models'): the Cortex-M page kernels behind `Strategy::int8_pages`. A page's rows
//! lie a fixed stride apart, so each row is one pointer step, the query's slices and scales are
//! taken once per page, and the value accumulators stay in registers across all of the page's
//! rows (up to [`CHUNK`] at a time) instead of eight. Each score and each output element takes its
//! terms in the portable kernels' order: the same bits. (Helium's page kernels: `mve_runs.rs`.)

#[cfg(not(edgekv_arm_mve))]
use super::Arm;
#[cfg(edgekv_arm_dsp)]
use super::dsp;
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
use super::dsp_g32;
#[cfg(not(edgekv_arm_mve))]
use crate::numeric::Widen;
#[cfg(not(edgekv_arm_mve))]
use core::mem::MaybeUninit;

use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
#[cfg(not(edgekv_arm_mve))]
use crate::format::u16_at;

/// Groups per head row the score kernel takes (SmolLM2: two of 32).
#[cfg(not(edgekv_arm_mve))]
const MAX_GROUPS: usize = 8;

/// Integer sums the score kernel keeps between its two passes: the DSP loop stores each row's
/// groups' three sums in turn (`[r·groups + b][h]`: [`CHUNK`] rows of up to four groups, fewer
/// rows of more).
#[cfg(not(edgekv_arm_mve))]
const SUMS: usize = 64 * 3;

/// Rows whose weights the value kernel scales, and whose scores the score kernel takes, at a
/// time (a page of SmolLM2's cache: 16).
const CHUNK: usize = 16;

/// Lanes of one step of the value kernel: four (whose twelve accumulators fill half the FPU's
/// registers).
#[cfg(not(edgekv_arm_mve))]
const V_LANES: usize = 4;

/// Codes per step of the DSP score loop.
#[cfg(not(edgekv_arm_mve))]
const SCORE_STEP: usize = 8;

/// What the ISAs' page score loops read (at these offsets): the three query rows' starts, steps
/// per group, bytes from a key row's end to the next row's start, groups per row, rows, and the
/// bytes from the sums' pointer after a row's last group back to the next row's first.
#[repr(C)]
pub(super) struct Dot3Page {
    q: [*const i16; 3],
    steps: usize,
    advance: usize,
    groups: usize,
    pub(super) rows: usize,
    back: usize,
}

// The byte offsets the `asm!` loop reads `Dot3Page`'s fields at (`dsp::dot3_page`: `LDM` of
// the three query pointers, then `#12`…`#28`).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Dot3Page, q) == 0);
    assert!(offset_of!(Dot3Page, steps) == 12);
    assert!(offset_of!(Dot3Page, advance) == 16);
    assert!(offset_of!(Dot3Page, groups) == 20);
    assert!(offset_of!(Dot3Page, rows) == 24);
    assert!(offset_of!(Dot3Page, back) == 28);
};

/// The integer dot products of three query heads' codes with every group of `g` codes of `n`
/// rows `stride` bytes apart from `k`'s start, into `out` as [`SUMS`] lays them out (`groups`
/// groups a row), in the ISA's loop nest. `false`, nothing written, unless every length fits
/// (and [`dot3_takes`] `g`).
#[inline(always)]
#[must_use]
fn dot3_page(
    q: [&[i16]; 3],
    k: &[u8],
    stride: usize,
    n: usize,
    g: usize,
    groups: usize,
    out: &mut [i32],
) -> bool {
    let row = groups * g;
    let need = 3 * n * groups;
    let fits = n > 0
        && n <= CHUNK
        && groups > 0
        && out.len() >= need
        && stride >= row
        && dot3_takes(g, q[0])
        && q.iter()
            .all(|q| q.len() >= row && q.as_ptr().align_offset(4) == 0)
        && k.len() >= (n - 1) * stride + row;
    if !fits {
        return false;
    }
    let p = Dot3Page {
        q: q.map(<[i16]>::as_ptr),
        steps: g / SCORE_STEP,
        advance: stride - row,
        groups,
        rows: n,
        back: groups * 3 * CHUNK * 4 - 4,
    };
    // SAFETY: checked above: every count ≥ 1 (`g ≥ SCORE_STEP`), each query row aligned and
    // `groups · g` codes long, the `n ≤ CHUNK` key rows `stride` apart within `k`, `out` holds
    // the sums as this ISA lays them out.
    #[cfg(not(edgekv_arm_mve))]
    unsafe {
        dsp::dot3_page(&p, k.as_ptr(), out.as_mut_ptr().cast())
    };
    true
}

/// Whether [`dot3_page`] takes groups of `g` codes (exact in `i32` up to 256, whole steps of
/// [`SCORE_STEP`]) and this query (the DSP loop reads its codes two words at a time, aligned).
#[inline(always)]
fn dot3_takes(g: usize, q: &[i16]) -> bool {
    g != 0 && g % SCORE_STEP == 0 && g <= 256 && q.as_ptr().align_offset(4) == 0
}

/// `PageKernels::int8_page_scores` for three heads: the integer sums of up to [`CHUNK`] rows and all
/// their groups in one `asm!` loop nest, then each row's score from its groups in order.
/// ([`SUMS`] ≥ 3 · [`MAX_GROUPS`], so every chunk holds a row.)
#[cfg(not(edgekv_arm_mve))]
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
    // Every row's `hd` codes and `hd / g` scales within the view (so every chunk below fits
    // `dot3_page` as the first does).
    if rows.row_bytes < hd || rows.scale_bytes < 2 * (hd / g) {
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
    // Heads of 64 codes in two groups of 32 (SmolLM2's, and many models'): one `asm!` loop
    // from the codes to the scores.
    // (The view holds every row's 64 codes and two scales: checked above.)
    let fits = g == 32 && nb == 2 && rows.stride >= 64;
    if fits {
        let out = [&mut *s0, &mut *s1, &mut *s2].map(|s| s.as_mut_ptr());
        // SAFETY: each query row is 64 codes, 4-byte aligned (`dot3_takes`); rows `0..n` lie
        // `stride ≥ 64` bytes apart within `rows.vals`, each with its two scales within
        // `rows.scales` (the view's row sizes, checked above); each head's `n ≤ p` scores lie within its `p` floats.
        unsafe {
            dsp_g32::page_scores3_g32(
                qh.map(<[i16]>::as_ptr),
                &[qs[0], qs[1]],
                rows.vals.as_ptr(),
                rows.stride,
                rows.scales.as_ptr(),
                rows.sstride,
                out,
                n,
            )
        };
        return true;
    }
    let mut isums = [[0i32; 3]; SUMS / 3];
    let chunk = (SUMS / 3 / nb).min(CHUNK);
    for r0 in (0..n).step_by(chunk) {
        let m = (n - r0).min(chunk);
        let isums = &mut isums[..m * nb];
        // Only the first chunk can be refused (the checks above hold for all): nothing written.
        if !dot3_page(
            qh,
            &rows.vals[r0 * rows.stride..],
            rows.stride,
            m,
            g,
            nb,
            isums.as_flattened_mut(),
        ) {
            return false;
        }
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

/// `PageKernels::int8_page_values` for three heads: per group of `g` values, each row's three
/// weights times its scale, then one `asm!` loop over the rows per block of lanes.
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
pub(super) fn values3(acc: &mut [f32], w: &[f32], p: usize, rows: &PageRows<'_>, g: usize) -> bool {
    let d = acc.len() / 3;
    let n = rows.n;
    if g == 0 || g % V_LANES != 0 || d % g != 0 || n > p || w.len() < 3 * p {
        return false;
    }
    // Every row's `d` value bytes and f16 scale of every group lie within the view (so do the
    // pointers below).
    if rows.row_bytes < d || rows.scale_bytes < 2 * (d / g) {
        return false;
    }
    let acc_ptr = acc.as_mut_ptr();
    // `kernels::scale_weights`'s products, each chunk's and group's in turn (rows of two groups
    // take both groups' at once: `pb` the second's); each written before it is read, so not
    // cleared first.
    #[cfg(not(edgekv_arm_mve))]
    let (mut pa, mut pb) = (
        [MaybeUninit::<[f32; PS]>::uninit(); CHUNK],
        [MaybeUninit::<[f32; PS]>::uninit(); CHUNK],
    );
    #[cfg(not(edgekv_arm_mve))]
    let two = d / g == 2;
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        // Every call below: `pa` and `pb` hold `m ≤ CHUNK` rows; the weights
        // `w[h·p + r0..][..m]` lie within `w` (`r0 + m ≤ n ≤ p`, `w.len() ≥ 3p`); row `r0 + j`'s
        // scale of group `k < d / g` lies at `(r0 + j)·sstride + 2k`, within `rows.scales`
        // (checked above).
        #[cfg(not(edgekv_arm_mve))]
        let wr = [0, p, 2 * p].map(|h| w[h + r0..].as_ptr());
        #[cfg(not(edgekv_arm_mve))]
        if two {
            let sc = rows.scales[r0 * rows.sstride..].as_ptr();
            // SAFETY: as above, for groups 0 and 1.
            unsafe {
                dsp::weights3x2(
                    pa.as_mut_ptr().cast(),
                    pb.as_mut_ptr().cast(),
                    wr,
                    sc,
                    rows.sstride,
                    m,
                )
            };
        }
        for (k, off) in (0..d).step_by(g).enumerate() {
            #[cfg(not(edgekv_arm_mve))]
            let ps = if !two {
                let sc = rows.scales[r0 * rows.sstride + 2 * k..].as_ptr();
                // SAFETY: as above, for group `k`.
                unsafe { dsp::weights3(pa.as_mut_ptr().cast(), wr, sc, rows.sstride, m) };
                pa.as_ptr()
            } else if k == 0 {
                pa.as_ptr()
            } else {
                pb.as_ptr()
            }
            .cast::<[f32; PS]>();
            let first = rows.vals[r0 * rows.stride + off..].as_ptr();
            #[cfg(not(edgekv_arm_mve))]
            for at in (0..g).step_by(V_LANES) {
                // `off + at + V_LANES ≤ d` and `acc.len() = 3d`: the three blocks at
                // `off + at`, `d + off + at` and `2d + off + at` lie within `acc`.
                let base = acc_ptr.wrapping_add(off + at);
                let row = first.wrapping_add(at);
                // SAFETY: `base` derives from the whole `acc` slice (borrowed mutably by this
                // function, no other reference to it in use), f32-aligned, and its three blocks
                // lie within it (above); rows `r0..r0 + m` (≤ n) lie `rows.stride` apart from
                // `row`, and each one's bytes `[off + at, off + at + V_LANES)` lie within its
                // `d` bytes, within `rows.vals` (`fits`); `ps` holds the `m` rows' products,
                // written above.
                unsafe { add_rows3(base, d, ps, m, row, rows.stride) };
            }
        }
    }
    true
}

/// Floats per row of the value kernel's weights × scales.
#[cfg(not(edgekv_arm_mve))]
const PS: usize = 3;

/// The DSP value loop over `ps.len()` rows `stride` bytes apart from `row`: the accumulator
/// blocks at `acc`, `acc + d` and `acc + 2d` (`V_LANES` floats each).
///
/// # Safety
///
/// As `dsp::add_rows3`.
#[cfg(all(edgekv_arm_f16cvt, not(edgekv_arm_mve)))]
#[inline(always)]
unsafe fn add_rows3(
    acc: *mut f32,
    d: usize,
    ps: *const [f32; PS],
    n: usize,
    row: *const u8,
    stride: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { dsp::add_rows3(acc, d, ps, n, row, stride) };
}
