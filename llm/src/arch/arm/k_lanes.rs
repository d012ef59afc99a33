//! What the K-quant kernels (Q4_K, Q6_K × Q8_K) share in Helium: a super-block's eight integer
//! lanes and their f32 sums in the portable order (`quant/k_lanes.rs`), and the nibble unpack.
//!
//! The portable K-quant dot products sum, per super-block, eight i32 lanes `aux32[l]` over the
//! values `k ≡ l (mod 8)` and add each lane to its own f32 sum, so a kernel must not add
//! products of two lanes. Here each 16-value group (one scale) is two halves of eight values
//! widened to i16 (`VLDRB.S16`): lane `l` of `a[0..8] · q[0..8] + a[8..16] · q[8..16]`
//! (`VMUL.I16`, `VADD.I16`: |a| ≤ 32, |q| ≤ 128, the sum fits an i16) is the group's share of
//! `aux32[l]`; widened to i32 (`VMOVLB`, `VMOVLT`: the even and the odd lanes) and multiplied by
//! the group's scale (`VMLA` by a scalar) into two i32 accumulators. Exact, as the portable
//! integers. The f32 part on the scalar FPU (Helium's vector floats flush subnormals).

use core::arch::asm;

use crate::gguf::QK_K;

/// The f32 state of one K-quant dot product, as the portable `Lanes`.
pub(super) struct Lanes {
    /// The eight lane sums.
    sums: [f32; 8],
    /// The minimums' sum.
    sumf: f32,
}

impl Lanes {
    /// Zero.
    pub(super) const fn new() -> Self {
        Lanes {
            sums: [0.0; 8],
            sumf: 0.0,
        }
    }

    /// Adds one super-block: weight values `v` (|v| ≤ 32), activation codes `q8`, one integer
    /// scale per 16 values, the combined f32 scale `d`: `sums[l] += d · (f32)aux32[l]`.
    #[inline(always)]
    pub(super) fn block(&mut self, v: &[i8; QK_K], q8: &[i8; QK_K], scales: &[i8; 16], d: f32) {
        let s = &mut self.sums;
        // SAFETY: 16 passes, each reading 16 bytes of `v` and of `q8` (256 in all: both are
        // 256-byte arrays) and one byte of `scales` (16), with post-increment. Only the
        // registers declared here are written (the vector registers q0–q4 are s0–s19; `d` in
        // s20; the lane sums in and out in s24–s31). The scalar FPU's `VCVT`, `VMUL`, `VADD`
        // round as the portable `d * aux32[l] as f32` and `+=`.
        unsafe {
            asm!(
                "vmov.i32 q0, #0",
                "vmov.i32 q1, #0",
                "2:",
                "vldrb.s16 q2, [r1], #8",
                "vldrb.s16 q4, [r2], #8",
                "vmul.i16 q2, q2, q4",
                "vldrb.s16 q3, [r1], #8",
                "vldrb.s16 q4, [r2], #8",
                "vmul.i16 q3, q3, q4",
                "vadd.i16 q2, q2, q3",
                "ldrsb r0, [r3], #1",
                "vmovlb.s16 q3, q2",
                "vmla.s32 q0, q3, r0",
                "vmovlt.s16 q3, q2",
                "vmla.s32 q1, q3, r0",
                "subs r12, r12, #1",
                "bne 2b",
                // q0 holds lanes 0, 2, 4, 6 (s0–s3), q1 lanes 1, 3, 5, 7 (s4–s7).
                "vcvt.f32.s32 s0, s0",
                "vmul.f32 s0, s20, s0",
                "vadd.f32 s24, s24, s0",
                "vcvt.f32.s32 s4, s4",
                "vmul.f32 s4, s20, s4",
                "vadd.f32 s25, s25, s4",
                "vcvt.f32.s32 s1, s1",
                "vmul.f32 s1, s20, s1",
                "vadd.f32 s26, s26, s1",
                "vcvt.f32.s32 s5, s5",
                "vmul.f32 s5, s20, s5",
                "vadd.f32 s27, s27, s5",
                "vcvt.f32.s32 s2, s2",
                "vmul.f32 s2, s20, s2",
                "vadd.f32 s28, s28, s2",
                "vcvt.f32.s32 s6, s6",
                "vmul.f32 s6, s20, s6",
                "vadd.f32 s29, s29, s6",
                "vcvt.f32.s32 s3, s3",
                "vmul.f32 s3, s20, s3",
                "vadd.f32 s30, s30, s3",
                "vcvt.f32.s32 s7, s7",
                "vmul.f32 s7, s20, s7",
                "vadd.f32 s31, s31, s7",
                inout("r1") v.as_ptr() => _,
                inout("r2") q8.as_ptr() => _,
                inout("r3") scales.as_ptr() => _,
                inout("r12") 16usize => _,
                out("r0") _,
                in("s20") d,
                inout("s24") s[0], inout("s25") s[1], inout("s26") s[2], inout("s27") s[3],
                inout("s28") s[4], inout("s29") s[5], inout("s30") s[6], inout("s31") s[7],
                out("s0") _, out("s1") _, out("s2") _, out("s3") _,
                out("s4") _, out("s5") _, out("s6") _, out("s7") _,
                out("s8") _, out("s9") _, out("s10") _, out("s11") _,
                out("s12") _, out("s13") _, out("s14") _, out("s15") _,
                out("s16") _, out("s17") _, out("s18") _, out("s19") _,
                options(readonly, nostack),
            );
        }
    }

    /// Subtracts one super-block's minimum term `dmin · (f32)sumi`.
    #[inline(always)]
    pub(super) fn minus(&mut self, dmin: f32, sumi: i32) {
        self.sumf -= dmin * sumi as f32;
    }

    /// The dot product: `sumf` plus the lanes in order.
    #[inline(always)]
    pub(super) fn total(self) -> f32 {
        let mut sumf = self.sumf;
        for s in self.sums {
            sumf += s;
        }
        sumf
    }
}

/// 64 values from 32 bytes of nibbles, as Q4_K stores them: the low nibbles are the first 32
/// values, the high nibbles the next 32.
#[inline(always)]
pub(super) fn nibbles(q: &[u8], v: &mut [i8]) {
    let (lo, hi) = v.split_at_mut(32);
    for ((l, h), &b) in lo.iter_mut().zip(hi).zip(q) {
        *l = (b & 0x0f) as i8;
        *h = (b >> 4) as i8;
    }
}
