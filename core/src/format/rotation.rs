//! Rotation of head rows before they are stored: an orthonormal Walsh–Hadamard transform,
//! optionally after a fixed sign flip per element, which spreads an outlier over the whole row
//! so that block quantizers (4-bit above all) lose less of it.
//!
//! `H` is the `head_dim × head_dim` Sylvester–Hadamard matrix scaled by `1 / √head_dim`
//! (symmetric and orthonormal), `S` a fixed diagonal of ±1 (`sign`: bits of π's fraction). A rotated row is stored
//! as `H · S · x`; reading it back applies `S · H`. For K the attention rotates each query row
//! the same way (`(HSq) · (HSk) = q · k`), for V it rotates each output row back
//! (`Σ p · HSv = HS · Σ p · v`). The transform is a fixed sequence of f32 additions and
//! subtractions (the butterflies, `log2(head_dim)` rounds) and one multiplication per element, so
//! every target computes the same bits; for `head_dim` an even power of two (16, 64, 256) the
//! scale `1 / √head_dim` is a power of two and exact.

use super::{Element, ElementFormat, QuantKernels, decode_rows, encode_rows};
use crate::error::{ConfigError, Result};
use crate::numeric::floor::state;

/// The largest head_dim a rotation accepts (rows are rotated in a stack buffer of this many f32).
pub const MAX_ROTATED_DIM: usize = 256;

/// How the rows of one half (K or V) are rotated before they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Rotation {
    /// Stored as written.
    #[default]
    None,
    /// The orthonormal Walsh–Hadamard transform `H · x`.
    Hadamard,
    /// `H · S · x`: a fixed ±1 sign per element first (bit `i mod 64` of π's fraction,
    /// `0x243F_6A88_85A3_08D3`, set → −1), then `H`.
    SignedHadamard,
}

impl Rotation {
    /// Whether rows are transformed at all.
    pub const fn is_some(self) -> bool {
        !matches!(self, Rotation::None)
    }

    /// Checks that `head_dim` can be rotated: a power of two from 2 to [`MAX_ROTATED_DIM`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidFormat`] otherwise; [`ConfigError::FormatDisabled`] for a rotation
    /// in a build without the `rotation` feature.
    pub const fn check(self, head_dim: usize) -> Result<(), ConfigError> {
        if self.is_some() && !cfg!(feature = "rotation") {
            return Err(ConfigError::FormatDisabled);
        }
        if self.is_some()
            && (head_dim < 2 || !head_dim.is_power_of_two() || head_dim > MAX_ROTATED_DIM)
        {
            return Err(ConfigError::InvalidFormat);
        }
        Ok(())
    }

    /// `x ← H · S · x` (or `H · x`), in place: what the cache does to each head row before it
    /// stores it, and what a device that reads rotated K pages itself must do to its queries.
    /// `x.len()` must pass [`Rotation::check`] (other lengths are left unchanged).
    pub fn forward(self, x: &mut [f32]) {
        if !fits(x) {
            return;
        }
        match self {
            Rotation::None => {}
            Rotation::Hadamard => hadamard(x),
            Rotation::SignedHadamard => {
                flip_signs(x);
                hadamard(x);
            }
        }
    }

    /// `x ← S · H · x` (or `H · x`): the inverse of [`forward`](Self::forward), in place (what a
    /// device that accumulates rotated V rows itself must do to its output). Lengths as
    /// [`forward`](Self::forward).
    pub fn inverse(self, x: &mut [f32]) {
        if !fits(x) {
            return;
        }
        match self {
            Rotation::None => {}
            Rotation::Hadamard => hadamard(x),
            Rotation::SignedHadamard => {
                hadamard(x);
                flip_signs(x);
            }
        }
    }
}

/// Whether `x` has a length the transform takes (and this build has it).
fn fits(x: &[f32]) -> bool {
    cfg!(feature = "rotation")
        && x.len() >= 2
        && x.len().is_power_of_two()
        && x.len() <= MAX_ROTATED_DIM
}

/// [`encode_rows`] (with `K`'s kernels) with each head row rotated by `rot` first (through f32); lengths from the
/// plan, `head_dim` checked by [`Rotation::check`] when the configuration planned.
pub(crate) fn encode_rotated<K: QuantKernels, T: Element>(
    fmt: ElementFormat,
    rot: Rotation,
    head_dim: usize,
    src: &[T],
    vals: &mut [u8],
    scales: &mut [u8],
) -> Result<()> {
    if !cfg!(feature = "rotation") || !rot.is_some() || src.is_empty() || head_dim > MAX_ROTATED_DIM
    {
        return encode_rows::<K, T>(fmt, head_dim, src, vals, scales);
    }
    let heads = src.len() / head_dim;
    let (hb, sb) = (vals.len() / heads, scales.len() / heads);
    let mut buf = [0f32; MAX_ROTATED_DIM];
    let buf = &mut buf[..head_dim];
    for (i, row) in src.chunks_exact(head_dim).enumerate() {
        for (b, x) in buf.iter_mut().zip(row) {
            *b = x.to_f32();
        }
        rot.forward(buf);
        let (v, s) = (&mut vals[i * hb..][..hb], &mut scales[i * sb..][..sb]);
        encode_rows::<K, f32>(fmt, head_dim, &*buf, v, s)?;
    }
    Ok(())
}

