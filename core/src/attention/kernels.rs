//! Dot products and scaled accumulations straight from page bytes, one function pair per format,
//! with dequantization fused in (int8: `scale · Σ q·code` per group; fp8: per tile).
//!
//! Every sum runs in eight fixed lanes combined in a fixed order, so compilers can vectorize it
//! without reassociating floats: the bits are the same on every target and at every width.

use half::{bf16, f16};

use crate::format::ElementFormat;

const LANES: usize = 8;

/// Sums eight lanes in a fixed tree.
#[inline(always)]
fn reduce(a: [f32; LANES]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// `Σ q[i] · x(i)` over `q.len()` elements in eight lanes; `x` decodes element `i`.
#[inline(always)]
fn dot_with(q: &[f32], x: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let full = q.len() / LANES * LANES;
    for base in (0..full).step_by(LANES) {
        for l in 0..LANES {
            acc[l] += q[base + l] * x(base + l);
        }
    }
    for (i, &qi) in q.iter().enumerate().skip(full) {
        acc[i - full] += qi * x(i);
    }
    reduce(acc)
}

#[inline(always)]
fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
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

/// `q · row` for a head row of `fmt` (`q.len()` = head_dim; lengths checked by the caller).
#[inline]
pub(crate) fn dot(fmt: ElementFormat, q: &[f32], row: Row<'_>) -> f32 {
    let v = row.vals;
    match fmt {
        ElementFormat::F32 => dot_with(q, |i| f32_at(v, i)),
        ElementFormat::F16 => dot_with(q, |i| f16::from_bits(u16_at(v, i)).to_f32()),
        ElementFormat::Bf16 => dot_with(q, |i| bf16::from_bits(u16_at(v, i)).to_f32()),
        ElementFormat::Int8 { group } => {
            let g = group as usize;
            let mut sum = 0f32;
            for (k, qg) in q.chunks_exact(g).enumerate() {
                let codes = &v[k * g..];
                let s = f16::from_bits(u16_at(row.scales, k)).to_f32();
                sum += s * dot_with(qg, |i| codes[i] as i8 as f32);
            }
            sum
        }
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let scales = &v[dv..];
            let mut sum = 0f32;
            for (k, qt) in q[..dv].chunks_exact(t).enumerate() {
                let codes = &v[k * t..];
                sum += f32_at(scales, k) * dot_with(qt, |i| E4M3[codes[i] as usize]);
            }
            let tail = &v[dv + 4 * (dv / t)..];
            let qt = &q[dv..];
            sum + if b {
                dot_with(qt, |i| bf16::from_bits(u16_at(tail, i)).to_f32())
            } else {
                dot_with(qt, |i| f32_at(tail, i))
            }
        }
    }
}

/// `acc[i] = acc[i] · keep + p · row[i]` for a head row of `fmt` (the online-softmax update).
#[inline]
pub(crate) fn scale_add(fmt: ElementFormat, acc: &mut [f32], keep: f32, p: f32, row: Row<'_>) {
    let v = row.vals;
    match fmt {
        ElementFormat::F32 => axpy(acc, keep, p, |i| f32_at(v, i)),
        ElementFormat::F16 => axpy(acc, keep, p, |i| f16::from_bits(u16_at(v, i)).to_f32()),
        ElementFormat::Bf16 => axpy(acc, keep, p, |i| bf16::from_bits(u16_at(v, i)).to_f32()),
        ElementFormat::Int8 { group } => {
            let g = group as usize;
            for (k, ag) in acc.chunks_exact_mut(g).enumerate() {
                let codes = &v[k * g..];
                let ps = p * f16::from_bits(u16_at(row.scales, k)).to_f32();
                axpy(ag, keep, ps, |i| codes[i] as i8 as f32);
            }
        }
        ElementFormat::Fp8Tile { dv, tile, bf16: b } => {
            let (dv, t) = (dv as usize, tile as usize);
            let scales = &v[dv..];
            let (head, tail_acc) = acc.split_at_mut(dv);
            for (k, at) in head.chunks_exact_mut(t).enumerate() {
                let codes = &v[k * t..];
                let ps = p * f32_at(scales, k);
                axpy(at, keep, ps, |i| E4M3[codes[i] as usize]);
            }
            let tail = &v[dv + 4 * (dv / t)..];
            if b {
                axpy(tail_acc, keep, p, |i| {
                    bf16::from_bits(u16_at(tail, i)).to_f32()
                });
            } else {
                axpy(tail_acc, keep, p, |i| f32_at(tail, i));
            }
        }
    }
}

#[inline(always)]
fn axpy(acc: &mut [f32], keep: f32, p: f32, x: impl Fn(usize) -> f32) {
    for (i, a) in acc.iter_mut().enumerate() {
        *a = *a * keep + p * x(i);
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
            let got = dot(fmt, &q, row) as f64;
            assert!(
                (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                "{fmt:?}: {got} vs {want}"
            );
            let mut acc: Vec<f32> = (0..d).map(|i| i as f32).collect();
            scale_add(fmt, &mut acc, 0.5, 2.0, row);
            for i in 0..d {
                let want = i as f32 * 0.5 + 2.0 * deq[i];
                assert!(
                    (acc[i] - want).abs() < 1e-5 * (1.0 + want.abs()),
                    "{fmt:?} [{i}]"
                );
            }
        }
    }
}
