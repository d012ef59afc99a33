//! Helium (M-profile vector extension) integer kernels, in `asm!` (Rust has no MVE intrinsics).

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

/// The end of a group and of a row in the page score loops ([`dot3_page`], [`dot3_page32`]): the
/// group's three sums stored group-major, the next group (`r5` counts them down, label `3`),
/// then the key pointer `r1` on to the next row and the sums' pointer back to its first group
/// (`Dot3Page`'s `advance` and `back`), the next row (`lr` counts them down, label `4`).
macro_rules! dot3_rows_end {
    () => {
        concat!(
            "str r8, [{out}]\n",
            "str r10, [{out}, #64]\n",
            "str r12, [{out}, #128]\n",
            "add {out}, {out}, #192\n",
            "subs r5, r5, #1\n",
            "bne 3b\n",
            "ldr r0, [{pb}, #16]\n",
            "add r1, r1, r0\n",
            "ldr r0, [{pb}, #28]\n",
            "sub {out}, {out}, r0\n",
            "subs lr, lr, #1\n",
            "bne 4b\n",
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

/// [`dot3`] for every group of every row of a page, all in one `asm!` loop nest, sixteen codes a
/// step: head `h`'s sum of row `r`'s group `b` at `out[(3b + h)·CHUNK + r]` (see
/// `page::Dot3Page`).
///
/// # Safety
///
/// `p` as `page::dot3_page` checks it: every count ≥ 1, each query row readable for
/// `steps · 16` codes per group of a row, each of `p.rows` key rows `p.advance` bytes past the
/// previous one's end readable from `k`, `p.rows ≤ CHUNK`, `p.back` as the layout needs, and
/// `out` writable for `3 · CHUNK · p.groups` sums.
#[inline(always)]
pub(super) unsafe fn dot3_page(p: &super::page::Dot3Page, k: *const u8, out: *mut i32) {
    // SAFETY: the caller's contract: the loops read what it names (16 key bytes and 16 halfwords
    // of each query row per step) and store three words per group and row within `out`; `p` is
    // only read.
    // Only the declared registers and the flags are written (accumulators in the even r8, r10,
    // r12 as `VMLADAVA` needs; the loads' bases in the low r1–r4).
    unsafe {
        asm!(
            "4:",
            "ldm {pb}, {{r2, r3, r4}}",
            "ldr r5, [{pb}, #20]",
            "3:",
            "ldr r0, [{pb}, #12]",
            "mov.w r8, #0",
            "mov.w r10, #0",
            "mov.w r12, #0",
            "2:",
            dot3_step!("vmladava"),
            dot3_step!("vmladava"),
            "subs r0, r0, #1",
            "bne 2b",
            dot3_rows_end!(),
            pb = in(reg) p,
            out = inout(reg) out => _,
            inout("lr") p.rows => _,
            inout("r1") k => _,
            out("r0") _,
            out("r2") _,
            out("r3") _,
            out("r4") _,
            out("r5") _,
            out("r8") _,
            out("r10") _,
            out("r12") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(nostack),
        );
    }
}

/// [`dot3_page`] for groups of 32 codes (`p.steps` is 2: ggml's Q8_0 and most int8 pages): each
/// group's 32 codes in one unrolled run, its first eight by `VMLADAV` (no accumulator to clear),
/// 34 instructions per group rather than 42.
///
/// # Safety
///
/// As [`dot3_page`], with `p.steps` = 2.
#[inline(always)]
pub(super) unsafe fn dot3_page32(p: &super::page::Dot3Page, k: *const u8, out: *mut i32) {
    // SAFETY: as `dot3_page`: per group, 32 key bytes and 32 halfwords of each query row read,
    // three words stored within `out`. Only the declared registers and the flags are written.
    unsafe {
        asm!(
            "4:",
            "ldm {pb}, {{r2, r3, r4}}",
            "ldr r5, [{pb}, #20]",
            "3:",
            dot3_step!("vmladav"),
            dot3_step!("vmladava"),
            dot3_step!("vmladava"),
            dot3_step!("vmladava"),
            dot3_rows_end!(),
            pb = in(reg) p,
            out = inout(reg) out => _,
            inout("lr") p.rows => _,
            inout("r1") k => _,
            out("r0") _,
            out("r2") _,
            out("r3") _,
            out("r4") _,
            out("r5") _,
            out("r8") _,
            out("r10") _,
            out("r12") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(nostack),
        );
    }
}

/// Four rows' scores for three heads from their groups' integer sums: for each head `h`
/// (four floats at `out + h·step` bytes), `Σ_b (qs[b][h] · ks_b) · isum[(3b + h)·CHUNK + ρ]` for rows ρ < 4,
/// the groups `b < nb` in order from a zero sum, each step rounded as the scalar form does
/// (products, not fused, then the add); `ks_b` the row's f16 scale of group `b`, gathered from
/// `sc + 2b + 2·offs[ρ]` (`VLDRH.U32` with `offs` in halfwords, `VCVTB.F32.F16`). Vector floats
/// flush subnormals: none arises, since query scales are 2^-67 or more or zero and f16 key scales
/// are normal as f32, so every product and sum is zero or normal (see `numeric::floor`).
///
/// # Safety
///
/// `isum` is valid for reads of the words at `(3b + h)·CHUNK + [0, 4)` for every `b < nb`,
/// `h < 3`, 4-byte aligned; `sc + 2b + 2·offs[ρ]` for reads of a halfword, 2-byte aligned; `qs`
/// for `nb` reads; `out + h·step` for writes of four floats, 4-byte aligned; `nb ≥ 1`.
#[inline(always)]
pub(super) unsafe fn scores3x4(
    isum: *const i32,
    sc: *const u8,
    offs: &[u32; 4],
    qs: *const [f32; 3],
    nb: usize,
    out: *mut f32,
    step: usize,
) {
    // SAFETY: the caller's contract: the loop runs `nb` times, reading four words of each head's
    // sums, four gathered halfwords of scales and three query scales per group; the three stores
    // write each head's four floats. Only the declared registers and the flags are written.
    unsafe {
        asm!(
            "vldrw.u32 q7, [{offs}]",
            "vmov.i32 q0, #0",
            "vmov.i32 q1, #0",
            "vmov.i32 q2, #0",
            "2:",
            "vldrh.u32 q3, [{sc}, q7, uxtw #1]",
            "vcvtb.f32.f16 q3, q3",
            "ldm {qs}!, {{r2, r3, r4}}",
            "vldrw.u32 q4, [{isum}]",
            "vcvt.f32.s32 q4, q4",
            "vmul.f32 q5, q3, r2",
            "vmul.f32 q5, q5, q4",
            "vadd.f32 q0, q0, q5",
            "vldrw.u32 q4, [{isum}, #64]",
            "vcvt.f32.s32 q4, q4",
            "vmul.f32 q5, q3, r3",
            "vmul.f32 q5, q5, q4",
            "vadd.f32 q1, q1, q5",
            "vldrw.u32 q4, [{isum}, #128]",
            "vcvt.f32.s32 q4, q4",
            "vmul.f32 q5, q3, r4",
            "vmul.f32 q5, q5, q4",
            "vadd.f32 q2, q2, q5",
            "add {isum}, {isum}, #192",
            "adds {sc}, {sc}, #2",
            "subs {nb}, {nb}, #1",
            "bne 2b",
            "vstrw.32 q0, [{o}]",
            "add {o}, {o}, {step}",
            "vstrw.32 q1, [{o}]",
            "add {o}, {o}, {step}",
            "vstrw.32 q2, [{o}]",
            offs = in(reg) offs.as_ptr(),
            sc = inout(reg) sc => _,
            qs = inout(reg) qs => _,
            isum = inout(reg) isum => _,
            nb = inout(reg) nb => _,
            o = inout(reg) out => _,
            step = in(reg) step,
            out("r2") _, out("r3") _, out("r4") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(nostack),
        );
    }
}

/// Value weights × scales for three heads, four rows per vector, `blocks` blocks of four rows:
/// block `β`'s `ps[4β + ρ] = [w[4β + ρ]·s, w'[4β + ρ]·s, w''[4β + ρ]·s, _]` for rows ρ < 4,
/// where `w`, `w'`, `w''` are the floats at `w`, `w + step` and `w + 2·step` bytes and `s` the
/// f16 scale gathered from `sc + β·sc_step + 2·offs[ρ]` (`VLDRH.U32`, `VCVTB.F32.F16`); each
/// product rounded as the scalar form's (`kernels::scale_weights`). Vector floats flush
/// subnormals: none arises (weights are 2^-60 or more or zero, f16 scales normal as f32). The
/// fourth float of each row is written, unused.
///
/// # Safety
///
/// `blocks ≥ 1`; for each block `β`, `w + h·step + 16β` (h < 3) valid for reads of four floats,
/// 4-byte aligned; `sc + β·sc_step + 2·offs[ρ]` for reads of a halfword, 2-byte aligned; `ps`
/// for writes of `4·blocks` rows of four floats, 4-byte aligned.
#[inline(always)]
pub(super) unsafe fn weights3x4(
    w: *const f32,
    step: usize,
    sc: *const u8,
    sc_step: usize,
    offs: &[u32; 4],
    ps: *mut [f32; 4],
    blocks: usize,
) {
    // SAFETY: the caller's contract: per block, three four-float loads, four gathered halfwords
    // and the interleaving stores of four rows of four floats. Only the declared registers are
    // written.
    unsafe {
        asm!(
            "vldrw.u32 q7, [{offs}]",
            "add {w1}, {w0}, {step}",
            "add {w2}, {w1}, {step}",
            "dls lr, {blocks}",
            "2:",
            "vldrh.u32 q4, [{sc}, q7, uxtw #1]",
            "vcvtb.f32.f16 q4, q4",
            "vldrw.u32 q0, [{w0}], #16",
            "vldrw.u32 q1, [{w1}], #16",
            "vldrw.u32 q2, [{w2}], #16",
            "vmul.f32 q0, q0, q4",
            "vmul.f32 q1, q1, q4",
            "vmul.f32 q2, q2, q4",
            "vst40.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst41.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst42.32 {{q0, q1, q2, q3}}, [{ps}]",
            "vst43.32 {{q0, q1, q2, q3}}, [{ps}]!",
            "add {sc}, {sc}, {sc_step}",
            "le lr, 2b",
            offs = in(reg) offs.as_ptr(),
            w0 = inout(reg) w => _,
            w1 = out(reg) _,
            w2 = out(reg) _,
            step = in(reg) step,
            sc = inout(reg) sc => _,
            sc_step = in(reg) sc_step,
            ps = inout(reg) ps => _,
            blocks = in(reg) blocks,
            out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(nostack),
        );
    }
}

/// One row of [`add_rows3`]'s loop: its weights × scales `r2`–`r4` (and the unused fourth in
/// `r5`) from `r1`, its eight codes from `r0` widened and converted, six `VMUL` by a core
/// register and six `VADD`, then `r0` a stride on.
macro_rules! value_row {
    () => {
        concat!(
            "ldm r1!, {{r2, r3, r4, r5}}\n",
            "vldrb.s32 q0, [r0]\n",
            "vcvt.f32.s32 q0, q0\n",
            "vmul.f32 q1, q0, r2\n",
            "vadd.f32 q2, q2, q1\n",
            "vmul.f32 q1, q0, r3\n",
            "vadd.f32 q4, q4, q1\n",
            "vmul.f32 q1, q0, r4\n",
            "vadd.f32 q6, q6, q1\n",
            "vldrb.s32 q0, [r0, #4]\n",
            "vcvt.f32.s32 q0, q0\n",
            "vmul.f32 q1, q0, r2\n",
            "vadd.f32 q3, q3, q1\n",
            "vmul.f32 q1, q0, r3\n",
            "vadd.f32 q5, q5, q1\n",
            "vmul.f32 q1, q0, r4\n",
            "vadd.f32 q7, q7, q1\n",
            "add r0, r0, {st}\n",
        )
    };
}

/// What [`add_rows3`] reads (at these offsets): the rows' weights × scales (four floats a row),
/// the number of rows, the bytes from one head's accumulators to the next's, and the blocks of
/// eight lanes (counted down to zero as they are done).
#[repr(C)]
pub(super) struct AddRows3 {
    pub(super) ps: *const [f32; 4],
    pub(super) n: usize,
    pub(super) head: usize,
    pub(super) blocks: usize,
}

// The byte offsets [`add_rows3`]'s `asm!` reads and writes `AddRows3`'s fields at (`LDM` of `ps`
// and `n`, then `#4`, `#8`, `#12`).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(AddRows3, ps) == 0);
    assert!(offset_of!(AddRows3, n) == 4);
    assert!(offset_of!(AddRows3, head) == 8);
    assert!(offset_of!(AddRows3, blocks) == 12);
};

/// `acc[h][l] += ps[ρ][h] · (row_ρ[l] as i8)` for three heads `h` (accumulators `p.head` bytes
/// apart), the lanes `l` of `p.blocks` blocks of eight, and the rows `row_ρ = row + ρ·stride`
/// (ρ < `p.n`) in order: each product rounded, then added (`VMUL`, then `VADD`: unfused, as the
/// portable kernel). A block's six accumulator vectors stay in q2–q7 across the rows, two rows
/// per turn of the low-overhead loop (`WLS`/`LE`); each row costs a pointer step, two widening
/// loads and conversions (`VLDRB.S32`, `VCVT`), one `LDM` of its three weights (and the unused
/// fourth), six `VMUL` by a core register and six `VADD`.
///
/// # Safety
///
/// `p.blocks ≥ 1`; for each block `b < p.blocks`, the eight floats at `acc + 8b + h·p.head/4`
/// (h < 3) are valid for reads and writes, 4-byte aligned; every `row_ρ + 8b` (ρ < `p.n`) is
/// valid for reads of 8 bytes; `p.ps` for reads of `p.n` rows; no other reference to those
/// floats is used meanwhile. `p.blocks` is zero afterwards.
#[inline(always)]
pub(super) unsafe fn add_rows3(p: &mut AddRows3, acc: *mut f32, row: *const u8, stride: usize) {
    // SAFETY: the caller's contract: per block, the accumulators are loaded and stored once and
    // `p.n` rows' weights and codes read; `p.blocks` is counted down in place. Only the declared
    // registers and the flags are written (the row's address in r0, a low register as the
    // widening load needs; its weights in r2–r5, ascending as `LDM` needs).
    unsafe {
        asm!(
            "5:",
            "ldr r2, [{pb}, #8]",
            "add r3, {a}, r2",
            "add r4, r3, r2",
            "vldrw.u32 q2, [{a}]",
            "vldrw.u32 q3, [{a}, #16]",
            "vldrw.u32 q4, [r3]",
            "vldrw.u32 q5, [r3, #16]",
            "vldrw.u32 q6, [r4]",
            "vldrw.u32 q7, [r4, #16]",
            "ldm {pb}, {{r1, r3}}",
            "mov r0, {rb}",
            "lsrs r2, r3, #1",
            "wls lr, r2, 6f",
            "2:",
            value_row!(),
            value_row!(),
            "le lr, 2b",
            "6:",
            "ldr r3, [{pb}, #4]",
            "lsls r3, r3, #31",
            "beq 7f",
            value_row!(),
            "7:",
            "ldr r2, [{pb}, #8]",
            "add r3, {a}, r2",
            "add r4, r3, r2",
            "vstrw.32 q2, [{a}]",
            "vstrw.32 q3, [{a}, #16]",
            "vstrw.32 q4, [r3]",
            "vstrw.32 q5, [r3, #16]",
            "vstrw.32 q6, [r4]",
            "vstrw.32 q7, [r4, #16]",
            "add {a}, {a}, #32",
            "add {rb}, {rb}, #8",
            "ldr r2, [{pb}, #12]",
            "subs r2, r2, #1",
            "str r2, [{pb}, #12]",
            "bne 5b",
            pb = in(reg) p as *mut AddRows3,
            a = inout(reg) acc => _,
            rb = inout(reg) row => _,
            st = in(reg) stride,
            out("r0") _, out("r1") _,
            out("r2") _, out("r3") _, out("r4") _, out("r5") _,
            out("lr") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(nostack),
        );
    }
}
