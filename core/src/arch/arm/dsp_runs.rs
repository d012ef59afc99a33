//! The Cortex-M4's whole-page score loop for a run of `G` query heads (one to four), in `asm!`:
//! one macro, instantiated per run length ([`page_scores_run`]), from a page's int8 key codes to
//! its scores: per row and key group the run's integer dot products by `SMLAD` (each key word
//! loaded and sign-extended once for the run), then each head's
//! `score += (q_scale · k_scale) · isum` (`VMLA` rounds the product, then adds), from `+0`, in
//! group order: `kernels::int8_scores`'s bits. The query it reads is laid out once per page by
//! [`interleave_run`]. (The value loops: `dsp_values.rs`.)

use core::arch::asm;
use core::mem::offset_of;

/// What [`page_scores_run`] reads (and, for its loop state, writes), at the offsets its `asm!`
/// takes as `const` operands (pinned below). Built by `page_runs::scores`.
#[repr(C)]
pub(super) struct RunScores {
    /// The run's query, group by group: the group's quads interleaved by head (quad `w` of head
    /// `h` at `w·G + h`), then its `G` query scales (f32 bits).
    pub(super) q: *const u32,
    /// The end of `q` (a row's last group ends there).
    pub(super) q_end: *const u32,
    /// Steps of 32 codes per group, less one.
    pub(super) more_steps: usize,
    /// Bytes from a key row's last code to the next row's first.
    pub(super) advance: usize,
    /// Bytes from a row's last scale read to the next row's first.
    pub(super) scale_advance: usize,
    /// Bytes between two heads' scores.
    pub(super) out_stride: usize,
    /// Rows left (at least one).
    pub(super) rows: usize,
    /// The next key scale to read.
    pub(super) scales: *const u8,
    /// Head 0's score of the next row.
    pub(super) out: *mut f32,
}

// The offsets the `asm!` reads and writes (`const` operands of `page_scores_run!`).
const _: () = {
    assert!(offset_of!(RunScores, q) == 0);
    assert!(offset_of!(RunScores, q_end) == 4);
    assert!(offset_of!(RunScores, more_steps) == 8);
    assert!(offset_of!(RunScores, advance) == 12);
    assert!(offset_of!(RunScores, scale_advance) == 16);
    assert!(offset_of!(RunScores, out_stride) == 20);
    assert!(offset_of!(RunScores, rows) == 24);
    assert!(offset_of!(RunScores, scales) == 28);
    assert!(offset_of!(RunScores, out) == 32);
};

/// The `asm!` of [`interleave_run`] for one run length: `$set` the heads' pointers from the
/// first (`{p0}`, a head's bytes `{hs}` apart), `$step` the loads and stores of one quad of each.
macro_rules! interleave_run {
    ($out:expr, $q:expr, $hs:expr, $n:expr; $set:literal, $step:literal, $( $p:ident ),*) => {
        asm!(
            $set,
            "2:",
            $step,
            "subs {n}, {n}, #1",
            "bne 2b",
            o = inout(reg) $out => _,
            p0 = inout(reg) $q => _,
            hs = in(reg) $hs,
            n = inout(reg) $n => _,
            $( $p = out(reg) _, )*
            out("r2") _, out("r3") _, out("r4") _, out("r5") _,
            options(nostack),
        )
    };
}

