//! Dot products and scaled accumulations straight from page bytes, one function pair per format,
//! with dequantization fused in (int8: `scale · Σ q·code` per group; fp8: per tile).
//!
//! Every sum runs in eight fixed lanes combined in a fixed order, so compilers can vectorize it
//! without reassociating floats: the bits are the same on every target and at every width.
//!
//! The kernels serve `G` query heads of one KV group at once: each block of eight elements of a
//! page row is decoded once and used by every head, and the `G` independent lane sets overlap in
//! the pipeline. Each head's arithmetic is exactly what it would be alone.

use core::hint::black_box;

use crate::format::ElementFormat;

const LANES: usize = 8;

/// Sums eight lanes in a fixed tree.
#[inline(always)]
fn reduce(a: [f32; LANES]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

// The kernels walk whole blocks of eight elements (`B` bytes each) as fixed-size arrays, so the
// decoders index arrays by constants: no per-element bounds checks, and loops vectorize.
// Elements past the last whole block (a `head_dim`, group or tail not a multiple of eight) go one
// at a time into lanes 0.., exactly as a block would.

/// `[Σ q[h][off + i] · x[i]; G]` over `i < n`, each head in its own eight lanes; `block` decodes
/// eight elements from `B` bytes, `one` decodes element `i` (past the last whole block).
#[inline(always)]
fn dot_with<const G: usize, const B: usize>(
    q: &[&[f32]; G],
    off: usize,
    n: usize,
    bytes: &[u8],
    block: impl Fn(&[u8; B]) -> [f32; LANES],
    one: impl Fn(usize) -> f32,
) -> [f32; G] {
    let blocks = n / LANES;
    let full = blocks * LANES;
    let mut acc = [[0f32; LANES]; G];
    let xf = &bytes[..blocks * B];
    for k in 0..blocks {
        let x = block(xf[k * B..k * B + B].try_into().expect("a block"));
        let at = off + k * LANES;
        for h in 0..G {
            let qb: &[f32; LANES] = q[h][at..at + LANES].try_into().expect("a block");
            for l in 0..LANES {
                acc[h][l] += qb[l] * x[l];
            }
        }
    }
    for i in full..n {
        let x = one(i);
        for h in 0..G {
            acc[h][i - full] += q[h][off + i] * x;
        }
    }
    // The barrier keeps LLVM's SLP vectorizer from permuting the lanes inside the loop to suit
    // the reduction tree (it would shuffle every block); it changes no value.
    let acc = black_box(acc);
    let mut out = [0f32; G];
    for h in 0..G {
        out[h] = reduce(acc[h]);
    }
    out
}

/// `acc[h][off + i] += p[h] · x[i]` over `i < n` for every head, blocks and single elements
/// decoded as in [`dot_with`].
#[inline(always)]
fn axpy_with<const G: usize, const B: usize>(
    acc: &mut [&mut [f32]; G],
    off: usize,
    n: usize,
    p: [f32; G],
    bytes: &[u8],
    block: impl Fn(&[u8; B]) -> [f32; LANES],
    one: impl Fn(usize) -> f32,
) {
    let blocks = n / LANES;
    let full = blocks * LANES;
    let xf = &bytes[..blocks * B];
    for k in 0..blocks {
        let x = block(xf[k * B..k * B + B].try_into().expect("a block"));
        let at = off + k * LANES;
        for h in 0..G {
            let ab: &mut [f32; LANES] = (&mut acc[h][at..at + LANES]).try_into().expect("a block");
            for l in 0..LANES {
                ab[l] += p[h] * x[l];
            }
        }
    }
    for i in full..n {
        let x = one(i);
        for h in 0..G {
            acc[h][off + i] += p[h] * x;
        }
    }
}

#[inline(always)]
fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

#[inline(always)]
fn f32_block(b: &[u8; 4 * LANES]) -> [f32; LANES] {
    core::array::from_fn(|l| {
        f32::from_le_bytes([b[4 * l], b[4 * l + 1], b[4 * l + 2], b[4 * l + 3]])
    })
}

/// Out of line: inlined into the large attention loops, LLVM leaves this scalar (one branchy
/// conversion per element); alone it vectorizes.
#[inline(never)]
fn f16_block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
    core::array::from_fn(|l| f16_to_f32(u16::from_le_bytes([b[2 * l], b[2 * l + 1]])))
}

