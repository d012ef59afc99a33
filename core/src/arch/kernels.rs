//! Dot products and scaled accumulations straight from page bytes, one function pair per format,
//! with dequantization fused in: a K row's E4M3 tiles are multiplied by their scale as they are
//! decoded (so a K dot product over a quantized row has the bits of the same dot product over the
//! dequantized f32 row), a V row's scale is folded into each head's weight once per group or
//! tile. Int8 K rows (groups ≥ 2) score against the quantized query instead ([`int8_scores`]:
//! exact integer sums per group, see `arch::query`).
//!
//! Every sum runs in eight fixed lanes combined in a fixed order, so compilers can vectorize it
//! without reassociating floats: the bits are the same on every target and at every width.
//!
//! The kernels serve `G` query heads of one KV group at once (`G` rows of `head_dim` side by
//! side): each block of eight elements of a page row is decoded once and used by every head, and
//! the `G` independent lane sets overlap in the pipeline. Each head's arithmetic is exactly what
//! it would be alone.
//!
//! Everything here is `#[inline(always)]` (but the f16 block decoder) so that the attention page
//! loop, built once portably and once for AVX2, takes these kernels along into each build.

#[cfg(test)]
use core::hint::black_box;
use core::marker::PhantomData;

use super::Isa;
#[cfg(any(test, not(feature = "small-code")))]
use super::query::QueryCodes;
pub(crate) use super::rows::Row;
use crate::format::float::{Bf16s, F16s, F32s};
use crate::format::fp8::{E4m3Scaled, E4m3s};
use crate::format::int4::{self, Q4_BLOCK, Q4Codes, Q4Kind};
use crate::format::int8::I8s;
use crate::format::{Decode, ElementFormat, LANES, f32_at, u16_at};
#[cfg(test)]
use crate::numeric::reduce;

/// Running dot products of `G` query heads with one page row, eight lanes per head.
struct Lanes<const G: usize>([[f32; LANES]; G]);

impl<const G: usize> Lanes<G> {
    #[inline(always)]
    fn new() -> Self {
        Lanes([[0.0; LANES]; G])
    }

    /// Adds `q[h·d + off + i] · x[i]` over `i < n` to head `h`'s lanes (`q` holds `G` rows of
    /// `d`); `dec` decodes blocks of eight elements from `B` bytes, and single elements past the
    /// last whole block.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn add<const B: usize>(
        &mut self,
        q: &[f32],
        d: usize,
        off: usize,
        n: usize,
        bytes: &[u8],
        dec: impl Decode<B>,
    ) {
        let blocks = n / LANES;
        let full = blocks * LANES;
        let xf = &bytes[..blocks * B];
        for k in 0..blocks {
            let x = dec.block(xf[k * B..k * B + B].try_into().expect("a block"));
            let at = off + k * LANES;
            for h in 0..G {
                let qb: &[f32; LANES] = q[h * d + at..][..LANES].try_into().expect("a block");
                for l in 0..LANES {
                    self.0[h][l] += qb[l] * x[l];
                }
            }
        }
        for i in full..n {
            let x = dec.one(bytes, i);
            for h in 0..G {
                self.0[h][i - full] += q[h * d + off + i] * x;
            }
        }
    }

    /// [`add`](Self::add) of `small-code` builds: one element at a time, element `i` into lane
    /// `i mod 8` — the lane a block or the tail gives it, in the same order, so the same bits.
    #[cfg(feature = "small-code")]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn add<const B: usize>(
        &mut self,
        q: &[f32],
        d: usize,
        off: usize,
        n: usize,
        bytes: &[u8],
        dec: impl Decode<B>,
    ) {
        for i in 0..n {
            let x = dec.one(bytes, i);
            for h in 0..G {
                self.0[h][i % LANES] += q[h * d + off + i] * x;
            }
        }
    }
}