/// `out[2·(w·G + h) + i] = q[h·hs/4 + 2w + i]` for quads `w < n` (two words, `i < 2`) of `G`
/// heads `h` (one to four) whose codes lie `hs` bytes apart: a group of the query as
/// [`RunScores::q`] lays it out (its scales aside), each quad moved by one `LDRD` and the run's
/// quads stored by one `STM`. `false`, nothing done, for other run lengths.
///
/// # Safety
///
/// `n ≥ 1`; `q + h·hs` (bytes) is 4-byte aligned and valid for reads of `2n` words for each
/// `h < G`; `out` for writes of `2·G·n` words (4-byte aligned).
#[inline(always)]
pub(super) unsafe fn interleave_run<const G: usize>(
    out: *mut u32,
    q: *const u32,
    hs: usize,
    n: usize,
) -> bool {
    // Each arm: the caller's contract; the loop runs `n` times, reading one quad of each head
    // (`LDRD`, aligned) and writing the run's (`STM`). Only the declared registers and the flags
    // are written.
    match G {
        // SAFETY: as above, for one head (a copy: `hs` unused).
        1 => unsafe {
            asm!(
                "2:",
                "ldrd r2, r3, [{p0}], #8",
                "stmia {o}!, {{r2, r3}}",
                "subs {n}, {n}, #1",
                "bne 2b",
                o = inout(reg) out => _,
                p0 = inout(reg) q => _,
                n = inout(reg) n => _,
                out("r2") _, out("r3") _,
                options(nostack),
            )
        },
        // SAFETY: as above, for two heads.
        2 => unsafe {
            interleave_run!(
                out, q, hs, n;
                "add {p1}, {p0}, {hs}",
                "ldrd r2, r3, [{p0}], #8\nldrd r4, r5, [{p1}], #8\nstmia {o}!, {{r2-r5}}",
                p1
            )
        },
        // SAFETY: as above, for three heads (two quads by one `STM`, then the third).
        3 => unsafe {
            interleave_run!(
                out, q, hs, n;
                "add {p1}, {p0}, {hs}\nadd {p2}, {p1}, {hs}",
                "ldrd r2, r3, [{p0}], #8\nldrd r4, r5, [{p1}], #8\nstmia {o}!, {{r2-r5}}\n\
                 ldrd r2, r3, [{p2}], #8\nstmia {o}!, {{r2, r3}}",
                p1, p2
            )
        },
        // SAFETY: as above, for four heads (two quads per `STM`).
        4 => unsafe {
            interleave_run!(
                out, q, hs, n;
                "add {p1}, {p0}, {hs}\nadd {p2}, {p1}, {hs}\nadd {p3}, {p2}, {hs}",
                "ldrd r2, r3, [{p0}], #8\nldrd r4, r5, [{p1}], #8\nstmia {o}!, {{r2-r5}}\n\
                 ldrd r2, r3, [{p2}], #8\nldrd r4, r5, [{p3}], #8\nstmia {o}!, {{r2-r5}}",
                p1, p2, p3
            )
        },
        _ => return false,
    }
    true
}

/// One key word (four codes) against the run's query: its even and odd codes as two pairs
/// (`SXTB16`), then per load (`$load`: the quads of one or two heads) each of its heads'
/// (`$a` its sum, `$qe` and `$qo` its quad's words) two products: `SMUAD` then `SMLAD` for a
/// group's first word (`start`, which starts the sums), two `SMLAD` for the others (`add`).
macro_rules! key_word_run {
    (start; { $( [$load:literal; $( ($a:literal, $qe:literal, $qo:literal) ),+] ),+ }) => {
        concat!(
            "ldr r3, [r0], #4\n",
            "sxtb16 r2, r3\n",
            "sxtb16 r3, r3, ror #8\n",
            $(
                $load, "\n",
                $(
                    "smuad ", $a, ", r2, ", $qe, "\n",
                    "smlad ", $a, ", r3, ", $qo, ", ", $a, "\n",
                )+
            )+
        )
    };
    (add; { $( [$load:literal; $( ($a:literal, $qe:literal, $qo:literal) ),+] ),+ }) => {
        concat!(
            "ldr r3, [r0], #4\n",
            "sxtb16 r2, r3\n",
            "sxtb16 r3, r3, ror #8\n",
            $(
                $load, "\n",
                $(
                    "smlad ", $a, ", r2, ", $qe, ", ", $a, "\n",
                    "smlad ", $a, ", r3, ", $qo, ", ", $a, "\n",
                )+
            )+
        )
    };
}

