//! Helium `asm!` loop nests for the values of whole pages of int8 rows and a run of `G` query
//! heads (1 to 4) per KV head (`mve_runs.rs` drives them): the rows' weights × scales four rows
//! per vector, then the weighted rows added to accumulators that stay in registers across the
//! rows. Each kernel is one macro, given each run length's registers: the same loop nest for
//! every `G`.
//!
//! Registers: the weights' four rows per vector keep a head's products in q0–q3, the scales in
//! q4 and their offsets in q7; the value accumulators of a block of lanes fill q2–q7 (three heads
//! of eight lanes, two of eight, one of eight, or four heads of four: [`value_lanes`]).

use core::arch::asm;

/// The value kernel's lanes per block for a run of `G` heads: four heads of four lanes (their
/// accumulators fill q2–q5), fewer heads eight.
#[inline(always)]
pub(super) const fn value_lanes(g: usize) -> usize {
    if g == 4 { 4 } else { 8 }
}

/// One [`weights_x4`] loop for a run's heads `[weight pointer, register]` (all four pointers
/// set: one add each per call).
macro_rules! weights_x4 {
    (
        $w:expr, $step:expr, $sc:expr, $sc_step:expr, $offs:expr, $ps:expr, $blocks:expr,
        [$([$wp:literal, $q:literal]),+]
    ) => {
        asm!(
            "vldrw.u32 q7, [{offs}]",
            "add {w1}, {w0}, {step}",
            "add {w2}, {w1}, {step}",
            "add {w3}, {w2}, {step}",
            "dls lr, {blocks}",
            "2:",
            "vldrh.u32 q4, [{sc}, q7, uxtw #1]",
            "vcvtb.f32.f16 q4, q4",
            concat!($(
                "vldrw.u32 ", $q, ", [", $wp, "], #16\n",
                "vmul.f32 ", $q, ", ", $q, ", q4\n",
            )+),
            "vst40.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst41.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst42.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst43.32 {{q0, q1, q2, q3}}, [{ps}]!",
            "add {sc}, {sc}, {sc_step}",
            "le lr, 2b",
            offs = in(reg) $offs,
            w0 = inout(reg) $w => _,
            w1 = out(reg) _,
            w2 = out(reg) _,
            w3 = out(reg) _,
            step = in(reg) $step,
            sc = inout(reg) $sc => _,
            sc_step = in(reg) $sc_step,
            ps = inout(reg) $ps => _,
            blocks = in(reg) $blocks,
            out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(nostack),
        )
    };
}

/// Value weights × scales for a run of `G` heads, four rows per vector, `blocks` blocks of four
/// rows: block `β`'s `ps[4β + ρ][h] = w_h[4β + ρ]·s` for rows ρ < 4 and heads `h < G`, where
/// `w_h` are the floats at `w + h·step` bytes and `s` the f16 scale gathered from `sc + β·sc_step
/// + 2·offs[ρ]` (`VLDRH.U32`, `VCVTB.F32.F16`); each product rounded as the scalar form's
/// (`kernels::scale_weights`). Vector floats flush subnormals: none arises (weights are 2^-60 or
/// more or zero, f16 scales normal as f32). The floats of each row past `G` are written, unused.
///
/// # Safety
///
/// `1 ≤ G ≤ 4`; `blocks ≥ 1`; for each block `β`, `w + h·step + 16β` (h < G) valid for reads of
/// four floats, 4-byte aligned; `sc + β·sc_step + 2·offs[ρ]` for reads of a halfword, 2-byte
/// aligned; `ps` for writes of `4·blocks` rows of four floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn weights_x4<const G: usize>(
    w: *const f32,
    step: usize,
    sc: *const u8,
    sc_step: usize,
    offs: &[u32; 4],
    ps: *mut [f32; 4],
    blocks: usize,
) {
    let offs = offs.as_ptr();
    // SAFETY: the caller's contract: per block, `G` four-float loads, four gathered halfwords
    // and the interleaving stores of four rows of four floats. Only the declared registers are
    // written.
    unsafe {
        match G {
            1 => weights_x4!(w, step, sc, sc_step, offs, ps, blocks, [["{w0}", "q0"]]),
            2 => weights_x4!(
                w,
                step,
                sc,
                sc_step,
                offs,
                ps,
                blocks,
                [["{w0}", "q0"], ["{w1}", "q1"]]
            ),
            3 => weights_x4!(
                w,
                step,
                sc,
                sc_step,
                offs,
                ps,
                blocks,
                [["{w0}", "q0"], ["{w1}", "q1"], ["{w2}", "q2"]]
            ),
            _ => weights_x4!(
                w,
                step,
                sc,
                sc_step,
                offs,
                ps,
                blocks,
                [
                    ["{w0}", "q0"],
                    ["{w1}", "q1"],
                    ["{w2}", "q2"],
                    ["{w3}", "q3"]
                ]
            ),
        }
    }
}