/// `acc[h·d + off + i] += p[ρ][h] · x[ρ][i]` over `i < n`, for every head and rows `ρ` in
/// order (`acc` holds `G` rows of `d`; row `ρ`'s elements are `bytes[ρ]`), blocks and single
/// elements decoded as in [`Lanes::add`]. Each output element gets row 0's term, then row 1's:
/// what `R` calls with one row each would do, with one load and store of `acc` instead of `R`.
#[cfg(not(feature = "small-code"))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn axpy_with<const G: usize, const B: usize, const R: usize>(
    acc: &mut [f32],
    d: usize,
    off: usize,
    n: usize,
    p: [[f32; G]; R],
    bytes: [&[u8]; R],
    dec: impl Decode<B>,
) {
    let blocks = n / LANES;
    let full = blocks * LANES;
    for k in 0..blocks {
        // The block's accumulators stay in registers across the rows.
        let at = off + k * LANES;
        let mut a = [[0f32; LANES]; G];
        for (h, a) in a.iter_mut().enumerate() {
            *a = acc[h * d + at..][..LANES].try_into().expect("a block");
        }
        for (p, bytes) in p.iter().zip(bytes) {
            let x = dec.block(bytes[k * B..k * B + B].try_into().expect("a block"));
            for (a, p) in a.iter_mut().zip(p) {
                for l in 0..LANES {
                    a[l] += p * x[l];
                }
            }
        }
        for (h, a) in a.iter().enumerate() {
            acc[h * d + at..][..LANES].copy_from_slice(a);
        }
    }
    for i in full..n {
        for (p, bytes) in p.iter().zip(bytes) {
            let x = dec.one(bytes, i);
            for h in 0..G {
                acc[h * d + off + i] += p[h] * x;
            }
        }
    }
}

/// [`axpy_with`] of `small-code` builds: one element at a time, each taking its rows' terms in
/// order, as the blocks do: the same bits.
#[cfg(feature = "small-code")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn axpy_with<const G: usize, const B: usize, const R: usize>(
    acc: &mut [f32],
    d: usize,
    off: usize,
    n: usize,
    p: [[f32; G]; R],
    bytes: [&[u8]; R],
    dec: impl Decode<B>,
) {
    for i in 0..n {
        for (p, bytes) in p.iter().zip(bytes) {
            let x = dec.one(bytes, i);
            for h in 0..G {
                acc[h * d + off + i] += p[h] * x;
            }
        }
    }
}

/// `[q[h] · row; G]` for a head row of `fmt`, `q` holding `G` query rows of `head_dim` side
/// by side (lengths checked by the caller): [`dot_lanes`], each head's lanes summed.
#[cfg(test)]
fn dot<D: Isa, const G: usize>(fmt: ElementFormat, q: &[f32], row: Row<'_>) -> [f32; G] {
    let lanes = black_box(dot_lanes::<D, G>(fmt, q, row));
    core::array::from_fn(|h| reduce(lanes[h]))
}