#[inline(always)]
fn bf16_block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
    core::array::from_fn(|l| bf16_to_f32(u16::from_le_bytes([b[2 * l], b[2 * l + 1]])))
}

#[inline(always)]
fn i8_block(b: &[u8; LANES]) -> [f32; LANES] {
    core::array::from_fn(|l| b[l] as i8 as f32)
}

#[inline(always)]
fn e4m3_block(b: &[u8; LANES]) -> [f32; LANES] {
    core::array::from_fn(|l| E4M3[b[l] as usize])
}

/// IEEE binary16 to f32, bit-identical to `half::f16::to_f32` (NaNs made quiet) but branch-free
/// and without `half`'s per-call CPU feature check, so it inlines and vectorizes. Integer ops
/// and one exact subtraction; no subnormal f32 is ever formed.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let em = (h & 0x7FFF) << 13; // exponent and mantissa in f32 position
    let exp = em & 0x0F80_0000;
    let normal = em + (112 << 23); // rebias 15 → 127
    // Subnormal or zero: 2^-14 · (1 + m) − 2^-14 = 2^-14 · m, exact.
    let sub = (f32::from_bits(em + (113 << 23)) - f32::from_bits(113 << 23)).to_bits();
    // Infinity or NaN (quiet bit set, as `half` does).
    let special = em | 0x7F80_0000 | ((((em & 0x007F_FFFF) != 0) as u32) << 22);
    // Selected with masks, not `if`s: branches here would keep LLVM from vectorizing.
    let is_sub = ((exp == 0) as u32).wrapping_neg();
    let is_special = ((exp == 0x0F80_0000) as u32).wrapping_neg();
    let mag = (sub & is_sub) | (special & is_special) | (normal & !(is_sub | is_special));
    f32::from_bits(mag | (h & 0x8000) << 16)
}

/// bfloat16 to f32, bit-identical to `half::bf16::to_f32` (NaNs made quiet), branch-free.
#[inline(always)]
fn bf16_to_f32(b: u16) -> f32 {
    let nan = ((b & 0x7FFF) > 0x7F80) as u32;
    f32::from_bits(((b as u32) << 16) | nan << 22)
}

/// E4M3 codes decoded once, at compile time (shift the 7 magnitude bits into an f32's exponent
/// and mantissa, rescale by 2^120; 0x7F is NaN).
static E4M3: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut c = 0;
    while c < 256 {
        let mag = f32::from_bits(((c & 0x7F) as u32) << 20) * f32::from_bits((127 + 120) << 23);
        let mag = if c & 0x7F == 0x7F { f32::NAN } else { mag };
        t[c] = f32::from_bits(mag.to_bits() | (((c & 0x80) as u32) << 24));
        c += 1;
    }
    t
};

/// One head row of one token in a page: its value bytes and (int8) its scale bytes.
#[derive(Clone, Copy)]
pub(crate) struct Row<'p> {
    pub vals: &'p [u8],
    pub scales: &'p [u8],
}

/// `[q[h] · row; G]` for a head row of `fmt` (every `q[h].len()` = head_dim; lengths checked by
/// the caller).
#[inline]
pub(crate) fn dot<const G: usize>(fmt: ElementFormat, q: [&[f32]; G], row: Row<'_>) -> [f32; G] {
    let (v, d) = (row.vals, q[0].len());
    match fmt {
        // `enabled()` is a constant: a left-out format's kernel is not built (the planner
        // rejects such configurations, so this arm never runs).
        _ if !fmt.enabled() => [0.0; G],
        ElementFormat::F32 => dot_with(&q, 0, d, v, f32_block, |i| f32_at(v, i)),
        ElementFormat::F16 => dot_with(&q, 0, d, v, f16_block, |i| f16_to_f32(u16_at(v, i))),
        ElementFormat::Bf16 => dot_with(&q, 0, d, v, bf16_block, |i| bf16_to_f32(u16_at(v, i))),
        ElementFormat::Int8 { group } => {
            let g = group as usize;
            let mut sum = [0f32; G];
            for (k, codes) in v[..d].chunks_exact(g).enumerate() {
                let s = f16_to_f32(u16_at(row.scales, k));
                let x = dot_with(&q, k * g, g, codes, i8_block, |i| codes[i] as i8 as f32);
                for h in 0..G {
                    sum[h] += s * x[h];
                }
            }
            sum
        }
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let (codes, rest) = v.split_at(dv);
            let mut sum = [0f32; G];
            for (k, ct) in codes.chunks_exact(t).enumerate() {
                let s = f32_at(rest, k);
                let x = dot_with(&q, k * t, t, ct, e4m3_block, |i| E4M3[ct[i] as usize]);
                for h in 0..G {
                    sum[h] += s * x[h];
                }
            }
            let tail = &rest[4 * (dv / t)..];
            let x = if b {
                dot_with(&q, dv, d - dv, tail, bf16_block, |i| {
                    bf16_to_f32(u16_at(tail, i))
                })
            } else {
                dot_with(&q, dv, d - dv, tail, f32_block, |i| f32_at(tail, i))
            };
            for h in 0..G {
                sum[h] += x[h];
            }
            sum
        }
    }
}

