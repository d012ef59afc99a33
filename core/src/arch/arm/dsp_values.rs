//! The Cortex-M4's whole-page value loops for a run of `G` query heads (one to four), in `asm!`:
//! one macro each, instantiated per run length. [`weights_run`]: a chunk of rows' weights ×
//! scales; [`add_rows_wide`] (runs of up to three heads, eight lanes) and [`add_rows_four`] (four
//! heads, four lanes): every head's accumulators of a block of lanes in registers across a
//! page's rows, each code loaded sign-extended (`LDRSB`) and converted once for the run, each
//! product rounded, then added in row order: `kernels::int8_add_scaled_rows`'s bits.

use core::arch::asm;

/// Four codes of a row in [`add_rows_four`]'s registers: loaded
/// sign-extended (`LDRSB`, bytes `$o` on from `{rp}`), converted to floats in `s0`–`s3`, then
/// four `VMLA` per head `($w, $a0…$a3)`: its weight × scale and its accumulators.
macro_rules! value_row_run {
    ($o0:literal, $o1:literal, $o2:literal, $o3:literal; $( ($w:literal, $a0:literal, $a1:literal, $a2:literal, $a3:literal) ),+) => {
        concat!(
            "ldrsb {t}, [{rp}, #", $o0, "]\n",
            "ldrsb {x}, [{rp}, #", $o1, "]\n",
            "vmov s0, s1, {t}, {x}\n",
            "ldrsb {t}, [{rp}, #", $o2, "]\n",
            "ldrsb {x}, [{rp}, #", $o3, "]\n",
            "vmov s2, s3, {t}, {x}\n",
            "vcvt.f32.s32 s0, s0\n",
            "vcvt.f32.s32 s1, s1\n",
            "vcvt.f32.s32 s2, s2\n",
            "vcvt.f32.s32 s3, s3\n",
            $(
                "vmla.f32 ", $a0, ", ", $w, ", s0\n",
                "vmla.f32 ", $a1, ", ", $w, ", s1\n",
                "vmla.f32 ", $a2, ", ", $w, ", s2\n",
                "vmla.f32 ", $a3, ", ", $w, ", s3\n",
            )+
        )
    };
}

/// The `asm!` of [`add_rows_four`] for one run length: rows in pairs (their weights × scales by
/// one `VLDM`, `$ws`: the first row's `$w`, then the second's `$v`), an odd last row alone
/// (`$w1`: its `$w`); per head its accumulators (`$a`: four registers, loaded from and stored to
/// `acc + h·d` around the loops, `$r` their range).
macro_rules! add_rows_four {
    ($acc:expr, $d:expr, $ps:expr, $n:expr, $row:expr, $stride:expr; $ws:literal, $w1:literal, $( ($w:literal, $v:literal, $r:literal, $a0:literal, $a1:literal, $a2:literal, $a3:literal) ),+) => {
        asm_all_fpu!(
            "mov {t}, {acc}",
            $( concat!("vldmia {t}, {{", $r, "}}"), "add {t}, {t}, {d}, lsl #2", )+
            "lsrs {n}, {n}, #1",
            "beq 3f",
            "2:",
            concat!("vldmia {pp}!, {{", $ws, "}}"),
            value_row_run!("0", "1", "2", "3"; $( ($w, $a0, $a1, $a2, $a3) ),+),
            "add {rp}, {rp}, {stride}",
            value_row_run!("0", "1", "2", "3"; $( ($v, $a0, $a1, $a2, $a3) ),+),
            "add {rp}, {rp}, {stride}",
            "subs {n}, {n}, #1",
            "bne 2b",
            "3:",
            "cmp {odd}, #0",
            "beq 4f",
            concat!("vldmia {pp}, {{", $w1, "}}"),
            value_row_run!("0", "1", "2", "3"; $( ($w, $a0, $a1, $a2, $a3) ),+),
            "4:",
            "mov {t}, {acc}",
            $( concat!("vstmia {t}, {{", $r, "}}"), "add {t}, {t}, {d}, lsl #2", )+
            acc = in(reg) $acc,
            d = in(reg) $d,
            stride = in(reg) $stride,
            odd = in(reg) $n & 1,
            rp = inout(reg) $row => _,
            pp = inout(reg) $ps => _,
            n = inout(reg) $n => _,
            t = out(reg) _,
            x = out(reg) _,
        )
    };
}