/// What [`add_rows`] reads (at these offsets): the rows' weights × scales (four floats a row),
/// the number of rows, the bytes from one head's accumulators to the next's, and the blocks of
/// lanes (counted down to zero as they are done).
#[repr(C)]
pub(super) struct AddRows {
    pub(super) ps: *const [f32; 4],
    pub(super) n: usize,
    pub(super) head: usize,
    pub(super) blocks: usize,
}

// The byte offsets [`add_rows`]'s `asm!` reads and writes `AddRows`'s fields at (`LDM` of `ps`
// and `n`, then `#4`, `#8`, `#12`).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(AddRows, ps) == 0);
    assert!(offset_of!(AddRows, n) == 4);
    assert!(offset_of!(AddRows, head) == 8);
    assert!(offset_of!(AddRows, blocks) == 12);
};

/// One row of [`add_rows`]'s loop: its weights × scales `r2`–`r5` from `r1`, then per vector
/// of four codes from `r0` (at its byte offset), the codes widened and converted, and per head
/// one `VMUL` by the head's weight and one `VADD` into its accumulator; then `r0` a stride on.
macro_rules! value_row {
    ([$([$at:literal, [$([$w:literal, $acc:literal]),+]]),+]) => {
        concat!(
            "ldm r1!, {{r2, r3, r4, r5}}\n",
            $(
                "vldrb.s32 q0, [r0, #", $at, "]\n",
                "vcvt.f32.s32 q0, q0\n",
                $("vmul.f32 q1, q0, ", $w, "\nvadd.f32 ", $acc, ", ", $acc, ", q1\n",)+
            )+
            "add r0, r0, {st}\n",
        )
    };
}

/// One [`add_rows`] loop nest: `$heads` sets r3–r5 to the heads' accumulators past the first
/// (from `{a}` and the head stride in r2), `$load` and `$store` move a block's accumulators,
/// `$row` the row's vectors, `$lanes` the block's floats in bytes, `$codes` its codes.
macro_rules! add_rows {
    (
        $p:expr, $acc:expr, $row:expr, $stride:expr,
        $heads:literal, $load:literal, $store:literal, $vectors:tt, $lanes:literal,
        $codes:literal
    ) => {
        asm_all_fpu!(
            "5:",
            "ldr r2, [{pb}, #8]",
            $heads,
            $load,
            "ldm {pb}, {{r1, r3}}",
            "mov r0, {rb}",
            "lsrs r2, r3, #1",
            "wls lr, r2, 6f",
            "2:",
            value_row!($vectors),
            value_row!($vectors),
            "le lr, 2b",
            "6:",
            "ldr r3, [{pb}, #4]",
            "lsls r3, r3, #31",
            "beq 7f",
            value_row!($vectors),
            "7:",
            "ldr r2, [{pb}, #8]",
            $heads,
            $store,
            concat!("add {a}, {a}, #", $lanes),
            concat!("add {rb}, {rb}, #", $codes),
            "ldr r2, [{pb}, #12]",
            "subs r2, r2, #1",
            "str r2, [{pb}, #12]",
            "bne 5b",
            pb = in(reg) $p,
            a = inout(reg) $acc => _,
            rb = inout(reg) $row => _,
            st = in(reg) $stride,
            out("r0") _, out("r1") _,
            out("r2") _, out("r3") _, out("r4") _, out("r5") _,
            out("lr") _,
        )
    };
}

