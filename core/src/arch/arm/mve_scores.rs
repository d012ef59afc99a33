//! Helium `asm!` loop nests for the scores of whole pages of int8 rows and a run of `G` query
//! heads (1 to 4) per KV head (`mve_runs.rs` drives them; the values' are `mve_values.rs`'s).
//! Each kernel is one macro, given each run length's registers: the same loop nest for every
//! `G`.
//!
//! Registers: the integer sums take even core registers (`VMLADAV` needs them: r8, r10, r12,
//! r0 for heads 0–3), the widening key load a low base (r1); the scores' four rows per vector
//! keep a head's floats in q0–q3, the key scales in q4 and their offsets in q7.

use core::arch::asm;

/// Rows a kernel call takes at most (a page of the boards' caches), and the sums' stride:
/// head `h`'s sum of row `r`'s group `b` lies at `(G·b + h)·CHUNK + r`, so four rows' sums load
/// as one vector (the `asm!` offsets, `64·h` bytes, are `CHUNK · 4 · h`).
pub(super) const CHUNK: usize = 16;
const _: () = assert!(CHUNK * 4 == 64);

/// What [`page_sums`] reads (at these offsets): the run's query rows (slots past `G` any valid
/// pointer, never read), the 16-code chunks of a group after its first, the bytes from a key
/// row's end to the next row's start, the bytes from the sums' pointer after a row's last group
/// back to the next row's first, the first query row's end, and the key pointer after the last
/// row.
#[repr(C)]
pub(super) struct PageSums {
    pub(super) q: [*const i16; 4],
    pub(super) chunks: usize,
    pub(super) advance: usize,
    pub(super) back: usize,
    pub(super) q_end: *const i16,
    pub(super) k_end: *const u8,
}

// The byte offsets the `asm!` loops read `PageSums`'s fields at (`LDM` of the four query
// pointers, then `#16`…`#32`).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(PageSums, q) == 0);
    assert!(offset_of!(PageSums, chunks) == 16);
    assert!(offset_of!(PageSums, advance) == 20);
    assert!(offset_of!(PageSums, back) == 24);
    assert!(offset_of!(PageSums, q_end) == 28);
    assert!(offset_of!(PageSums, k_end) == 32);
};

/// Eight codes of the run's dot products: the key's eight bytes from `r1` and each head's eight
/// query codes from its pointer (all post-incremented), each head's products summed into its
/// register by `$op` (`vmladav` sets the sum, `vmladava` adds to it).
macro_rules! sums_step {
    ($op:literal, [$([$q:literal, $acc:literal, $off:literal]),+]) => {
        concat!(
            "vldrb.s16 q0, [r1], #8\n",
            $("vldrh.s16 q1, [", $q, "], #16\n", $op, ".s16 ", $acc, ", q0, q1\n",)+
        )
    };
}

/// The end of a group's sums: each head's stored at `64·h` bytes, the pointer on by `$next`
/// (`64·G`).
macro_rules! sums_store {
    ([$([$q:literal, $acc:literal, $off:literal]),+], $next:literal) => {
        concat!(
            $("str ", $acc, ", [{out}, #", $off, "]\n",)+
            "add {out}, {out}, #", $next, "\n",
        )
    };
}

/// The end of a row: the key pointer on to the next row, the sums' pointer back to the next
/// row's first group, the next row unless the key pointer reached `k_end` (label `4`).
macro_rules! sums_row_end {
    () => {
        concat!(
            "ldr r8, [{pb}, #20]\n",
            "add r1, r1, r8\n",
            "ldr r8, [{pb}, #24]\n",
            "sub {out}, {out}, r8\n",
            "ldr r8, [{pb}, #32]\n",
            "cmp r1, r8\n",
            "bne 4b\n",
        )
    };
}

