//! What the NEON quantizers (`quantize_int8`, `quantize_fp8`) share: rows read sixteen values
//! at a time (f32 as is, f16 widened by `FCVTL`, exact), the `max|x|` key with the portable
//! [`Load::amax_key`]'s value, and sixteen i32 lanes narrowed to their low bytes with one `TBL`.
//!
//! The callers take groups (tiles) whose length is a multiple of 16 ([`W`]); memory is only
//! touched through references of the exact size read or written.

use core::arch::aarch64::{
    float32x4_t, uint8x16_t, uint8x16x4_t, vandq_u16, vandq_u32, vdupq_n_u16, vdupq_n_u32,
    vld1q_f32, vld1q_u8, vld1q_u16, vld1q_u32, vmaxq_u16, vmaxq_u32, vmaxvq_u16, vmaxvq_u32,
    vqtbl4q_u8, vreinterpretq_u8_u32,
};

use half::f16;

use super::isa::widen8;
use crate::format::load::{F16Bits, Load, ViaElement};

/// Values per step of the kernels: a group or tile is taken when its length is a multiple.
pub(super) const W: usize = 16;

/// A row element type the NEON quantizers read sixteen at a time.
pub(super) trait Lanes: Copy {
    /// The portable loader of the same type: its keys, scale math and slow paths.
    type L: Load<R = Self>;

    /// Sixteen values widened to f32, exactly.
    fn load16(x: &[Self; W]) -> [float32x4_t; 4];

    /// The key of `max|x|`, equal to the portable [`Load::amax_key`] (NaN above inf), for
    /// `x.len()` a multiple of [`W`] (values past the last whole 16 are left out).
    fn amax_key(x: &[Self]) -> <Self::L as Load>::K;
}

impl Lanes for f32 {
    type L = ViaElement<f32>;

    #[inline(always)]
    fn load16(x: &[f32; W]) -> [float32x4_t; 4] {
        let p = x.as_ptr();
        // SAFETY: the four loads read the 64 bytes of `x`.
        unsafe {
            [
                vld1q_f32(p),
                vld1q_f32(p.add(4)),
                vld1q_f32(p.add(8)),
                vld1q_f32(p.add(12)),
            ]
        }
    }

    /// The largest of the bits of `|x|` (`UMAX`, then `UMAXV`): the bits of the element with
    /// the largest key (NaNs' bits lie above inf's), so its key is the maximum key.
    #[inline(always)]
    fn amax_key(x: &[f32]) -> i32 {
        // SAFETY: each load reads one whole chunk of 16 f32 (64 bytes); the rest is
        // register-only.
        let bits = unsafe {
            let abs = vdupq_n_u32(0x7FFF_FFFF);
            let mut acc = [vdupq_n_u32(0); 4];
            for c in x.chunks_exact(W) {
                let p = c.as_ptr().cast::<u32>();
                for (k, a) in acc.iter_mut().enumerate() {
                    *a = vmaxq_u32(*a, vandq_u32(vld1q_u32(p.add(4 * k)), abs));
                }
            }
            let m = vmaxq_u32(vmaxq_u32(acc[0], acc[1]), vmaxq_u32(acc[2], acc[3]));
            vmaxvq_u32(m)
        };
        Self::L::key(f32::from_bits(bits))
    }
}

impl Lanes for f16 {
    type L = F16Bits;

    #[inline(always)]
    fn load16(x: &[f16; W]) -> [float32x4_t; 4] {
        let p = x.as_ptr().cast::<u16>();
        // SAFETY: the two loads read the 32 bytes of `x`; `FCVTL` is exact.
        let (a, b) = unsafe { (widen8(vld1q_u16(p)), widen8(vld1q_u16(p.add(8)))) };
        [a[0], a[1], b[0], b[1]]
    }

    /// The largest 15-bit magnitude (`UMAX`, then `UMAXV`): the bits of the element with the
    /// largest key.
    #[inline(always)]
    fn amax_key(x: &[f16]) -> i16 {
        // SAFETY: each load reads one whole chunk of 16 f16 (32 bytes); the rest is
        // register-only.
        let bits = unsafe {
            let abs = vdupq_n_u16(0x7FFF);
            let (mut a, mut b) = (vdupq_n_u16(0), vdupq_n_u16(0));
            for c in x.chunks_exact(W) {
                let p = c.as_ptr().cast::<u16>();
                a = vmaxq_u16(a, vandq_u16(vld1q_u16(p), abs));
                b = vmaxq_u16(b, vandq_u16(vld1q_u16(p.add(8)), abs));
            }
            vmaxvq_u16(vmaxq_u16(a, b))
        };
        Self::L::key(f16::from_bits(bits))
    }
}

/// The low bytes of sixteen i32 lanes (four vectors in order), in order: one `TBL` over the
/// four registers (a two's-complement code's low byte is the code).
#[inline(always)]
pub(super) fn low_bytes(v: [uint8x16_t; 4]) -> uint8x16_t {
    const PICK: [u8; 16] = [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60];
    // SAFETY: the load reads the 16 bytes of `PICK`; `TBL` is register-only.
    unsafe {
        vqtbl4q_u8(
            uint8x16x4_t(v[0], v[1], v[2], v[3]),
            vld1q_u8(PICK.as_ptr()),
        )
    }
}

/// [`low_bytes`] of u32 lanes.
#[inline(always)]
pub(super) fn low_bytes_u32(v: [core::arch::aarch64::uint32x4_t; 4]) -> uint8x16_t {
    // SAFETY: register-only reinterpretations.
    low_bytes(v.map(|x| unsafe { vreinterpretq_u8_u32(x) }))
}
