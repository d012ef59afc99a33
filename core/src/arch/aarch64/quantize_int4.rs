//! ggml's Q4_0 and Q4_1 blocks (`format::int4`) with NEON, a block of 32 f32 values in eight
//! vectors: the floor of tiny inputs (`quant_input`'s integer steps), then
//! - Q4_0: `max|x|` by `UMAX` on the magnitudes' bits, and the first value of that magnitude
//!   (the reference keeps the first, sign and all) by `UMINV` over its lane indices;
//! - Q4_1: the minimum and maximum by `FMINV` / `FMAXV`;
//!
//! the reference encoder's scalar scale math, and the codes `min(15, trunc(x · id + 8.5))`
//! (Q4_0) or `min(15, trunc((x − min) · id + 0.5))` (Q4_1) by `FMUL`, `FSUB` and `FADD` (never
//! fused, as in the reference) and `FCVTZU`, which truncates and saturates as Rust's `as u8`
//! does at these magnitudes (negative and NaN to 0, large to 15 after the `UMIN`); two codes a
//! byte by one `TBL` and a shift.
//!
//! Blocks holding an infinity or a NaN, and Q4_1 blocks whose minimum is a zero (the reference
//! keeps the first zero's sign, which `FMINV` does not), take the reference encoder.

use core::arch::aarch64::{
    float32x4_t, uint32x4_t, vaddq_f32, vaddq_u32, vandq_u32, vbslq_u32, vceqq_u32, vcltq_u32,
    vcvtq_u32_f32, vdupq_n_f32, vdupq_n_u32, vld1q_u32, vmaxq_f32, vmaxq_u32, vmaxvq_f32,
    vmaxvq_u32, vminq_f32, vminq_u32, vminvq_f32, vminvq_u32, vmulq_f32, vorrq_u8,
    vreinterpretq_f32_u32, vreinterpretq_u32_f32, vshlq_n_u8, vst1q_u8, vsubq_f32,
};

use half::f16;

use super::quantize_lanes::low_bytes_u32;
use crate::format::int4::{Q4_BLOCK, Q4Kind, encode_block, inverse};
use crate::numeric::floor::{QUANT_FLOOR, quant_input};

/// Vectors of four f32 lanes in a block.
const V: usize = Q4_BLOCK / 4;

/// Encodes whole blocks `x` into `out` like the reference (`kind.bytes_for(x.len())` bytes, the
/// caller's check): each block by [`block`], or by the reference encoder where it declines.
pub(super) fn quantize_blocks(kind: Q4Kind, x: &[f32], out: &mut [u8]) {
    for (b, o) in x
        .chunks_exact(Q4_BLOCK)
        .zip(out.chunks_exact_mut(kind.block_bytes()))
    {
        let Some(b) = b.first_chunk::<Q4_BLOCK>() else {
            continue;
        };
        if !block(kind, b, o) {
            encode_block(kind, b, o);
        }
    }
}