/// The `asm!` of [`page_scores_run`] for one run length: `$words` the loads and registers of a
/// key word (see [`key_word_run`]); per head `($a, $i, $q, $s)` its integer sum's core register,
/// its sum as a float, its query scale × key scale and its score (S registers); `$to_s` moves
/// the sums to their `$i`, `$qs` is the run's `$q` range; `$zero` zeroes the scores (from
/// `r4`). `r9` (the state) is kept in `s13` while the key words use it where they load into it
/// (`$save`, `$restore`: four heads); `s14` holds `more_steps`, `s15` counts a group's steps.
macro_rules! page_scores_run {
    ($st:expr, $k:expr; $words:tt; $save:literal, $restore:literal, $zero:literal, $to_s:literal, $qs:literal, $( ($a:literal, $i:literal, $q:literal, $s:literal) ),+) => {
        asm!(
            "ldr r4, [r9, #{more_steps}]",
            "vmov s14, r4",
            "ldr r1, [r9, #{q}]",
            "movs r4, #0",
            $zero,
            // A row.
            "2:",
            // A group: its first 32 codes, then the rest 32 at a time.
            "3:",
            $save,
            key_word_run!(start; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            "vmov r4, s14",
            "cmp r4, #0",
            "beq 5f",
            "4:",
            "vmov s15, r4",
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            key_word_run!(add; $words),
            "vmov r4, s15",
            "subs r4, r4, #1",
            "bne 4b",
            "5:",
            // The group's terms: (q_scale · k_scale) · isum, added to each score.
            $to_s,
            $( concat!("vcvt.f32.s32 ", $i, ", ", $i), )+
            $restore,
            "ldr r4, [r9, #{scales}]",
            "ldrh r5, [r4], #2",
            "str r4, [r9, #{scales}]",
            "vmov s8, r5",
            "vcvtb.f32.f16 s8, s8",
            concat!("vldmia r1!, {{", $qs, "}}"),
            $(
                concat!("vmul.f32 ", $q, ", ", $q, ", s8"),
                concat!("vmla.f32 ", $s, ", ", $q, ", ", $i),
            )+
            "ldr r4, [r9, #{q_end}]",
            "cmp r1, r4",
            "bne 3b",
            // The row's scores, then the next row.
            "ldr r4, [r9, #{out}]",
            "adds r5, r4, #4",
            "str r5, [r9, #{out}]",
            "ldr r5, [r9, #{out_stride}]",
            $( concat!("vstr ", $s, ", [r4]"), "add r4, r4, r5", )+
            "ldr r4, [r9, #{advance}]",
            "add r0, r0, r4",
            "ldr r4, [r9, #{scales}]",
            "ldr r5, [r9, #{scale_advance}]",
            "add r4, r4, r5",
            "str r4, [r9, #{scales}]",
            "ldr r1, [r9, #{q}]",
            "movs r4, #0",
            $zero,
            "ldr r4, [r9, #{rows}]",
            "subs r4, r4, #1",
            "str r4, [r9, #{rows}]",
            "bne 2b",
            q = const offset_of!(RunScores, q),
            q_end = const offset_of!(RunScores, q_end),
            more_steps = const offset_of!(RunScores, more_steps),
            advance = const offset_of!(RunScores, advance),
            scale_advance = const offset_of!(RunScores, scale_advance),
            out_stride = const offset_of!(RunScores, out_stride),
            rows = const offset_of!(RunScores, rows),
            scales = const offset_of!(RunScores, scales),
            out = const offset_of!(RunScores, out),
            inout("r9") $st => _,
            inout("r0") $k => _,
            out("r1") _, out("r2") _, out("r3") _, out("r4") _, out("r5") _, out("r8") _,
            out("r10") _, out("r11") _, out("r12") _, out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            options(nostack),
        )
    };
}

/// The scores of `st.rows` int8 key rows from `k` for a run of `G` query heads (one to four): `out[h·out_stride + r]` (in bytes) is head `h`'s score of row `r`, its groups' terms
/// `(q_scale · k_scale) · isum` added to `+0` in order, each isum the exact dot product of the
/// group's codes with the head's (`kernels::int8_scores`'s bits). `false`, nothing done, for
/// other run lengths.
///
/// # Safety
///
/// `st.rows` ≥ 1; `st.q` is 4-byte aligned and readable up to `st.q_end`, which is
/// `groups · (G · (8 + 8 · more_steps) + G)` words on (the query as [`RunScores::q`] lays it
/// out, `groups` ≥ 1); row `r` of `st.rows` (`k` plus `r` times `32 · (1 + more_steps) · groups
/// + advance` bytes) is readable for `32 · (1 + more_steps) · groups` bytes, its `groups` f16
/// scales (from `st.scales`, each row `2 · groups + scale_advance` bytes on) too;
/// `st.out + h·out_stride + 4r` is writable for each head `h < G` and row `r` (4-byte aligned);
/// no other reference to those floats or to `st` is used meanwhile.
#[inline(always)]
pub(super) unsafe fn page_scores_run<const G: usize>(st: &mut RunScores, k: *const u8) -> bool {
    let st: *mut RunScores = st;
    // Each arm: the caller's contract; the loops read what it names (`LDR` of key words, which
    // ARMv7-M allows unaligned; `LDRD`/`LDM` of the aligned quads, `VLDM` of the query scales;
    // `LDRH` of key scales, unaligned allowed) and write the scores and `st`'s fields. Only the
    // declared registers and the flags are written.
    match G {
        // SAFETY: as above, for one head.
        1 => unsafe {
            page_scores_run!(
                st, k;
                { ["ldrd r4, r5, [r1], #8"; ("r10", "r4", "r5")] };
                "", "", "vmov s4, r4",
                "vmov s0, r10", "s9",
                ("r10", "s0", "s9", "s4")
            )
        },
        // SAFETY: as above, for two heads.
        2 => unsafe {
            page_scores_run!(
                st, k;
                { ["ldm r1!, {{r4, r5, r8, lr}}"; ("r10", "r4", "r5"), ("r11", "r8", "lr")] };
                "", "", "vmov s4, s5, r4, r4",
                "vmov s0, s1, r10, r11", "s9-s10",
                ("r10", "s0", "s9", "s4"),
                ("r11", "s1", "s10", "s5")
            )
        },
        // SAFETY: as above, for three heads.
        3 => unsafe {
            page_scores_run!(
                st, k;
                {
                    ["ldm r1!, {{r4, r5, r8, lr}}"; ("r10", "r4", "r5"), ("r11", "r8", "lr")],
                    ["ldrd r4, r5, [r1], #8"; ("r12", "r4", "r5")]
                };
                "", "", "vmov s4, s5, r4, r4\nvmov s6, r4",
                "vmov s0, s1, r10, r11\nvmov s2, r12", "s9-s11",
                ("r10", "s0", "s9", "s4"),
                ("r11", "s1", "s10", "s5"),
                ("r12", "s2", "s11", "s6")
            )
        },
        // SAFETY: as above, for four heads.
        4 => unsafe {
            page_scores_run!(
                st, k;
                {
                    ["ldm r1!, {{r4, r5, r8, r9}}"; ("r10", "r4", "r5"), ("r11", "r8", "r9")],
                    ["ldm r1!, {{r4, r5, r8, r9}}"; ("r12", "r4", "r5"), ("lr", "r8", "r9")]
                };
                "vmov s13, r9", "vmov r9, s13", "vmov s4, s5, r4, r4\nvmov s6, s7, r4, r4",
                "vmov s0, s1, r10, r11\nvmov s2, s3, r12, lr", "s9-s12",
                ("r10", "s0", "s9", "s4"),
                ("r11", "s1", "s10", "s5"),
                ("r12", "s2", "s11", "s6"),
                ("lr", "s3", "s12", "s7")
            )
        },
        _ => return false,
    }
    true
}