/// `acc[h][l] += ps[ρ][h] · (row_ρ[l] as i8)` for a run of `G` heads `h` (accumulators `p.head`
/// bytes apart), the lanes `l` of `p.blocks` blocks of [`value_lanes`]`(G)`, and the rows
/// `row_ρ = row + ρ·stride` (ρ < `p.n`) in order: each product rounded, then added (`VMUL`,
/// then `VADD`: unfused, as the portable kernel). A block's accumulators stay in q2–q7 across
/// the rows, two rows per turn of the low-overhead loop (`WLS`/`LE`); each row costs a pointer
/// step, one widening load and conversion per four lanes (`VLDRB.S32`, `VCVT`), one `LDM` of
/// its weights, and per head and four lanes one `VMUL` by a core register and one `VADD`.
///
/// # Safety
///
/// `1 ≤ G ≤ 4`; `p.blocks ≥ 1`; for each block `b < p.blocks`, the `value_lanes(G)` floats at
/// `acc + b·value_lanes(G) + h·p.head/4` (h < G) are valid for reads and writes, 4-byte
/// aligned; every `row_ρ + b·value_lanes(G)` (ρ < `p.n`) is valid for reads of
/// `value_lanes(G)` bytes; `p.ps` for reads of `p.n` rows; no other reference to those floats
/// is used meanwhile. `p.blocks` is zero afterwards.
#[inline(always)]
pub(super) unsafe fn add_rows<const G: usize>(
    p: &mut AddRows,
    acc: *mut f32,
    row: *const u8,
    stride: usize,
) {
    let p = p as *mut AddRows;
    // SAFETY: the caller's contract: per block, the accumulators are loaded and stored once and
    // `p.n` rows' weights and codes read; `p.blocks` is counted down in place. Only the declared
    // registers and the flags are written (the row's address in r0, a low register as the
    // widening load needs; its weights in r2–r5, ascending as `LDM` needs).
    unsafe {
        match G {
            1 => add_rows!(
                p,
                acc,
                row,
                stride,
                "",
                "vldrw.u32 q2, [{a}]\nvldrw.u32 q3, [{a}, #16]",
                "vstrw.32 q2, [{a}]\nvstrw.32 q3, [{a}, #16]",
                [["0", [["r2", "q2"]]], ["4", [["r2", "q3"]]]],
                "32",
                "8"
            ),
            2 => add_rows!(
                p,
                acc,
                row,
                stride,
                "add r3, {a}, r2",
                "vldrw.u32 q2, [{a}]\nvldrw.u32 q3, [{a}, #16]\n\
                 vldrw.u32 q4, [r3]\nvldrw.u32 q5, [r3, #16]",
                "vstrw.32 q2, [{a}]\nvstrw.32 q3, [{a}, #16]\n\
                 vstrw.32 q4, [r3]\nvstrw.32 q5, [r3, #16]",
                [
                    ["0", [["r2", "q2"], ["r3", "q4"]]],
                    ["4", [["r2", "q3"], ["r3", "q5"]]]
                ],
                "32",
                "8"
            ),
            3 => add_rows!(
                p,
                acc,
                row,
                stride,
                "add r3, {a}, r2\nadd r4, r3, r2",
                "vldrw.u32 q2, [{a}]\nvldrw.u32 q3, [{a}, #16]\n\
                 vldrw.u32 q4, [r3]\nvldrw.u32 q5, [r3, #16]\n\
                 vldrw.u32 q6, [r4]\nvldrw.u32 q7, [r4, #16]",
                "vstrw.32 q2, [{a}]\nvstrw.32 q3, [{a}, #16]\n\
                 vstrw.32 q4, [r3]\nvstrw.32 q5, [r3, #16]\n\
                 vstrw.32 q6, [r4]\nvstrw.32 q7, [r4, #16]",
                [
                    ["0", [["r2", "q2"], ["r3", "q4"], ["r4", "q6"]]],
                    ["4", [["r2", "q3"], ["r3", "q5"], ["r4", "q7"]]]
                ],
                "32",
                "8"
            ),
            _ => add_rows!(
                p,
                acc,
                row,
                stride,
                "add r3, {a}, r2\nadd r4, r3, r2\nadd r5, r4, r2",
                "vldrw.u32 q2, [{a}]\nvldrw.u32 q3, [r3]\n\
                 vldrw.u32 q4, [r4]\nvldrw.u32 q5, [r5]",
                "vstrw.32 q2, [{a}]\nvstrw.32 q3, [r3]\n\
                 vstrw.32 q4, [r4]\nvstrw.32 q5, [r5]",
                [[
                    "0",
                    [["r2", "q2"], ["r3", "q3"], ["r4", "q4"], ["r5", "q5"]]
                ]],
                "16",
                "4"
            ),
        }
    }
}