/// One block of `kind` into `out` (`kind.block_bytes()` bytes): `false`, nothing written, for a
/// block the module doc sends to the reference encoder.
#[inline(always)]
fn block(kind: Q4Kind, x: &[f32; Q4_BLOCK], out: &mut [u8]) -> bool {
    let p = x.as_ptr().cast::<u32>();
    // SAFETY: the eight loads read the 128 bytes of `x`; the rest is register-only.
    let (bits, amax) = unsafe {
        let bits: [uint32x4_t; V] = core::array::from_fn(|k| vld1q_u32(p.add(4 * k)));
        let abs = vdupq_n_u32(0x7FFF_FFFF);
        let m = bits.map(|b| vandq_u32(b, abs));
        let m = [
            vmaxq_u32(m[0], m[1]),
            vmaxq_u32(m[2], m[3]),
            vmaxq_u32(m[4], m[5]),
            vmaxq_u32(m[6], m[7]),
        ];
        (
            bits,
            vmaxvq_u32(vmaxq_u32(vmaxq_u32(m[0], m[1]), vmaxq_u32(m[2], m[3]))),
        )
    };
    if amax >= f32::INFINITY.to_bits() {
        return false;
    }
    let floored = floor(bits);
    match kind {
        Q4Kind::Q4_0 => {
            let Some(out) = out.first_chunk_mut::<18>() else {
                return false;
            };
            let a = if amax < QUANT_FLOOR.to_bits() {
                0
            } else {
                amax
            };
            let max = quant_input(x[first_of_magnitude(floored, a)]);
            let d = max / -8.0;
            let id = inverse(d);
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            // SAFETY: register-only.
            let (zero, bias) = unsafe { (vdupq_n_f32(0.0), vdupq_n_f32(8.5)) };
            pack(floored, zero, id, bias, &mut out[2..]);
        }
        Q4Kind::Q4_1 => {
            let Some(out) = out.first_chunk_mut::<20>() else {
                return false;
            };
            let (min, max) = min_max(floored);
            if min == 0.0 {
                return false;
            }
            let d = (max - min) / 15.0;
            let id = inverse(d);
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            out[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
            // SAFETY: register-only.
            let (minv, bias) = unsafe { (vdupq_n_f32(min), vdupq_n_f32(0.5)) };
            pack(floored, minv, id, bias, &mut out[4..]);
        }
    }
    true
}

/// The block with magnitudes below [`QUANT_FLOOR`] read as zeros of their sign
/// ([`quant_input`]'s integer steps, lane by lane).
#[inline(always)]
fn floor(bits: [uint32x4_t; V]) -> [float32x4_t; V] {
    // SAFETY: register-only.
    unsafe {
        let (abs, sign, fl) = (
            vdupq_n_u32(0x7FFF_FFFF),
            vdupq_n_u32(0x8000_0000),
            vdupq_n_u32(QUANT_FLOOR.to_bits()),
        );
        bits.map(|b| {
            let small = vcltq_u32(vandq_u32(b, abs), fl);
            vreinterpretq_f32_u32(vbslq_u32(small, vandq_u32(b, sign), b))
        })
    }
}

/// The index of the block's first value whose magnitude's bits are `a` (one is).
#[inline(always)]
fn first_of_magnitude(x: [float32x4_t; V], a: u32) -> usize {
    const LANE: [u32; 4] = [0, 1, 2, 3];
    // SAFETY: the load reads the 16 bytes of `LANE`; the rest is register-only.
    let j = unsafe {
        let (abs, want, none, lane) = (
            vdupq_n_u32(0x7FFF_FFFF),
            vdupq_n_u32(a),
            vdupq_n_u32(Q4_BLOCK as u32),
            vld1q_u32(LANE.as_ptr()),
        );
        let mut first = none;
        for (k, &v) in x.iter().enumerate() {
            let hit = vceqq_u32(vandq_u32(vreinterpretq_u32_f32(v), abs), want);
            let at = vaddq_u32(lane, vdupq_n_u32(4 * k as u32));
            first = vminq_u32(first, vbslq_u32(hit, at, none));
        }
        vminvq_u32(first)
    };
    (j as usize).min(Q4_BLOCK - 1)
}

/// The block's least and greatest values (finite).
#[inline(always)]
fn min_max(x: [float32x4_t; V]) -> (f32, f32) {
    // SAFETY: register-only.
    unsafe {
        let lo = [
            vminq_f32(x[0], x[1]),
            vminq_f32(x[2], x[3]),
            vminq_f32(x[4], x[5]),
            vminq_f32(x[6], x[7]),
        ];
        let hi = [
            vmaxq_f32(x[0], x[1]),
            vmaxq_f32(x[2], x[3]),
            vmaxq_f32(x[4], x[5]),
            vmaxq_f32(x[6], x[7]),
        ];
        (
            vminvq_f32(vminq_f32(vminq_f32(lo[0], lo[1]), vminq_f32(lo[2], lo[3]))),
            vmaxvq_f32(vmaxq_f32(vmaxq_f32(hi[0], hi[1]), vmaxq_f32(hi[2], hi[3]))),
        )
    }
}

/// The codes `min(15, trunc((x − sub) · id + bias))`, value `j` in the low nibble of byte `j`
/// and value `j + 16` in its high nibble, into the 16 bytes of `out`. (Q4_0 passes `sub` 0:
/// `x − 0` is `x` exactly, zeros' signs aside, which the product's truncation does not see.)
#[inline(always)]
fn pack(x: [float32x4_t; V], sub: float32x4_t, id: f32, bias: float32x4_t, out: &mut [u8]) {
    let Some(out) = out.first_chunk_mut::<16>() else {
        return;
    };
    // SAFETY: the store writes the 16 bytes of `out`; the rest is register-only.
    unsafe {
        let (idv, top) = (vdupq_n_f32(id), vdupq_n_u32(15));
        let c: [uint32x4_t; V] = x.map(|v| {
            let q = vaddq_f32(vmulq_f32(vsubq_f32(v, sub), idv), bias);
            vminq_u32(vcvtq_u32_f32(q), top)
        });
        let lo = low_bytes_u32([c[0], c[1], c[2], c[3]]);
        let hi = low_bytes_u32([c[4], c[5], c[6], c[7]]);
        vst1q_u8(out.as_mut_ptr(), vorrq_u8(lo, vshlq_n_u8::<4>(hi)));
    }
}
