//! Attention weights on a scalar FPU (Cortex-M4F, M7, M33 without Helium), in `asm!`: a page's
//! maximum score per head, its scores into weights `exp(score − max)`, and a head's sum of
//! weights, with the bits of `numeric::exp` (`libm::expf`, floored).
//!
//! LLVM's build of `exp::scalar` cost 42 instructions per weight on the Cortex-M4: `VCMP` and
//! `VMRS` for each range test and constants rebuilt with `MOVW`/`MOVT` inside the loop. Here the
//! range tests are integer compares of `x`'s bits, the constants stay in S registers, and the
//! common argument (`−41.6 ≤ x < −1.04`, `k` from `libm`'s rounded quotient) runs straight through:
//! 30 instructions. The steps are `libm`'s for `x ≤ 0`, in its order and unfused (`VMUL` then
//! `VADD`/`VSUB`): `k = trunc(x / ln 2 − 1/2)` (`VCVT` truncates), or `−1` for
//! `x ≥ −1.5 ln 2`, or `0` for `x ≥ −ln 2 / 2` (then `hi = x − 0 · ln2_hi = x`, `lo = 0` and
//! `r = x`, as `libm`'s unreduced branch), `1 + x` for `|x| ≤ 2^-14`, and `y · 2^k` as `k` added
//! to `y`'s exponent bits (exact: `y` and the result are normal, `k ≥ −60`). Below [`exp::ZERO_BELOW`] (and `−∞`) the weight is zero:
//! `weight(expf(x))` is zero exactly there. NaN stays NaN.

use core::arch::asm;

use crate::numeric::exp;

/// `asm!` constants, loaded into `s16`–`s24` once per call: `1/ln 2`, `−1/2`, `ln 2` high and
/// low, the approximation's `P1` and `P2`, `2`, `1` and `0`.
static CONSTANTS: [f32; 9] = [
    exp::INV_LN2,
    -0.5,
    exp::LN2_HI,
    exp::LN2_LO,
    exp::P1,
    exp::P2,
    2.0,
    1.0,
    0.0,
];

/// `xs[i] = weight(exp(xs[i] − shifts[i / row]))` for `heads` rows of `row` floats, each
/// bit-identical to `floor::weight(libm::expf(xs[i] − shifts[i / row]))` where
/// `xs[i] ≤ shifts[i / row]` or either is NaN (shifts are the rows' maxima). Elsewhere (a score
/// above its shift) the weight is not `libm`'s; nothing unsafe follows.
///
/// # Safety
///
/// `row ≥ 1` and `heads ≥ 1`; `xs` is valid for reads and writes of `heads · row` floats and
/// `shifts` for reads of `heads` floats, both 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn exp_rows(xs: *mut f32, row: usize, shifts: *const f32, heads: usize) {
    // SAFETY: the caller's contract: the outer loop runs `heads` times, reading one shift; the
    // inner loop `row` times, reading and writing one float of `xs`; `CONSTANTS` is read. Only
    // the declared registers and the flags are written.
    unsafe {
        asm!(
            "vldmia {tbl}, {{s16-s24}}",
            "2:",
            "vldmia {sh}!, {{s25}}",
            "mov {n}, {row}",
            "3:",
            "vldr s0, [{xs}]",
            "vsub.f32 s0, s0, s25",
            // x ≤ 0: its bits compare as |x|'s with the sign set. The common range, more than
            // 1.5 ln 2 below zero and not past the floor, by one unsigned compare of the bits
            // minus its start (anything below it wraps above); the rest at 11f.
            "vmov {b}, s0",
            "sub {k}, {b}, {lo}",
            "cmp {k}, {span}",
            "bhi 11f",
            // k = trunc(x / ln 2 − 1/2).
            "vmul.f32 s1, s0, s16",
            "vadd.f32 s1, s1, s17",
            "vcvt.s32.f32 s1, s1",
            "vmov {k}, s1",
            "vcvt.f32.s32 s1, s1",
            // hi = x − k·ln2_hi (in place: `VMLS` rounds the product, then subtracts),
            // lo = k·ln2_lo, r = hi − lo.
            "4:",
            "vmls.f32 s0, s1, s18",
            "vmul.f32 s3, s1, s19",
            "vsub.f32 s4, s0, s3",
            // c = r − r²·(P1 + r²·P2).
            "vmul.f32 s5, s4, s4",
            "vmul.f32 s6, s5, s21",
            "vadd.f32 s6, s6, s20",
            "vmul.f32 s6, s5, s6",
            "vsub.f32 s6, s4, s6",
            // y = 1 + (r·c / (2 − c) − lo + hi), then y · 2^k: k added to y's exponent (exact:
            // y and the result are normal).
            "vmul.f32 s7, s4, s6",
            "vsub.f32 s6, s22, s6",
            "vdiv.f32 s7, s7, s6",
            "vsub.f32 s7, s7, s3",
            "vadd.f32 s7, s7, s0",
            "vadd.f32 s7, s7, s23",
            "vmov {b}, s7",
            "add {b}, {b}, {k}, lsl #23",
            "str {b}, [{xs}], #4",
            "7:",
            "subs {n}, {n}, #1",
            "bne 3b",
            "subs {heads}, {heads}, #1",
            "bne 2b",
            "b 9f",
            // Past the floor (−∞ and negative NaNs too): 6f; else at most 1.5 ln 2 below zero
            // (zeros, positive NaNs): on.
            "11:",
            "add {k}, {lo}, {span}",
            "cmp {b}, {k}",
            "bhi 6f",
            // |x| ≤ 1.5 ln 2 (or a positive NaN): k = −1 above ln 2 / 2, else 0 (or 1 + x at
            // most 2^-14).
            "5:",
            "bic {b}, {b}, #0x80000000",
            "cmp {b}, #0x7f800000",
            "bhi 6f",
            "movw {k}, #0x7218",
            "movt {k}, #0x3eb1",
            "cmp {b}, {k}",
            "bls 8f",
            "mov {k}, #-1",
            "vmov.f32 s1, #-1.0",
            "b 4b",
            "8:",
            "cmp {b}, #0x39000000",
            "bls 10f",
            "mov {k}, #0",
            "vmov.f32 s1, s24",
            "b 4b",
            "10:",
            "vadd.f32 s7, s0, s23",
            "vstmia {xs}!, {{s7}}",
            "b 7b",
            // Below the floor: zero; NaN stays.
            "6:",
            "bic {b}, {b}, #0x80000000",
            "cmp {b}, #0x7f800000",
            "ite hi",
            "vmovhi.f32 s7, s0",
            "vmovls.f32 s7, s24",
            "vstmia {xs}!, {{s7}}",
            "b 7b",
            "9:",
            xs = inout(reg) xs => _,
            sh = inout(reg) shifts => _,
            heads = inout(reg) heads => _,
            row = in(reg) row,
            tbl = in(reg) CONSTANTS.as_ptr(),
            lo = in(reg) (exp::THREE_HALVES_LN2 | 0x8000_0000) + 1,
            span = in(reg) exp::ZERO_BELOW.to_bits() - (exp::THREE_HALVES_LN2 | 0x8000_0000) - 1,
            n = out(reg) _,
            b = out(reg) _,
            k = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _,
            options(nostack),
        );
    }
}