/// [`decode_rows`] with each head row rotated back by `rot` (through f32), as
/// [`encode_rotated`].
pub(crate) fn decode_rotated<T: Element>(
    fmt: ElementFormat,
    rot: Rotation,
    head_dim: usize,
    vals: &[u8],
    scales: &[u8],
    dst: &mut [T],
) -> Result<()> {
    if !cfg!(feature = "rotation") || !rot.is_some() || dst.is_empty() || head_dim > MAX_ROTATED_DIM
    {
        return decode_rows(fmt, head_dim, vals, scales, dst);
    }
    let heads = dst.len() / head_dim;
    let (hb, sb) = (vals.len() / heads, scales.len() / heads);
    let mut buf = [0f32; MAX_ROTATED_DIM];
    let buf = &mut buf[..head_dim];
    for (i, row) in dst.chunks_exact_mut(head_dim).enumerate() {
        decode_rows(
            fmt,
            head_dim,
            &vals[i * hb..][..hb],
            &scales[i * sb..][..sb],
            buf,
        )?;
        rot.inverse(buf);
        for (o, b) in row.iter_mut().zip(buf.iter()) {
            *o = T::from_f32(*b);
        }
    }
    Ok(())
}

/// The fixed sign of element `i`: bit `i mod 64` of a constant (the first 64 bits of the
/// fractional part of π), 1 → −1.
#[inline]
const fn sign(i: usize) -> f32 {
    const BITS: u64 = 0x243F_6A88_85A3_08D3;
    if (BITS >> (i % 64)) & 1 == 1 {
        -1.0
    } else {
        1.0
    }
}

fn flip_signs(x: &mut [f32]) {
    for (i, v) in x.iter_mut().enumerate() {
        if sign(i) < 0.0 {
            *v = -*v;
        }
    }
}

/// The orthonormal Walsh–Hadamard transform of `x` (a power-of-two length), in place: butterfly
/// rounds of span 1, 2, 4, …, then one multiplication by `1 / √n`.
///
/// Every input, butterfly result and product below 2^-125 in magnitude is a zero of its sign
/// (`floor::state`): no operand or result is subnormal, so vector floats that flush subnormals
/// (Helium's) give the scalar FPU's and the host's bits.
fn hadamard(x: &mut [f32]) {
    let n = x.len();
    for v in x.iter_mut() {
        *v = state(*v);
    }
    let mut h = 1;
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (a, b) in a.iter_mut().zip(b) {
                let (u, v) = (*a, *b);
                *a = state(u + v);
                *b = state(u - v);
            }
        }
        h *= 2;
    }
    let s = 1.0 / libm::sqrtf(n as f32);
    for v in x.iter_mut() {
        *v = state(*v * s);
    }
}

#[cfg(all(test, feature = "rotation"))]
mod tests {
    use super::*;

    #[test]
    fn rotations_are_orthonormal_and_invert() {
        let x: [f32; 64] = core::array::from_fn(|i| ((i * 37 % 23) as f32 - 11.0) * 0.25);
        let norm = |v: &[f32]| v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>();
        for r in [Rotation::Hadamard, Rotation::SignedHadamard] {
            let mut y = x;
            r.forward(&mut y);
            assert_ne!(y, x);
            assert!((norm(&y) - norm(&x)).abs() < 1e-9 * norm(&x), "{r:?}");
            r.inverse(&mut y);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() < 1e-5, "{r:?}: {a} vs {b}");
            }
        }
        let mut y = x;
        Rotation::None.forward(&mut y);
        assert_eq!(y, x);
    }

    #[test]
    fn hadamard_of_a_unit_vector_is_flat() {
        // H · e_0 is the all-(1/8) row at head_dim 64 (exact: the scale is a power of two).
        let mut e = [0f32; 64];
        e[0] = 1.0;
        Rotation::Hadamard.forward(&mut e);
        assert!(e.iter().all(|&v| v == 0.125));
        // An outlier spreads: its share of the row's largest magnitude drops by √64.
        let mut x = [0.01f32; 64];
        x[5] = 8.0;
        Rotation::SignedHadamard.forward(&mut x);
        assert!(x.iter().all(|v| v.abs() < 1.1));
    }

    #[test]
    fn only_power_of_two_dims_up_to_the_buffer_rotate() {
        for (d, ok) in [
            (64, true),
            (2, true),
            (256, true),
            (48, false),
            (512, false),
            (1, false),
        ] {
            assert_eq!(Rotation::Hadamard.check(d).is_ok(), ok, "{d}");
            assert!(Rotation::None.check(d).is_ok());
        }
    }
}