/// The eight lanes of `q[h] · row` for each of `G` heads, before their fixed-tree sum
/// (`Softmax::reduce8` sums eight rows' lanes at once); `q` holds `G` query rows of `head_dim`
/// side by side (lengths checked by the caller), the row is of `fmt`.
#[inline(always)]
pub(crate) fn dot_lanes<D: Isa, const G: usize>(
    fmt: ElementFormat,
    q: &[f32],
    row: Row<'_>,
) -> [[f32; LANES]; G] {
    let (v, d) = (row.vals, q.len() / G);
    let mut lanes = Lanes::<G>::new();
    match fmt {
        // `enabled()` is a constant: a left-out format's kernel is not built (the planner
        // rejects such configurations, so this arm never runs).
        _ if !fmt.enabled() => {}
        ElementFormat::F32 => lanes.add(q, d, 0, d, v, F32s),
        ElementFormat::F16 => lanes.add(q, d, 0, d, v, F16s::<D>(PhantomData)),
        ElementFormat::Bf16 => lanes.add(q, d, 0, d, v, Bf16s),
        // Int8 keys score from the quantized query (`int8_scores`).
        ElementFormat::Int8 { .. } => {}
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let (codes, rest) = v.split_at(dv);
            let (mut off, mut k) = (0, 0);
            while off + t <= dv {
                let ct = &codes[off..off + t];
                let s = f32_at(rest, k);
                lanes.add(q, d, off, t, ct, E4m3Scaled(s));
                off += t;
                k += 1;
            }
            let tail = &rest[4 * k..];
            if b {
                lanes.add(q, d, dv, d - dv, tail, Bf16s);
            } else {
                lanes.add(q, d, dv, d - dv, tail, F32s);
            }
        }
        // Each block's values dequantized as they are decoded, half by half (low nibbles:
        // values 0–15, high: 16–31).
        ElementFormat::Int4 { kind } => {
            for (k, b) in v.chunks_exact(kind.block_bytes()).enumerate() {
                let (s, m, codes) = int4::block_parts::<D>(kind, b);
                let off = k * Q4_BLOCK;
                lanes.add(q, d, off, 16, codes, int4::dequantizing(kind, false, s, m));
                lanes.add(
                    q,
                    d,
                    off + 16,
                    16,
                    codes,
                    int4::dequantizing(kind, true, s, m),
                );
            }
        }
    }
    lanes.0
}

/// `acc[h·d + i] += p[ρ][h] · rows[ρ][i]` for `R` head rows of `fmt` in order (consecutive
/// tokens of one KV head), `acc` holding `G` output rows of `head_dim` side by side (the
/// online-softmax accumulation; the caller rescales `acc` once per page). The same bits as `R`
/// calls with one row each.
#[inline(always)]
pub(crate) fn add_scaled<D: Isa, const G: usize, const R: usize>(
    fmt: ElementFormat,
    acc: &mut [f32],
    p: [[f32; G]; R],
    rows: [Row<'_>; R],
) {
    let d = acc.len() / G;
    let vals = rows.map(|r| r.vals);
    match fmt {
        _ if !fmt.enabled() => {}
        ElementFormat::F32 => axpy_with(acc, d, 0, d, p, vals, F32s),
        ElementFormat::F16 => axpy_with(acc, d, 0, d, p, vals, F16s::<D>(PhantomData)),
        ElementFormat::Bf16 => axpy_with(acc, d, 0, d, p, vals, Bf16s),
        #[cfg(not(feature = "small-code"))]
        ElementFormat::Int8 { group: 32 } => int8_axpy::<D, G, R>(acc, d, p, rows, 32),
        ElementFormat::Int8 { group } => int8_axpy::<D, G, R>(acc, d, p, rows, group as usize),
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let (mut off, mut k) = (0, 0);
            while off + t <= dv {
                let mut ps = p;
                for (ps, row) in ps.iter_mut().zip(&rows) {
                    let s = f32_at(&row.vals[dv..], k);
                    for x in ps.iter_mut() {
                        *x *= s;
                    }
                }
                let codes = vals.map(|v| &v[off..off + t]);
                axpy_with(acc, d, off, t, ps, codes, E4m3s);
                off += t;
                k += 1;
            }
            let tails = vals.map(|v| &v[dv + 4 * k..]);
            if b {
                axpy_with(acc, d, dv, d - dv, p, tails, Bf16s);
            } else {
                axpy_with(acc, d, dv, d - dv, p, tails, F32s);
            }
        }
        ElementFormat::Int4 { kind: Q4Kind::Q4_0 } => int4_axpy::<D, G, R, false>(acc, d, p, rows),
        ElementFormat::Int4 { kind: Q4Kind::Q4_1 } => int4_axpy::<D, G, R, true>(acc, d, p, rows),
    }
}

