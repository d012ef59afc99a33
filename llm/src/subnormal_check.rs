//! The f32 loops around the matmuls on inputs at and around f32's subnormal range (feature
//! `matmul-check`): a digest the boards' `matmul-check` firmware prints and the host recomputes,
//! so that a board whose compiler put a loop on flushing vector floats is seen. Above `matmul`
//! and `ops` (it runs them), beside `arch::check` (whose buffers and generator it shares).

use crate::arch::check::*;
use crate::gguf::{QK_K, TensorType};
use crate::quant::{ActivationType, q8_0, sums_len};

/// [`subnormal_digest`] as the host computes it (x86-64 with AVX2 and without, the portable
/// build): a board must print the same.
pub const SUBNORMAL_DIGEST: u32 = 0x995a_3a8a;

/// A value with a random sign and mantissa and a magnitude in [2^lo, 2^(hi + 1)), put together
/// as bits (subnormal below 2^-126), so that no float operation forms it.
fn tiny(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    let bits = rng.next();
    let e = lo + (bits % (hi - lo + 1) as u64) as i32;
    let mant = (bits >> 16) as u32 & 0x007f_ffff;
    let sign = ((bits >> 40) as u32 & 1) << 31;
    let magnitude = if e >= -126 {
        ((e + 127) as u32) << 23 | mant
    } else {
        (0x0080_0000 | mant) >> ((-126 - e) as u32).min(31)
    };
    f32::from_bits(sign | magnitude)
}

/// Activation row `t` of [`subnormal_digest`]: all subnormal, all in 2^-126 … 2^-90, or mixed
/// (subnormals, tiny normals, ±0 and plain values), by `t mod 3`.
fn tiny_row(rng: &mut Rng, t: usize, x: &mut [f32]) {
    for (i, v) in x.iter_mut().enumerate() {
        *v = match (t % 3, i % 4) {
            (0, _) | (2, 0) => tiny(rng, -160, -127),
            (1, _) | (2, 1) => tiny(rng, -126, -90),
            (2, 2) => f32::from_bits((rng.next() as u32) & 0x8000_0000),
            _ => rng.unit() * 4.0,
        };
    }
}