/// One [`page_sums`] loop nest for a run's heads `[query pointer, sum register, store offset]`
/// and the sums' step per group: a group's first 16 codes (its first step `VMLADAV`: no sum to
/// clear), then its further chunks of 16 in a low-overhead loop, the groups counted by the
/// first query pointer, the rows by the key pointer.
macro_rules! sums {
    ($p:expr, $k:expr, $out:expr, $heads:tt, $next:literal) => {
        asm!(
            "4:",
            "ldm {pb}, {{r2, r3, r4, r5}}",
            "3:",
            sums_step!("vmladav", $heads),
            sums_step!("vmladava", $heads),
            "ldr lr, [{pb}, #16]",
            "wls lr, lr, 6f",
            "5:",
            sums_step!("vmladava", $heads),
            sums_step!("vmladava", $heads),
            "le lr, 5b",
            "6:",
            sums_store!($heads, $next),
            "ldr r8, [{pb}, #28]",
            "cmp r2, r8",
            "bne 3b",
            sums_row_end!(),
            pb = in(reg) $p,
            out = inout(reg) $out => _,
            inout("r1") $k => _,
            out("r0") _, out("r2") _, out("r3") _, out("r4") _, out("r5") _,
            out("r8") _, out("r10") _, out("r12") _, out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(nostack),
        )
    };
}

/// Each run length's registers for the sums: `$m!(…, heads, step)`.
macro_rules! for_run {
    ($g:expr, $m:ident, $p:expr, $k:expr, $out:expr) => {
        match $g {
            1 => $m!($p, $k, $out, [["r2", "r8", "0"]], "64"),
            2 => $m!(
                $p,
                $k,
                $out,
                [["r2", "r8", "0"], ["r3", "r10", "64"]],
                "128"
            ),
            3 => $m!(
                $p,
                $k,
                $out,
                [["r2", "r8", "0"], ["r3", "r10", "64"], ["r4", "r12", "128"]],
                "192"
            ),
            _ => $m!(
                $p,
                $k,
                $out,
                [
                    ["r2", "r8", "0"],
                    ["r3", "r10", "64"],
                    ["r4", "r12", "128"],
                    ["r5", "r0", "192"]
                ],
                "256"
            ),
        }
    };
}

/// The integer dot products `Σ q_h[i] · (k[i] as i8)` (exact in `i32`) of a run of `G` heads'
/// query codes with every group of `g` codes (a multiple of 16 up to 256) of every row of a
/// chunk, in one loop nest, eight codes a step (`VLDRB.S16`, then per head `VLDRH.S16` and
/// `VMLADAVA.S16`): head `h`'s sum of row `r`'s group `b` at `out[(G·b + h)·CHUNK + r]`. A
/// group is its first 16 codes, then `p.chunks` further chunks of 16; a row's groups end where
/// the first query pointer reaches `p.q_end`, the rows where the key pointer reaches `p.k_end`.
/// (A copy for groups of 32 alone, unrolled, cost 1.5–3.5 % fewer instructions a decode step:
/// under the 5 % a shape's own loop must buy.)
///
/// # Safety
///
/// `1 ≤ G ≤ 4`; groups of `g = 16·(p.chunks + 1)` codes, at least one a row, and `p.q_end`
/// `p.q[0]` plus `groups · g` codes; rows `r` of the chunk from `k` (while `k + r·stride` is not `p.k_end`, at
/// least one) are `stride = groups · g + p.advance` bytes apart, each readable for `groups · g`
/// bytes; each `p.q[h]` (h < G) readable for `groups · g` codes; `p.back = groups · G · 64 −
/// 4`; `out` writable for the sums of every row (`G · CHUNK · groups` words, rows < CHUNK),
/// 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn page_sums<const G: usize>(p: &PageSums, k: *const u8, out: *mut i32) {
    // SAFETY: the caller's contract: per row and group, `g` key bytes and `g` codes of each of
    // the `G` query rows read, `G` words stored within `out`; `p` is only read. Only the
    // declared registers and the flags are written.
    unsafe { for_run!(G, sums, p, k, out) }
}

