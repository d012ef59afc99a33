//! Helium (M-profile vector extension) integer dot products of the eight-row kernels, in `asm!`
//! (Rust has no MVE intrinsics). The whole-page loop nests are `mve_scores.rs` and
//! `mve_values.rs`'s.

use core::arch::asm;

/// Eight codes of the three-head dot products: the key's eight bytes from `r1` and each query
/// row's eight codes from `r2`–`r4` (all post-incremented), each head's products summed into
/// `r8`, `r10` and `r12` by `$op` (`vmladav` sets the sum, `vmladava` adds to it).
macro_rules! dot3_step {
    ($op:literal) => {
        concat!(
            "vldrb.s16 q0, [r1], #8\n",
            "vldrh.s16 q1, [r2], #16\n",
            $op,
            ".s16 r8, q0, q1\n",
            "vldrh.s16 q1, [r3], #16\n",
            $op,
            ".s16 r10, q0, q1\n",
            "vldrh.s16 q1, [r4], #16\n",
            $op,
            ".s16 r12, q0, q1\n",
        )
    };
}

/// `Σ q[i] · (k[i] as i8)`, exact in an `i32`: eight codes a step, `VLDRB.S16` / `VLDRH.S16`
/// then `VMLADAVA.S16` (a multiply-accumulate across the vector into a core register). `q` and
/// `k` have the same length, a nonzero multiple of 8 and at most 256 (so the sum fits).
#[inline(always)]
pub(super) fn dot(q: &[i16], k: &[u8]) -> i32 {
    let steps = q.len().min(k.len()) / 8;
    if steps == 0 {
        return 0;
    }
    let acc: i32;
    // SAFETY: the loop runs `steps` ≥ 1 times and reads 8 bytes of `k` and 8 halfwords of `q`
    // each time, `steps · 8` ≤ both lengths; it writes only the registers declared here (q0,
    // q1 are s0–s7; the accumulator is r0, as VMLADAVA needs an even register, and the widening
    // loads need low base registers, r1 and r2) and the flags.
    unsafe {
        asm!(
            "movs r0, #0",
            "2:",
            "vldrb.s16 q0, [r1], #8",
            "vldrh.s16 q1, [r2], #16",
            "vmladava.s16 r0, q0, q1",
            "subs r3, r3, #1",
            "bne 2b",
            inout("r1") k.as_ptr() => _,
            inout("r2") q.as_ptr() => _,
            inout("r3") steps => _,
            out("r0") acc,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(readonly, nostack),
        );
    }
    acc
}

/// [`dot`] of three query heads' codes against the same key codes, each key step loaded once.
#[inline(always)]
pub(super) fn dot3(q: [&[i16]; 3], k: &[u8]) -> [i32; 3] {
    let steps = q.iter().fold(k.len(), |n, q| n.min(q.len())) / 8;
    if steps == 0 {
        return [0; 3];
    }
    let (a0, a1, a2): (i32, i32, i32);
    // SAFETY: as in `dot`, for three query rows: the loop reads `steps · 8` ≤ every length of
    // each; it writes only the declared registers (accumulators in the even r8, r10, r12; the
    // widening loads' bases in the low r1–r4) and the flags.
    unsafe {
        asm!(
            "mov.w r8, #0",
            "mov.w r10, #0",
            "mov.w r12, #0",
            "2:",
            dot3_step!("vmladava"),
            "subs r0, r0, #1",
            "bne 2b",
            inout("r1") k.as_ptr() => _,
            inout("r2") q[0].as_ptr() => _,
            inout("r3") q[1].as_ptr() => _,
            inout("r4") q[2].as_ptr() => _,
            inout("r0") steps => _,
            out("r8") a0,
            out("r10") a1,
            out("r12") a2,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(readonly, nostack),
        );
    }
    [a0, a1, a2]
}
