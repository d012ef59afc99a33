//! Helium (M-profile vector extension) attention weights, in `asm!`: a page's maximum score per
//! head, and its scores into weights `exp(score − max)`, four lanes per vector, with the bits of
//! `numeric::exp` (`libm::expf`, floored).
//!
//! LLVM's vectorization of the eight-lane `exp` cost 29 instructions per weight on the
//! Cortex-M55 (Helium has no vector division, and the lanes' selects became long mask
//! sequences); here each weight costs about ten. The steps are `libm`'s for an argument
//! `x ≤ 0` (scores minus their maximum), in its order and unfused: the reduction
//! `k = trunc(x / ln 2 − 1/2)` (`VCVT` truncates; `k = −1` or `0` near zero as `libm` branches),
//! `hi`, `lo`, `r`, the rational approximation with its one division per lane by the scalar FPU
//! (`VDIV` on the lanes' S registers), `2^k` built in the exponent bits, `1 + x` for
//! `|x| ≤ 2^-14`. The floor needs no compare of its own: `weight(expf(x))` is zero exactly for
//! `x <` [`exp::ZERO_BELOW`] (every negative `f32` checked in `numeric::exp`'s tests), which
//! also zeroes `−∞` and every argument below `libm`'s range. NaN stays NaN.
//!
//! Helium's vector floats flush subnormals; none arises in a lane kept: for `x ≥ −41.6`, `k ≥
//! −60`, `r` is zero or at least 2^-44 in magnitude, and the result is at least 2^-60; lanes with
//! `|x| ≤ 2^-14` take `1 + x`, which rounds to 1 for subnormal `x`. `numeric::exp`'s tests run
//! this form with subnormals flushed against `libm` over the negative floats.

use core::arch::asm;

use crate::numeric::exp;

/// `asm!` constants, two per `LDRD`: `1/ln 2` and `−1/2` (the reduction), `−ln 2 / 2` and
/// `−1.5 ln 2` (where `k` is `libm`'s rounded quotient, `−1` or `0`), `ln 2` high and low, the
/// approximation's `P1` and `P2`.
static CONSTANTS: [f32; 8] = [
    exp::INV_LN2,
    -0.5,
    -f32::from_bits(exp::HALF_LN2),
    -f32::from_bits(exp::THREE_HALVES_LN2),
    exp::LN2_HI,
    exp::LN2_LO,
    exp::P1,
    exp::P2,
];

/// `xs[i] = weight(exp(xs[i] − shifts[i / row]))` for `heads` rows of `row` floats, each
/// bit-identical to `floor::weight(libm::expf(xs[i] − shifts[i / row]))` where
/// `xs[i] ≤ shifts[i / row]` or either is NaN (shifts are the rows' maxima). Elsewhere (a score
/// above its shift) the weight is not `libm`'s; nothing unsafe follows.
///
/// # Safety
///
/// `row` is a nonzero multiple of 4; `xs` is valid for reads and writes of `heads · row` floats
/// and `shifts` for reads of `heads` floats, both 4-byte aligned; `heads ≥ 1`.
#[inline(always)]
pub(super) unsafe fn exp_rows(xs: *mut f32, row: usize, shifts: *const f32, heads: usize) {
    // SAFETY: the caller's contract: the outer loop runs `heads` times, reading one shift; the
    // inner loop `row / 4` times, reading and writing four floats of `xs`; `CONSTANTS` is read.
    // Only the declared registers and the flags are written (q1 holds 2.0 throughout).
    unsafe {
        asm_all_fpu!(
            "vmov.f32 q1, #2.0",
            "2:",
            "ldr {shift}, [{sh}], #4",
            "dls lr, {blocks}",
            "3:",
            "vldrw.u32 q0, [{xs}]",
            "ldrd {c0}, {c1}, [{tbl}]",
            "vsub.f32 q0, q0, {shift}",
            // k = trunc(x / ln 2 − 1/2), or −1 for x ≥ −1.5 ln 2, or 0 for x ≥ −ln 2 / 2.
            "vmul.f32 q7, q0, {c0}",
            "vadd.f32 q7, q7, {c1}",
            "vcvt.s32.f32 q7, q7",
            "ldrd {c0}, {c1}, [{tbl}, #8]",
            "vmov.i32 q2, #0",
            "vpt.f32 lt, q0, {c0}",
            "vmvnt.i32 q2, #0",
            "vpt.f32 lt, q0, {c1}",
            "vmovt q2, q7",
            // hi = x − k·ln2_hi, lo = k·ln2_lo, r = hi − lo.
            "vcvt.f32.s32 q3, q2",
            "ldrd {c0}, {c1}, [{tbl}, #16]",
            "vmul.f32 q4, q3, {c0}",
            "vsub.f32 q4, q0, q4",
            "vmul.f32 q3, q3, {c1}",
            "vsub.f32 q5, q4, q3",
            // c = r − r²·(P1 + r²·P2).
            "vmul.f32 q6, q5, q5",
            "ldrd {c0}, {c1}, [{tbl}, #24]",
            "vmul.f32 q7, q6, {c1}",
            "vadd.f32 q7, q7, {c0}",
            "vmul.f32 q7, q6, q7",
            "vsub.f32 q6, q5, q7",
            // y = 1 + (r·c / (2 − c) − lo + hi), the division lane by lane.
            "vmul.f32 q7, q5, q6",
            "vsub.f32 q5, q1, q6",
            "vdiv.f32 s28, s28, s20",
            "vdiv.f32 s29, s29, s21",
            "vdiv.f32 s30, s30, s22",
            "vdiv.f32 s31, s31, s23",
            "vsub.f32 q7, q7, q3",
            "vadd.f32 q7, q7, q4",
            "vadd.f32 q7, q7, {one}",
            // y · 2^k (the bits (k + 127) << 23).
            "vshl.i32 q2, q2, #23",
            "vadd.i32 q2, q2, {one}",
            "vmul.f32 q7, q7, q2",
            // 1 + x near zero; zero below the floor (−∞ too).
            "vpt.f32 ge, q0, {ntiny}",
            "vaddt.f32 q7, q0, {one}",
            "vpt.f32 lt, q0, {zero_below}",
            "vmovt.i32 q7, #0",
            "vstrw.32 q7, [{xs}], #16",
            "le lr, 3b",
            "subs {heads}, {heads}, #1",
            "bne 2b",
            xs = inout(reg) xs => _,
            sh = inout(reg) shifts => _,
            heads = inout(reg) heads => _,
            blocks = in(reg) row / 4,
            tbl = in(reg) CONSTANTS.as_ptr(),
            one = in(reg) 1f32.to_bits(),
            ntiny = in(reg) (-f32::from_bits(exp::TINY)).to_bits(),
            zero_below = in(reg) exp::ZERO_BELOW.to_bits(),
            shift = out(reg) _,
            c0 = out(reg) _,
            c1 = out(reg) _,
            out("lr") _,
        );
    }
}