/// Four rows' scores of a run's heads from their groups' integer sums (the `scores` of
/// [`scores_x4`]): per group, the four rows' f16 key scales gathered and converted once, then
/// per head its four sums loaded, converted, times the product of its query scale and the key
/// scale, added.
macro_rules! scores_x4 {
    (
        $isum:expr, $sc:expr, $offs:expr, $qs:expr, $nb:expr, $out:expr, $step:expr,
        [$([$acc:literal, $qreg:literal, $off:literal]),+], $next:literal
    ) => {
        asm_all_fpu!(
            "vldrw.u32 q7, [{offs}]",
            concat!($("vmov.i32 ", $acc, ", #0\n",)+),
            "dls lr, {nb}",
            "2:",
            "vldrh.u32 q4, [{sc}, q7, uxtw #1]",
            "vcvtb.f32.f16 q4, q4",
            "ldm {qs}!, {{r2, r3, r4, r5}}",
            concat!($(
                "vldrw.u32 q5, [{isum}, #", $off, "]\n",
                "vcvt.f32.s32 q5, q5\n",
                "vmul.f32 q6, q4, ", $qreg, "\n",
                "vmul.f32 q6, q6, q5\n",
                "vadd.f32 ", $acc, ", ", $acc, ", q6\n",
            )+),
            concat!("add {isum}, {isum}, #", $next),
            "adds {sc}, {sc}, #2",
            "le lr, 2b",
            concat!($("vstrw.32 ", $acc, ", [{o}]\nadd {o}, {o}, {step}\n",)+),
            offs = in(reg) $offs,
            sc = inout(reg) $sc => _,
            qs = inout(reg) $qs => _,
            isum = inout(reg) $isum => _,
            nb = in(reg) $nb,
            o = inout(reg) $out => _,
            step = in(reg) $step,
            out("r2") _, out("r3") _, out("r4") _, out("r5") _, out("lr") _,
        )
    };
}

/// Four rows' scores for a run of `G` heads from their groups' integer sums: for each head `h`
/// (four floats at `out + h·step` bytes), `Σ_b (qs[b][h] · ks_b) · isum[(G·b + h)·CHUNK + ρ]`
/// for rows ρ < 4, the groups `b < nb` in order from a zero sum, each step rounded as the
/// scalar form does (products, not fused, then the add); `ks_b` the row's f16 scale of group
/// `b`, gathered from `sc + 2b + 2·offs[ρ]` (`VLDRH.U32` with `offs` in halfwords,
/// `VCVTB.F32.F16`). Vector floats flush subnormals: none arises, since query scales are 2^-78
/// or more or zero and f16 key scales are normal as f32, so every product and sum is zero or
/// normal (see `numeric::floor`).
///
/// # Safety
///
/// `1 ≤ G ≤ 4`; `isum` is valid for reads of the words at `(G·b + h)·CHUNK + [0, 4)` for every
/// `b < nb`, `h < G`, 4-byte aligned; `sc + 2b + 2·offs[ρ]` for reads of a halfword, 2-byte
/// aligned; `qs` for `nb` reads; `out + h·step` (h < G) for writes of four floats, 4-byte
/// aligned; `nb ≥ 1`.
#[inline(always)]
pub(super) unsafe fn scores_x4<const G: usize>(
    isum: *const i32,
    sc: *const u8,
    offs: &[u32; 4],
    qs: *const [f32; 4],
    nb: usize,
    out: *mut f32,
    step: usize,
) {
    let offs = offs.as_ptr();
    // SAFETY: the caller's contract: the loop runs `nb` times, reading four words of each head's
    // sums, four gathered halfwords of scales and four query scales per group; the stores
    // write each head's four floats. Only the declared registers and the flags are written.
    unsafe {
        match G {
            1 => scores_x4!(isum, sc, offs, qs, nb, out, step, [["q0", "r2", "0"]], "64"),
            2 => scores_x4!(
                isum,
                sc,
                offs,
                qs,
                nb,
                out,
                step,
                [["q0", "r2", "0"], ["q1", "r3", "64"]],
                "128"
            ),
            3 => scores_x4!(
                isum,
                sc,
                offs,
                qs,
                nb,
                out,
                step,
                [["q0", "r2", "0"], ["q1", "r3", "64"], ["q2", "r4", "128"]],
                "192"
            ),
            _ => scores_x4!(
                isum,
                sc,
                offs,
                qs,
                nb,
                out,
                step,
                [
                    ["q0", "r2", "0"],
                    ["q1", "r3", "64"],
                    ["q2", "r4", "128"],
                    ["q3", "r5", "192"]
                ],
                "256"
            ),
        }
    }
}
