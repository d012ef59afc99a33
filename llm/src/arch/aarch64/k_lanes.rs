//! What the K-quant kernels (Q4_K, Q6_K × Q8_K) share: the portable dot products' eight
//! integer lanes and their f32 state in the portable order.
//!
//! The portable K-quant dot products sum, per super-block, eight i32 lanes `aux32[l]` over the
//! values `k ≡ l (mod 8)` and add each lane to its own f32 sum (`quant/k_lanes.rs`), so a kernel
//! must not add products of two lanes. `SMULL` / `SMLAL` of eight bytes keep exactly that
//! order: i16 lane `l` of a product of values `k₀ … k₀ + 7` (`k₀` a multiple of 8) is value
//! `k₀ + l`'s, so a run of 16 or 32 values (one scale) summed into eight i16 lanes and
//! multiplied by its scale into two `int32x4_t` (`SMLAL` by lane) gives `aux32` in lane order.
//! (`SDOT` would add four neighbouring values, of four lanes: it would need both operands'
//! bytes permuted first, more instructions than it saves, so these kernels are the same with
//! and without the dot-product extension.)

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int16x8_t, int32x4_t, vaddq_f32, vcvtq_f32_s32, vdupq_n_f32,
    vget_low_s8, vget_low_s16, vmlal_high_laneq_s16, vmlal_high_s8, vmlal_laneq_s16, vmlal_s8,
    vmull_s8, vmulq_n_f32, vst1q_f32,
};

/// `Σ w·a` of 16 (or, with a second pair, 32) values into eight i16 lanes, lane `l` the
/// products of values `l` and `l + 8` (and `l + 16`, `l + 24`): `SMULL`, `SMLAL2`. Exact when
/// every lane's sum fits i16 (the callers' value ranges: |Σ| ≤ 4 · 31 · 128 or 2 · 32 · 128).
#[inline(always)]
pub(super) fn pairs(w: int8x16_t, a: int8x16_t, acc: Option<int16x8_t>) -> int16x8_t {
    // SAFETY: register-only NEON operations.
    unsafe {
        let p = match acc {
            Some(acc) => vmlal_s8(acc, vget_low_s8(w), vget_low_s8(a)),
            None => vmull_s8(vget_low_s8(w), vget_low_s8(a)),
        };
        vmlal_high_s8(p, w, a)
    }
}

/// `acc[l] += s[L] · p[l]` for the eight lanes (`SMLAL`, `SMLAL2` by lane of the scales):
/// exact (the callers' sums fit i32).
#[inline(always)]
pub(super) fn scaled<const L: i32>(acc: &mut [int32x4_t; 2], p: int16x8_t, s: int16x8_t) {
    // SAFETY: register-only NEON operations.
    unsafe {
        acc[0] = vmlal_laneq_s16::<L>(acc[0], vget_low_s16(p), s);
        acc[1] = vmlal_high_laneq_s16::<L>(acc[1], p, s);
    }
}

/// The f32 state of one K-quant dot product, as the portable `Lanes`: eight lane sums in two
/// registers and the minimums' `sumf`.
#[derive(Clone, Copy)]
pub(super) struct Lanes {
    sums: [float32x4_t; 2],
    sumf: f32,
}

impl Lanes {
    /// Zero.
    #[inline(always)]
    pub(super) fn new() -> Self {
        // SAFETY: register-only NEON operations.
        let z = unsafe { vdupq_n_f32(0.0) };
        Lanes {
            sums: [z, z],
            sumf: 0.0,
        }
    }

    /// `sums[l] += (f32)aux32[l] · d` for the eight lanes (`SCVTF`, `FMUL`, `FADD`: the
    /// portable lane step's roundings, no fused multiply-add).
    #[inline(always)]
    pub(super) fn block(&mut self, aux32: [int32x4_t; 2], d: f32) {
        // SAFETY: register-only NEON operations.
        unsafe {
            for (s, a) in self.sums.iter_mut().zip(aux32) {
                *s = vaddq_f32(*s, vmulq_n_f32(vcvtq_f32_s32(a), d));
            }
        }
    }

    /// `sumf −= dmin · (f32)sumi`.
    #[inline(always)]
    pub(super) fn minus(&mut self, dmin: f32, sumi: i32) {
        self.sumf -= dmin * sumi as f32;
    }

    /// `sumf` plus the lanes one at a time, in lane order.
    #[inline(always)]
    pub(super) fn total(self) -> f32 {
        let mut lanes = [0f32; 8];
        // SAFETY: the stores write the 32 bytes of `lanes`.
        unsafe {
            vst1q_f32(lanes.as_mut_ptr(), self.sums[0]);
            vst1q_f32(lanes.as_mut_ptr().add(4), self.sums[1]);
        }
        let mut sumf = self.sumf;
        for s in lanes {
            sumf += s;
        }
        sumf
    }
}