/// `acc[h][i] += p[h] · row[i]` for a head row of `fmt` (the online-softmax accumulation; the
/// caller rescales `acc` once per page). Every `acc[h].len()` = head_dim.
#[inline]
pub(crate) fn add_scaled<const G: usize>(
    fmt: ElementFormat,
    acc: &mut [&mut [f32]; G],
    p: [f32; G],
    row: Row<'_>,
) {
    let (v, d) = (row.vals, acc[0].len());
    match fmt {
        _ if !fmt.enabled() => {}
        ElementFormat::F32 => axpy_with(acc, 0, d, p, v, f32_block, |i| f32_at(v, i)),
        ElementFormat::F16 => axpy_with(acc, 0, d, p, v, f16_block, |i| f16_to_f32(u16_at(v, i))),
        ElementFormat::Bf16 => {
            axpy_with(acc, 0, d, p, v, bf16_block, |i| bf16_to_f32(u16_at(v, i)))
        }
        ElementFormat::Int8 { group } => {
            let g = group as usize;
            for (k, codes) in v[..d].chunks_exact(g).enumerate() {
                let s = f16_to_f32(u16_at(row.scales, k));
                let mut ps = p;
                for x in &mut ps {
                    *x *= s;
                }
                axpy_with(acc, k * g, g, ps, codes, i8_block, |i| {
                    codes[i] as i8 as f32
                });
            }
        }
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let (codes, rest) = v.split_at(dv);
            for (k, ct) in codes.chunks_exact(t).enumerate() {
                let s = f32_at(rest, k);
                let mut ps = p;
                for x in &mut ps {
                    *x *= s;
                }
                axpy_with(acc, k * t, t, ps, ct, e4m3_block, |i| E4M3[ct[i] as usize]);
            }
            let tail = &rest[4 * (dv / t)..];
            if b {
                axpy_with(acc, dv, d - dv, p, tail, bf16_block, |i| {
                    bf16_to_f32(u16_at(tail, i))
                });
            } else {
                axpy_with(acc, dv, d - dv, p, tail, f32_block, |i| f32_at(tail, i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{decode_rows, encode_rows};
    use std::vec::Vec;

    #[test]
    fn e4m3_table_matches_the_quantizer() {
        for c in 0..=255u8 {
            let want = crate::quant::e4m3_to_f32(c);
            assert_eq!(E4M3[c as usize].to_bits(), want.to_bits(), "code {c:#x}");
        }
    }

    #[test]
    fn f16_and_bf16_decoders_match_half_on_every_code() {
        // Every code; under Miri a stride that still crosses every exponent.
        for c in (0..=u16::MAX).step_by(if cfg!(miri) { 61 } else { 1 }) {
            let want = half::f16::from_bits(c).to_f32().to_bits();
            assert_eq!(f16_to_f32(c).to_bits(), want, "f16 {c:#06x}");
            let want = half::bf16::from_bits(c).to_f32().to_bits();
            assert_eq!(bf16_to_f32(c).to_bits(), want, "bf16 {c:#06x}");
        }
    }

    /// Fused kernels agree with dequantize-then-f32 to rounding, for every format.
    #[test]
    fn fused_kernels_match_dequantized_rows() {
        let d = 64;
        let x: Vec<f32> = (0..d)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173)
            .collect();
        let q: Vec<f32> = (0..d)
            .map(|i| ((i * 11 % 17) as f32 - 8.0) * 0.05)
            .collect();
        let fmts = [
            ElementFormat::F32,
            ElementFormat::F16,
            ElementFormat::Bf16,
            ElementFormat::Q8_0,
            ElementFormat::Int8 { group: 64 },
            ElementFormat::Fp8Tile {
                dv: 48,
                tile: 16,
                bf16: false,
            },
            ElementFormat::Fp8Tile {
                dv: 32,
                tile: 32,
                bf16: true,
            },
        ];
        for fmt in fmts {
            let mut vals = vec![0u8; fmt.row_bytes(1, d).unwrap()];
            let mut scales = vec![0u8; fmt.scale_row_bytes(1, d).unwrap()];
            // Scales as u16 words need 2-byte alignment: copy through a u16 buffer.
            let mut scale_words = vec![0u16; scales.len() / 2];
            encode_rows(
                fmt,
                d,
                &x,
                &mut vals,
                bytemuck::cast_slice_mut(&mut scale_words),
            )
            .unwrap();
            scales.copy_from_slice(bytemuck::cast_slice(&scale_words));
            let mut deq = vec![0f32; d];
            decode_rows(fmt, d, &vals, bytemuck::cast_slice(&scale_words), &mut deq).unwrap();
            let row = Row {
                vals: &vals,
                scales: &scales,
            };
            let want: f64 = q.iter().zip(&deq).map(|(a, b)| *a as f64 * *b as f64).sum();
            let got = dot(fmt, [&q[..]], row)[0] as f64;
            assert!(
                (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                "{fmt:?}: {got} vs {want}"
            );
            let mut acc: Vec<f32> = (0..d).map(|i| i as f32).collect();
            add_scaled(fmt, &mut [&mut acc[..]], [2.0], row);
            for i in 0..d {
                let want = i as f32 + 2.0 * deq[i];
                assert!(
                    (acc[i] - want).abs() < 1e-5 * (1.0 + want.abs()),
                    "{fmt:?} [{i}]"
                );
            }
        }
    }

    /// Several heads at once give each head's single-head bits, for every format and for head
    /// dims with and without a partial block.
    #[test]
    fn heads_together_equal_heads_alone() {
        let cases: [(usize, &[ElementFormat]); 2] = [
            (
                64,
                &[
                    ElementFormat::F32,
                    ElementFormat::F16,
                    ElementFormat::Bf16,
                    ElementFormat::Q8_0,
                    ElementFormat::Fp8Tile {
                        dv: 48,
                        tile: 16,
                        bf16: false,
                    },
                ],
            ),
            (
                36,
                &[
                    ElementFormat::F32,
                    ElementFormat::Int8 { group: 12 },
                    ElementFormat::Fp8Tile {
                        dv: 20,
                        tile: 4,
                        bf16: true,
                    },
                ],
            ),
        ];
        for (d, fmts) in cases {
            let x: Vec<f32> = (0..d)
                .map(|i| ((i * 29 % 31) as f32 - 15.0) * 0.21)
                .collect();
            let q: Vec<f32> = (0..3 * d)
                .map(|i| ((i * 13 % 19) as f32 - 9.0) * 0.07)
                .collect();
            for &fmt in fmts {
                let mut vals = vec![0u8; fmt.row_bytes(1, d).unwrap()];
                let mut scale_words = vec![0u16; fmt.scale_row_bytes(1, d).unwrap() / 2];
                encode_rows(
                    fmt,
                    d,
                    &x,
                    &mut vals,
                    bytemuck::cast_slice_mut(&mut scale_words),
                )
                .unwrap();
                let row = Row {
                    vals: &vals,
                    scales: bytemuck::cast_slice(&scale_words),
                };
                let qs: [&[f32]; 3] = [&q[..d], &q[d..2 * d], &q[2 * d..]];
                let together = dot(fmt, qs, row);
                let mut acc3: Vec<f32> = (0..3 * d).map(|i| i as f32 * 0.1).collect();
                let mut alone_acc = acc3.clone();
                let p = [0.3, 1.7, -0.9];
                {
                    let (a, rest) = acc3.split_at_mut(d);
                    let (b, c) = rest.split_at_mut(d);
                    add_scaled(fmt, &mut [a, b, c], p, row);
                }
                for h in 0..3 {
                    let alone = dot(fmt, [qs[h]], row)[0];
                    assert_eq!(together[h].to_bits(), alone.to_bits(), "{fmt:?} dot {h}");
                    let a = &mut alone_acc[h * d..(h + 1) * d];
                    add_scaled(fmt, &mut [a], [p[h]], row);
                }
                let same = acc3
                    .iter()
                    .zip(&alone_acc)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{fmt:?} add_scaled");
            }
        }
    }
}