/// The int4 arm of [`add_scaled`] (`MIN`: Q4_1 blocks, else Q4_0), block by block: each row's
/// weights times the block scale `d` (`s = p · d`) and, for Q4_1, times its minimum
/// (`t = p · m`); then each output element takes, row by row in order, `s · (q − 8)` (Q4_0) or
/// `s · q + t` (Q4_1), eight lanes at a time with the accumulators in registers across the rows.
#[inline(always)]
fn int4_axpy<D: Isa, const G: usize, const R: usize, const MIN: bool>(
    acc: &mut [f32],
    d: usize,
    p: [[f32; G]; R],
    rows: [Row<'_>; R],
) {
    let kind = if MIN { Q4Kind::Q4_1 } else { Q4Kind::Q4_0 };
    let bb = kind.block_bytes();
    for k in 0..d / Q4_BLOCK {
        let (mut s, mut t) = ([[0f32; G]; R], [[0f32; G]; R]);
        let mut codes: [&[u8]; R] = [&[]; R];
        for (r, row) in rows.iter().enumerate() {
            let (dk, m, c) = int4::block_parts::<D>(kind, &row.vals[k * bb..(k + 1) * bb]);
            for h in 0..G {
                s[r][h] = p[r][h] * dk;
                t[r][h] = p[r][h] * m;
            }
            codes[r] = c;
        }
        for (half, shift) in [(0, 0), (1, 4)] {
            let dec = Q4Codes {
                shift,
                bias: if MIN { 0 } else { 8 },
                d: 1.0,
                m: 0.0,
                scaled: false,
            };
            for b in 0..2 {
                let at = k * Q4_BLOCK + half * 16 + b * LANES;
                let mut a = [[0f32; LANES]; G];
                for (h, a) in a.iter_mut().enumerate() {
                    *a = acc[h * d + at..][..LANES].try_into().expect("a block");
                }
                for r in 0..R {
                    let x = dec.block(codes[r][b * LANES..][..LANES].try_into().expect("a block"));
                    for (h, a) in a.iter_mut().enumerate() {
                        for l in 0..LANES {
                            a[l] += if MIN {
                                s[r][h] * x[l] + t[r][h]
                            } else {
                                s[r][h] * x[l]
                            };
                        }
                    }
                }
                for (h, a) in a.iter().enumerate() {
                    acc[h * d + at..][..LANES].copy_from_slice(a);
                }
            }
        }
    }
}

/// The scores of up to eight int8 K rows (group `g`) for `G` query heads from their quantized
/// query (`q`: `G` heads' codes and scales, see `arch::query`): `[h][j]` is
/// `Σ_b (qs[h][b] · ks_j[b]) · Σ_{i ∈ b} qc[h][i] · kc_j[i]`, the groups in order from 0.0. The
/// integer sums are exact (any order, any width gives these bits); ISA builds must keep the
/// float steps as written.
#[cfg(any(test, not(feature = "small-code")))]
#[inline(always)]
pub(crate) fn int8_scores<D: Isa, const G: usize>(
    q: QueryCodes<'_>,
    rows: &[Row<'_>],
    g: usize,
) -> [[f32; LANES]; G] {
    let hd = q.codes.len() / G;
    let nb = hd / g;
    let mut out = [[0f32; LANES]; G];
    for (j, row) in rows.iter().enumerate().take(LANES) {
        for b in 0..nb {
            let ks = D::one(u16_at(row.scales, b));
            let kc = &row.vals[b * g..][..g];
            for (h, out) in out.iter_mut().enumerate() {
                let isum = int_dot(&q.codes[h * hd + b * g..][..g], kc);
                out[j] += (q.scales[h * nb + b] * ks) * isum;
            }
        }
    }
    out
}

/// `Σ q[i] · (k[i] as i8)`, exact, as the nearest f32 (sums of up to 256 products fit an `i32`:
/// 256 · 32767 · 128 < 2³¹; longer groups add such sums in an `i64`).
#[inline(always)]
pub(crate) fn int_dot(q: &[i16], k: &[u8]) -> f32 {
    if q.len() <= 256 {
        int_dot_part(q, k) as f32
    } else {
        let parts = q.chunks(256).zip(k.chunks(256));
        parts.map(|(q, k)| int_dot_part(q, k) as i64).sum::<i64>() as f32
    }
}

/// [`int_dot`] of at most 256 products (no overflow).
#[inline(always)]
fn int_dot_part(q: &[i16], k: &[u8]) -> i32 {
    q.iter()
        .zip(k)
        .map(|(&q, &k)| q as i32 * k as i8 as i32)
        .sum()
}

/// `ps[ρ][h] = p[ρ][h] · s_ρ` for each int8 V row `ρ` (as many as all three hold), `s_ρ` the
/// row's scale of group `k`, one rounding each: the factors every int8 value kernel multiplies the
/// row's codes by.
#[cfg(any(test, not(feature = "small-code")))]
#[inline(always)]
pub(crate) fn scale_weights<D: Isa, const G: usize>(
    ps: &mut [[f32; G]],
    p: &[[f32; G]],
    rows: &[Row<'_>],
    k: usize,
) {
    for ((ps, p), row) in ps.iter_mut().zip(p).zip(rows) {
        let s = D::one(u16_at(row.scales, k));
        for (x, p) in ps.iter_mut().zip(p) {
            *x = p * s;
        }
    }
}

/// [`add_scaled`] for `int8` rows of group `g`, up to eight of them (`p.len()` and `rows.len()`,
/// equal, counted at run time: one rolled loop over the rows keeps this kernel small in code
/// while each block's accumulators stay in registers across all of them). The same bits as
/// [`add_scaled`] over the same rows.
#[cfg(any(test, not(feature = "small-code")))]
#[inline(always)]
pub(crate) fn int8_add_scaled_rows<D: Isa, const G: usize>(
    acc: &mut [f32],
    p: &[[f32; G]],
    rows: &[Row<'_>],
    g: usize,
) {
    const MAX: usize = 8;
    let d = acc.len() / G;
    let m = p.len().min(rows.len()).min(MAX);
    let (p, rows) = (&p[..m], &rows[..m]);
    let (blocks, full) = (g / LANES, g / LANES * LANES);
    let (mut off, mut k) = (0, 0);
    while off + g <= d {
        let mut ps = [[0f32; G]; MAX];
        scale_weights::<D, G>(&mut ps, p, rows, k);
        let ps = &ps[..m];
        for b in 0..blocks {
            let at = off + b * LANES;
            let mut a = [[0f32; LANES]; G];
            for (h, a) in a.iter_mut().enumerate() {
                *a = acc[h * d + at..][..LANES].try_into().expect("a block");
            }
            for (ps, row) in ps.iter().zip(rows) {
                let x = I8s.block(row.vals[at..at + LANES].try_into().expect("a block"));
                for (a, p) in a.iter_mut().zip(ps) {
                    for l in 0..LANES {
                        a[l] += p * x[l];
                    }
                }
            }
            for (h, a) in a.iter().enumerate() {
                acc[h * d + at..][..LANES].copy_from_slice(a);
            }
        }
        for i in off + full..off + g {
            for (ps, row) in ps.iter().zip(rows) {
                let x = I8s.one(row.vals, i);
                for (h, p) in ps.iter().enumerate() {
                    acc[h * d + i] += p * x;
                }
            }
        }
        off += g;
        k += 1;
    }
}

/// The int8 arm of [`add_scaled`]: each row's group scale folded into its weights.
#[inline(always)]
fn int8_axpy<D: Isa, const G: usize, const R: usize>(
    acc: &mut [f32],
    d: usize,
    p: [[f32; G]; R],
    rows: [Row<'_>; R],
    g: usize,
) {
    let (mut off, mut k) = (0, 0);
    while off + g <= d {
        let mut ps = p;
        for (ps, row) in ps.iter_mut().zip(&rows) {
            let s = D::one(u16_at(row.scales, k));
            for x in ps.iter_mut() {
                *x *= s;
            }
        }
        let codes = rows.map(|r| &r.vals[off..off + g]);
        axpy_with(acc, d, off, g, ps, codes, I8s);
        off += g;
        k += 1;
    }
}

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