/// Two codes of a row in [`add_rows_wide`]'s registers: loaded sign-extended (`LDRSB`, bytes
/// `$o` on from `{rp}`), converted to floats in `s0` and `s1`, then two `VMLA` per head
/// `($w, $a0, $a1)`: its weight × scale and its accumulators.
macro_rules! value_pair_run {
    ($o0:literal, $o1:literal; $( ($w:literal, $a0:literal, $a1:literal) ),+) => {
        concat!(
            "ldrsb {t}, [{rp}, #", $o0, "]\n",
            "ldrsb {x}, [{rp}, #", $o1, "]\n",
            "vmov s0, s1, {t}, {x}\n",
            "vcvt.f32.s32 s0, s0\n",
            "vcvt.f32.s32 s1, s1\n",
            $(
                "vmla.f32 ", $a0, ", ", $w, ", s0\n",
                "vmla.f32 ", $a1, ", ", $w, ", s1\n",
            )+
        )
    };
}

/// A row's eight lanes in [`add_rows_wide`]'s registers, `$w` naming each head's weight.
macro_rules! value_row_wide {
    ($( ($w:literal, $a0:literal, $a1:literal, $a2:literal, $a3:literal, $a4:literal, $a5:literal, $a6:literal, $a7:literal) ),+) => {
        concat!(
            value_pair_run!("0", "1"; $( ($w, $a0, $a1) ),+),
            value_pair_run!("2", "3"; $( ($w, $a2, $a3) ),+),
            value_pair_run!("4", "5"; $( ($w, $a4, $a5) ),+),
            value_pair_run!("6", "7"; $( ($w, $a6, $a7) ),+),
        )
    };
}

/// The `asm!` of [`add_rows_wide`] for one run length: rows in pairs (their weights × scales by
/// one `VLDM`, `$ws`: the first row's `$w`, then the second's `$v`), an odd last row alone
/// (`$w1`: its `$w`); per head its accumulators (`$a`: eight registers, loaded from and stored
/// to `acc + h·d` around the loops, `$r` their range).
macro_rules! add_rows_wide {
    ($acc:expr, $d:expr, $ps:expr, $n:expr, $row:expr, $stride:expr; $ws:literal, $w1:literal, $( ($w:literal, $v:literal, $r:literal, $a0:literal, $a1:literal, $a2:literal, $a3:literal, $a4:literal, $a5:literal, $a6:literal, $a7:literal) ),+) => {
        asm_all_fpu!(
            "mov {t}, {acc}",
            $( concat!("vldmia {t}, {{", $r, "}}"), "add {t}, {t}, {d}, lsl #2", )+
            "lsrs {n}, {n}, #1",
            "beq 3f",
            "2:",
            concat!("vldmia {pp}!, {{", $ws, "}}"),
            value_row_wide!($( ($w, $a0, $a1, $a2, $a3, $a4, $a5, $a6, $a7) ),+),
            "add {rp}, {rp}, {stride}",
            value_row_wide!($( ($v, $a0, $a1, $a2, $a3, $a4, $a5, $a6, $a7) ),+),
            "add {rp}, {rp}, {stride}",
            "subs {n}, {n}, #1",
            "bne 2b",
            "3:",
            "cmp {odd}, #0",
            "beq 4f",
            concat!("vldmia {pp}, {{", $w1, "}}"),
            value_row_wide!($( ($w, $a0, $a1, $a2, $a3, $a4, $a5, $a6, $a7) ),+),
            "4:",
            "mov {t}, {acc}",
            $( concat!("vstmia {t}, {{", $r, "}}"), "add {t}, {t}, {d}, lsl #2", )+
            acc = in(reg) $acc,
            d = in(reg) $d,
            stride = in(reg) $stride,
            odd = in(reg) $n & 1,
            rp = inout(reg) $row => _,
            pp = inout(reg) $ps => _,
            n = inout(reg) $n => _,
            t = out(reg) _,
            x = out(reg) _,
        )
    };
}