/// The loop of [`max_of`] and [`sum`] over `{p}`'s floats: sixteen per `VLDM` into `s0`–`s15`
/// while `{big}` counts down, then four while `{small}` does, `$step` (a macro of one S register
/// naming an instruction string) for each float in order, the running value in `s16`.
macro_rules! sixteens_then_fours {
    ($step:ident) => {
        concat!(
            "cmp {big}, #0\n",
            "beq 3f\n",
            "2:\n",
            "vldmia {p}!, {{s0-s15}}\n",
            $step!("s0"),
            $step!("s1"),
            $step!("s2"),
            $step!("s3"),
            $step!("s4"),
            $step!("s5"),
            $step!("s6"),
            $step!("s7"),
            $step!("s8"),
            $step!("s9"),
            $step!("s10"),
            $step!("s11"),
            $step!("s12"),
            $step!("s13"),
            $step!("s14"),
            $step!("s15"),
            "subs {big}, {big}, #1\n",
            "bne 2b\n",
            "3:\n",
            "cmp {small}, #0\n",
            "beq 5f\n",
            "4:\n",
            "vldmia {p}!, {{s0-s3}}\n",
            $step!("s0"),
            $step!("s1"),
            $step!("s2"),
            $step!("s3"),
            "subs {small}, {small}, #1\n",
            "bne 4b\n",
            "5:\n",
        )
    };
}

/// One step of [`max_of`]: `s16 = x` if `x > s16`.
macro_rules! max_step {
    ($x:literal) => {
        concat!(
            "vcmp.f32 ",
            $x,
            ", s16\n",
            "vmrs APSR_nzcv, fpscr\n",
            "it gt\n",
            "vmovgt.f32 s16, ",
            $x,
            "\n",
        )
    };
}

/// One step of [`sum`]: `s16 += x`.
macro_rules! add_step {
    ($x:literal) => {
        concat!("vadd.f32 s16, s16, ", $x, "\n")
    };
}

/// The largest of `n` floats at `s` that are not NaN (−∞ if none), as `exp::max_of`'s fold:
/// each `x > m` by `VCMP`, the larger kept (a NaN never compares larger). Sixteen loaded per
/// `VLDM` (a page of SmolLM2's cache), then four at a time.
///
/// # Safety
///
/// `n` is a nonzero multiple of 4; `s` is valid for reads of `n` floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn max_of(s: *const f32, n: usize) -> f32 {
    let mut m = f32::NEG_INFINITY.to_bits();
    // SAFETY: the caller's contract: the loops read `n` floats, sixteen then four at a time.
    // Only the declared registers and the flags are written. (The maximum passes through a core
    // register: S-register operands need a target feature these builds do not name.)
    unsafe {
        asm!(
            "vmov s16, {m}",
            sixteens_then_fours!(max_step),
            "vmov {m}, s16",
            p = inout(reg) s => _,
            big = inout(reg) n / 16 => _,
            small = inout(reg) n % 16 / 4 => _,
            m = inout(reg) m,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _,
            options(readonly, nostack),
        );
    }
    f32::from_bits(m)
}

/// `s + w[0] + w[1] + … + w[n − 1]`, added in that order (`VADD.F32`, IEEE as Rust's `f32`
/// addition): a head's sum of weights, sixteen loaded per `VLDM`, then four at a time.
///
/// # Safety
///
/// `n` is a nonzero multiple of 4; `w` is valid for reads of `n` floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn sum(s: f32, w: *const f32, n: usize) -> f32 {
    let mut acc = s.to_bits();
    // SAFETY: the caller's contract: the loops read `n` floats, sixteen then four at a time.
    // Only the declared registers and the flags are written (the sum through a core register,
    // as in `max_of`).
    unsafe {
        asm!(
            "vmov s16, {acc}",
            sixteens_then_fours!(add_step),
            "vmov {acc}, s16",
            p = inout(reg) w => _,
            big = inout(reg) n / 16 => _,
            small = inout(reg) n % 16 / 4 => _,
            acc = inout(reg) acc,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _,
            options(readonly, nostack),
        );
    }
    f32::from_bits(acc)
}