/// FNV-1a over the bits of `v`, into `h`.
fn fnv(h: &mut u32, v: &[f32]) {
    for x in v {
        for b in x.to_bits().to_le_bytes() {
            *h = (*h ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
}

/// A digest (FNV-1a over the result bits) of the f32 loops around the matmuls on inputs at and
/// around f32's subnormal range, which a board must give with the host's bits: the activation
/// quantizers ([`quantize_activation`](crate::matmul::quantize_activation) for Q8_0, Q8_1 and
/// Q8_K), every weight type's matmul over quantized activations (its kernel where the build has
/// one) and over f32 activations ([`matmul_f32`](crate::matmul::matmul_f32), random and extreme
/// scales), [`edgekv::exp_in_place`] at its range ends, and [`embed_q8_0`](crate::ops::embed_q8_0)
/// with extreme scales. The boards' `matmul-check` firmware prints it; the host recomputes it.
pub fn subnormal_digest(work: &mut Work) -> u32 {
    subnormal_parts(work, &mut |_, _| {})
}

/// [`subnormal_digest`], passing `report` each part's name and the digest after it (to find
/// a part that differs).
pub fn subnormal_parts(work: &mut Work, report: &mut dyn FnMut(&'static str, u32)) -> u32 {
    use crate::matmul::{Matrix, matmul_f32, matmul_quant, quantize_activation};
    let mut h = 0x811c_9dc5u32;
    let mut rng = Rng(0x5eed_7135);
    let (rows, n) = (4, 3);
    for (ty, name) in TYPES.iter().copied().chain([(TensorType::F32, "f32")]) {
        let cols = match ActivationType::for_weights(ty) {
            Some(ActivationType::Q8_K) => QK_K,
            _ => 96,
        };
        let Some(row_bytes) = ty.row_bytes(cols) else {
            continue;
        };
        for t in 0..n {
            tiny_row(&mut rng, t, &mut work.x[t * cols..][..cols]);
        }
        for case in [Case::Random, Case::ExtremeScales] {
            let w = &mut work.w[..rows * row_bytes];
            if ty == TensorType::F32 {
                for (i, b) in w.chunks_exact_mut(4).enumerate() {
                    let v = match i % 3 {
                        0 => tiny(&mut rng, -149, -127),
                        1 => tiny(&mut rng, -126, -60),
                        _ => rng.unit(),
                    };
                    b.copy_from_slice(&v.to_le_bytes());
                }
            } else {
                weights(&mut rng, ty, case, w, cols);
            }
            let m = Matrix {
                data: &work.w[..rows * row_bytes],
                ty,
                cols,
                rows,
                row_bytes,
            };
            let got = &mut work.got[..n * rows];
            matmul_f32(&m, &work.x[..n * cols], n, got);
            fnv(&mut h, got);
            report(name, h);
            let Some(act) = ActivationType::for_weights(ty) else {
                continue;
            };
            let (blocks, sums) = (cols / act.block_values(), sums_len(cols));
            for t in 0..n {
                quantize_activation(
                    act,
                    &work.x[t * cols..][..cols],
                    &mut work.qs[t * cols..][..cols],
                    &mut work.d[t * blocks..][..blocks],
                    &mut work.s[t * sums..][..sums],
                );
            }
            fnv(&mut h, &work.d[..n * blocks]);
            fnv(&mut h, &work.s[..n * sums]);
            let codes: &[u8] = bytemuck::cast_slice(&work.qs[..n * cols]);
            for c in codes.chunks_exact(4) {
                fnv(
                    &mut h,
                    &[f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))],
                );
            }
            let (qs, d, s) = (
                &work.qs[..n * cols],
                &work.d[..n * blocks],
                &work.s[..n * sums],
            );
            matmul_quant(&m, qs, d, s, n, &mut work.got[..n * rows]);
            fnv(&mut h, &work.got[..n * rows]);
            report("matmul_quant", h);
        }
    }
    // exp: its lanes' range ends (|x| up to 87.3), the libm ranges beyond, subnormals and zeros.
    let x = &mut work.x[..512];
    for (i, v) in x.iter_mut().enumerate() {
        let edge = [
            0x42ae_ac50u32,
            0x3eb1_7218,
            0x3f85_1592,
            0x3900_0000,
            0x42b1_7218,
        ][i % 5];
        *v = match i % 8 {
            0..=3 => f32::from_bits((edge - 32 + (i / 8 % 64) as u32) | (i as u32 & 1) << 31),
            4 => tiny(&mut rng, -149, -100),
            5 => f32::from_bits((i as u32 & 1) << 31),
            _ => (rng.unit() - 0.5) * 180.0,
        };
    }
    edgekv::exp_in_place(x);
    fnv(&mut h, x);
    report("exp_in_place", h);
    // The embedding rows with extreme scales.
    let (cols, row_bytes) = (96, 3 * q8_0::BYTES);
    weights(
        &mut rng,
        TensorType::Q8_0,
        Case::ExtremeScales,
        &mut work.w[..2 * row_bytes],
        cols,
    );
    let m = Matrix {
        data: &work.w[..2 * row_bytes],
        ty: TensorType::Q8_0,
        cols,
        rows: 2,
        row_bytes,
    };
    for t in 0..2 {
        crate::ops::embed_q8_0(&m, t, &mut work.x[..cols]);
        fnv(&mut h, &work.x[..cols]);
    }
    report("embed_q8_0", h);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed digest of the f32 loops on subnormal inputs (see [`SUBNORMAL_DIGEST`]).
    #[test]
    fn subnormal_digest_is_the_committed_one() {
        let mut work = Box::new(Work::new());
        let got = subnormal_parts(&mut work, &mut |part, h| println!("{part} {h:08x}"));
        assert_eq!(got, SUBNORMAL_DIGEST, "{got:08x}");
    }
}