/// [`add_rows_four`] eight lanes at a time for a run of `G` heads (one to three, whose eight
/// accumulators each fit the FPU's registers beside a row's weights and codes): a row at a time,
/// each row's two code words converted once for all the run's heads. `false`, nothing done, for
/// other run lengths.
///
/// # Safety
///
/// As [`add_rows_four`], with eight lanes: `acc` valid for reads and writes of floats
/// `[h·d, h·d + 8)` for every `h < G`, every row for reads of bytes `[0, 8)`.
#[inline(always)]
pub(super) unsafe fn add_rows_wide<const G: usize>(
    acc: *mut f32,
    d: usize,
    ps: *const [f32; G],
    n: usize,
    row: *const u8,
    stride: usize,
) -> bool {
    // Each arm: the caller's contract for `acc`, `ps` and the rows; the loop runs `n` times,
    // reading `ps[ρ]` (`G` floats, `VLDM`) and row ρ's eight bytes (two `LDR`, which ARMv7-M
    // allows unaligned); the accumulators are read before and written after it. Only the
    // declared registers and the flags are written.
    match G {
        // SAFETY: as above, for one head.
        1 => unsafe {
            add_rows_wide!(
                acc, d, ps, n, row, stride;
                "s2-s3", "s2",
                ("s2", "s3", "s24-s31", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31")
            )
        },
        // SAFETY: as above, for two heads.
        2 => unsafe {
            add_rows_wide!(
                acc, d, ps, n, row, stride;
                "s2-s5", "s2-s3",
                ("s2", "s4", "s16-s23", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23"),
                ("s3", "s5", "s24-s31", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31")
            )
        },
        // SAFETY: as above, for three heads.
        3 => unsafe {
            add_rows_wide!(
                acc, d, ps, n, row, stride;
                "s2-s7", "s2-s4",
                ("s2", "s5", "s8-s15", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15"),
                ("s3", "s6", "s16-s23", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23"),
                ("s4", "s7", "s24-s31", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31")
            )
        },
        _ => return false,
    }
    true
}

/// `acc[h·d + l] += ps[ρ][h] · (row_ρ[l] as i8)` for a run of `G = 4` heads `h` (shorter runs
/// take [`add_rows_wide`]), four lanes `l` and the rows `row_ρ = row + ρ·stride` (ρ < `n`) in order: each product rounded,
/// then added (`VMLA` does not fuse), as the portable kernel does; the run's accumulators stay
/// in `s16`–`s31` across the rows (taken in pairs). `false`, nothing done, for other run
/// lengths.
///
/// # Safety
///
/// `n ≥ 1`; `acc` is valid for reads and writes of floats `[h·d, h·d + 4)` for every `h < G`;
/// `ps` for reads of `n` rows (initialized); every `row_ρ` (ρ < `n`) for reads of bytes `[0, 4)`;
/// no other reference to those floats is used meanwhile.
#[inline(always)]
pub(super) unsafe fn add_rows_four<const G: usize>(
    acc: *mut f32,
    d: usize,
    ps: *const [f32; G],
    n: usize,
    row: *const u8,
    stride: usize,
) -> bool {
    // Each arm: the caller's contract for `acc`, `ps` and the rows; the loops run `n / 2` times
    // over two rows and `n % 2` times over one, reading `ps[ρ]` (`G` floats, `VLDM`) and row
    // ρ's four bytes (`LDR`, which ARMv7-M allows unaligned) for ρ < `n`; the accumulators are
    // read before and written after them. Only the declared registers and the flags are
    // written.
    match G {
        // SAFETY: as above, for four heads.
        4 => unsafe {
            add_rows_four!(
                acc, d, ps, n, row, stride;
                "s8-s15", "s8-s11",
                ("s8", "s12", "s16-s19", "s16", "s17", "s18", "s19"),
                ("s9", "s13", "s20-s23", "s20", "s21", "s22", "s23"),
                ("s10", "s14", "s24-s27", "s24", "s25", "s26", "s27"),
                ("s11", "s15", "s28-s31", "s28", "s29", "s30", "s31")
            )
        },
        _ => return false,
    }
    true
}

/// The `asm!` of [`weights_run`] for one run length: per head `($wp, $wn, $h, $s)` its weight
/// pointer's operand and its name in the template, its index and its S register; `$ws` their
/// range.
macro_rules! weights_run {
    ($ps:expr, $w:expr, $p:expr, $sc:expr, $ss:expr, $m:expr; $ws:literal, $( ($wp:ident, $wn:literal, $h:literal, $s:literal) ),+) => {
        asm!(
            "2:",
            "ldrh {t}, [{sc}]",
            "add {sc}, {sc}, {ss}",
            "vmov s0, {t}",
            "vcvtb.f32.f16 s0, s0",
            $( concat!("vldmia ", $wn, "!, {{", $s, "}}"), )+
            $( concat!("vmul.f32 ", $s, ", ", $s, ", s0"), )+
            concat!("vstmia {ps}!, {{", $ws, "}}"),
            "subs {m}, {m}, #1",
            "bne 2b",
            ps = inout(reg) $ps => _,
            $( $wp = inout(reg) $w.wrapping_add($h * $p) => _, )+
            sc = inout(reg) $sc => _,
            ss = in(reg) $ss,
            m = inout(reg) $m => _,
            t = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _, out("s4") _,
            options(nostack),
        )
    };
}

/// `ps[j][h] = w[h·p + j] · s_j` for rows `j < m` and a run of `G` heads (one to four),
/// `s_j` the f16 at `sc + j·sstride` converted by `VCVTB` (as `f16::to_f32`): the value
/// kernel's weights × scales of a chunk's rows for one group (`kernels::scale_weights`'s
/// products). `false`, nothing done, for other run lengths.
///
/// # Safety
///
/// `m ≥ 1`; `ps` is valid for writes of `m` rows; `w + h·p` for reads of `m` floats for each
/// head `h < G` (4-byte aligned); `sc + j·sstride` for reads of two bytes for every `j < m`.
#[inline(always)]
pub(super) unsafe fn weights_run<const G: usize>(
    ps: *mut [f32; G],
    w: *const f32,
    p: usize,
    sc: *const u8,
    sstride: usize,
    m: usize,
) -> bool {
    // Each arm: the caller's contract; the loop runs `m` times, reading a halfword at `sc`
    // (unaligned halfwords are allowed) and one float of each head's weights, and writing `G`
    // floats to `ps`. Only the declared registers and the flags are written.
    match G {
        // SAFETY: as above, for one head.
        1 => unsafe { weights_run!(ps, w, p, sc, sstride, m; "s1", (w0, "{w0}", 0, "s1")) },
        // SAFETY: as above, for two heads.
        2 => unsafe {
            weights_run!(
                ps, w, p, sc, sstride, m;
                "s1-s2",
                (w0, "{w0}", 0, "s1"),
                (w1, "{w1}", 1, "s2")
            )
        },
        // SAFETY: as above, for three heads.
        3 => unsafe {
            weights_run!(
                ps, w, p, sc, sstride, m;
                "s1-s3",
                (w0, "{w0}", 0, "s1"),
                (w1, "{w1}", 1, "s2"),
                (w2, "{w2}", 2, "s3")
            )
        },
        // SAFETY: as above, for four heads.
        4 => unsafe {
            weights_run!(
                ps, w, p, sc, sstride, m;
                "s1-s4",
                (w0, "{w0}", 0, "s1"),
                (w1, "{w1}", 1, "s2"),
                (w2, "{w2}", 2, "s3"),
                (w3, "{w3}", 3, "s4")
            )
        },
        _ => return false,
    }
    true
}