/// The largest of `n` floats at `s` that are not NaN (−∞ if none), by `VMAXNMV` (IEEE
/// `maxNum`: quiet NaNs skipped). As `exp::max_of` says, a zero maximum's sign may differ from
/// the fold's; and Helium flushes subnormal inputs to zero, so a subnormal maximum comes out as
/// a zero. Neither changes a weight: a maximum enters only through `x − max` for scores `x` (and
/// the state's previous maximum), and where a subnormal `max` changes `x`'s bits, `|x| < 2^-100`
/// and `exp(x)` rounds to 1 either way.
///
/// # Safety
///
/// `n` is a nonzero multiple of 4; `s` is valid for reads of `n` floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn max_of(s: *const f32, n: usize) -> f32 {
    let m: u32;
    // SAFETY: the caller's contract: the loop runs `n / 4` times, reading four floats each.
    // Only the declared registers are written.
    unsafe {
        asm!(
            "dls lr, {blocks}",
            "2:",
            "vldrw.u32 q0, [{s}], #16",
            "vmaxnmv.f32 {m}, q0",
            "le lr, 2b",
            s = inout(reg) s => _,
            blocks = in(reg) n / 4,
            m = inout(reg) f32::NEG_INFINITY.to_bits() => m,
            out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(readonly, nostack),
        );
    }
    f32::from_bits(m)
}

/// `s + w[0] + w[1] + … + w[n − 1]`, added in that order by the scalar FPU (`VADD.F32` on the
/// lanes' S registers, IEEE as Rust's `f32` addition): a head's sum of weights, four
/// loaded per `VLDRW`.
///
/// # Safety
///
/// `n` is a nonzero multiple of 4; `w` is valid for reads of `n` floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn sum(s: f32, w: *const f32, n: usize) -> f32 {
    let mut acc = s;
    // SAFETY: the caller's contract: the loop runs `n / 4` times, reading four floats each.
    // Only the declared registers are written.
    unsafe {
        asm!(
            "dls lr, {blocks}",
            "2:",
            "vldrw.u32 q0, [{w}], #16",
            "vadd.f32 {acc}, {acc}, s0",
            "vadd.f32 {acc}, {acc}, s1",
            "vadd.f32 {acc}, {acc}, s2",
            "vadd.f32 {acc}, {acc}, s3",
            "le lr, 2b",
            w = inout(reg) w => _,
            blocks = in(reg) n / 4,
            acc = inout(sreg) acc,
            out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(readonly, nostack),
        );
    }
    acc
}
