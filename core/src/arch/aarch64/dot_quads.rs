//! The scores of a page's whole quads of int8 rows in groups of 32 (Q8_0's K) for a run of `G`
//! query heads with `SDOT`, in one `asm!` block: `int8::dot_scores4`'s steps, with every
//! pointer, step and constant in a register across the page's quads and groups (as intrinsics,
//! LLVM reloaded pointers and query scales from the stack and rebuilt constants every group).
//! The block is generic in the run length (`.irp` over the heads, `.if` against `G`) and in
//! head_dim (a run-time group count).

use core::arch::aarch64::float32x4_t;
use core::arch::asm;

/// A quad's scores: `[h]` holds head `h`'s scores of the quad's four rows (`G ≤ 4`).
pub(super) type Quad = [float32x4_t; 4];

// The block stores each quad's four score vectors with one `ST1` of 64 bytes, the next quad's
// 64 bytes on.
const _: () = assert!(core::mem::size_of::<Quad>() == 64);

/// The K geometry of the rows [`dot_quads`] reads.
#[derive(Clone, Copy)]
pub(super) struct QuadRows {
    /// Row 0's codes (`hd` a row).
    pub(super) k: *const i8,
    /// Bytes from a row's codes to the next row's.
    pub(super) stride: usize,
    /// Row 0's f16 scales (`hd / 32` a row).
    pub(super) s: *const u8,
    /// Bytes from a row's scales to the next row's.
    pub(super) sstride: usize,
    /// Whole quads of rows to score (at least one).
    pub(super) quads: usize,
}

/// Each whole quad `j` of `rows`' scores for the `G` heads of `qc` (codes laid out by
/// [`arrange_query`](super::arrange_query)) and `qs` (their scales, `hd / 32` a head) into
/// `out[j][h]`, and each head's maximum `max[h]` of them (`FMAXNM`); per group of 32,
/// `score += (q scale · k scale) · (f32)sum`, groups in order from zero (`kernels::int8_scores`'
/// steps; the exact sums as `int8::dot_scores4`: the query's high bytes' `SDOT`s shifted by 8,
/// the low bytes' added, and the keys' sum times 128).
///
/// # Safety
///
/// `hd` a nonzero multiple of 32; `qc` holds `G·hd` codes, `qs` `G·hd/32` scales, `out`
/// `rows.quads` quads; rows `0..4·rows.quads` hold `hd` readable codes and `hd/16` scale bytes
/// at `k` and `s` plus their strides; `1 ≤ G ≤ 4`; only where the CPU has `SDOT`.
#[inline(always)]
pub(super) unsafe fn dot_quads<const G: usize>(
    qc: *const i16,
    qs: *const f32,
    hd: usize,
    rows: QuadRows,
    out: *mut Quad,
    max: &mut [float32x4_t; 4],
) {
    let nb = hd / 32;
    let (qstep, qsstep) = (2 * hd, 4 * nb);
    // The last head's loads step back to the first head's next group.
    let qback = 64usize.wrapping_sub((G - 1) * qstep);
    let qsback = 4usize.wrapping_sub((G - 1) * qsstep);
    let k = rows.k;
    let s = rows.s;
    // SAFETY: the caller's obligations: every load reads within rows `0..4·quads` (each row's
    // `hd` codes 16 at a time, its `nb` scales two bytes at a time, then the pointers step to
    // the next quad's rows), the `G` heads' codes (64 bytes a head and group) and scales, and
    // `ST1` writes quad `j` of `out`; `SDOT` only where the CPU has it. Registers: `v0`–`v3`
    // each head's maximum, `v10`–`v13` its scores, `v20`–`v23` its sums; `v4`–`v7` and
    // `v24`–`v27` a group's two chunks of keys, rows in lanes; `v16`–`v19` a head's group of
    // query bytes; `v8` ones, `v9` the rows' k scales, `v14` the keys' sums, `v29` 128 times
    // them, `v15` the products.
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "movi v8.16b, #1",
            "2:",
            ".irp h, 0, 1, 2, 3",
            ".if \\h < {heads}",
            "movi v1\\h\\().4s, #0",
            ".endif",
            ".endr",
            "mov {b}, {nb}",
            "1:",
            // The group's 32 codes of the quad's rows, rows in lanes (`int8::rows_in_lanes`).
            "ld4r {{v4.4s-v7.4s}}, [{k0}], #16",
            "ld4 {{v4.s-v7.s}}[1], [{k1}], #16",
            "ld4 {{v4.s-v7.s}}[2], [{k2}], #16",
            "ld4 {{v4.s-v7.s}}[3], [{k3}], #16",
            "ld4r {{v24.4s-v27.4s}}, [{k0}], #16",
            "ld4 {{v24.s-v27.s}}[1], [{k1}], #16",
            "ld4 {{v24.s-v27.s}}[2], [{k2}], #16",
            "ld4 {{v24.s-v27.s}}[3], [{k3}], #16",
            "movi v14.4s, #0",
            ".irp x, 4, 5, 6, 7, 24, 25, 26, 27",
            "sdot v14.4s, v\\x\\().16b, v8.16b",
            ".endr",
            "shl v29.4s, v14.4s, #7",
            "ld1 {{v9.h}}[0], [{s0}], #2",
            "ld1 {{v9.h}}[1], [{s1}], #2",
            "ld1 {{v9.h}}[2], [{s2}], #2",
            "ld1 {{v9.h}}[3], [{s3}], #2",
            "fcvtl v9.4s, v9.4h",
            ".irp h, 0, 1, 2, 3",
            ".if \\h < {heads}",
            ".if \\h < {heads} - 1",
            "ld1 {{v16.16b-v19.16b}}, [{q}], {qstep}",
            ".else",
            "ld1 {{v16.16b-v19.16b}}, [{q}], {qback}",
            ".endif",
            "movi v2\\h\\().4s, #0",
            "sdot v2\\h\\().4s, v4.16b, v16.4b[0]",
            "sdot v2\\h\\().4s, v5.16b, v16.4b[1]",
            "sdot v2\\h\\().4s, v6.16b, v16.4b[2]",
            "sdot v2\\h\\().4s, v7.16b, v16.4b[3]",
            "sdot v2\\h\\().4s, v24.16b, v18.4b[0]",
            "sdot v2\\h\\().4s, v25.16b, v18.4b[1]",
            "sdot v2\\h\\().4s, v26.16b, v18.4b[2]",
            "sdot v2\\h\\().4s, v27.16b, v18.4b[3]",
            "shl v2\\h\\().4s, v2\\h\\().4s, #8",
            "sdot v2\\h\\().4s, v4.16b, v17.4b[0]",
            "sdot v2\\h\\().4s, v5.16b, v17.4b[1]",
            "sdot v2\\h\\().4s, v6.16b, v17.4b[2]",
            "sdot v2\\h\\().4s, v7.16b, v17.4b[3]",
            "sdot v2\\h\\().4s, v24.16b, v19.4b[0]",
            "sdot v2\\h\\().4s, v25.16b, v19.4b[1]",
            "sdot v2\\h\\().4s, v26.16b, v19.4b[2]",
            "sdot v2\\h\\().4s, v27.16b, v19.4b[3]",
            "add v2\\h\\().4s, v2\\h\\().4s, v29.4s",
            "scvtf v2\\h\\().4s, v2\\h\\().4s",
            ".if \\h < {heads} - 1",
            "ld1r {{v15.4s}}, [{qs}], {qsstep}",
            ".else",
            "ld1r {{v15.4s}}, [{qs}], {qsback}",
            ".endif",
            "fmul v15.4s, v15.4s, v9.4s",
            "fmul v15.4s, v15.4s, v2\\h\\().4s",
            "fadd v1\\h\\().4s, v1\\h\\().4s, v15.4s",
            ".endif",
            ".endr",
            "subs {b}, {b}, #1",
            "b.ne 1b",
            // The quad's scores and maxima; the pointers to the next quad.
            "st1 {{v10.4s-v13.4s}}, [{out}], #64",
            ".irp h, 0, 1, 2, 3",
            ".if \\h < {heads}",
            "fmaxnm v\\h\\().4s, v\\h\\().4s, v1\\h\\().4s",
            ".endif",
            ".endr",
            "add {k0}, {k0}, {kstep}",
            "add {k1}, {k1}, {kstep}",
            "add {k2}, {k2}, {kstep}",
            "add {k3}, {k3}, {kstep}",
            "add {s0}, {s0}, {sstep}",
            "add {s1}, {s1}, {sstep}",
            "add {s2}, {s2}, {sstep}",
            "add {s3}, {s3}, {sstep}",
            "sub {q}, {q}, {qstep}",
            "sub {qs}, {qs}, {qsstep}",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            heads = const G,
            k0 = inout(reg) k => _,
            k1 = inout(reg) k.wrapping_add(rows.stride) => _,
            k2 = inout(reg) k.wrapping_add(2 * rows.stride) => _,
            k3 = inout(reg) k.wrapping_add(3 * rows.stride) => _,
            s0 = inout(reg) s => _,
            s1 = inout(reg) s.wrapping_add(rows.sstride) => _,
            s2 = inout(reg) s.wrapping_add(2 * rows.sstride) => _,
            s3 = inout(reg) s.wrapping_add(3 * rows.sstride) => _,
            kstep = in(reg) (4 * rows.stride).wrapping_sub(hd),
            sstep = in(reg) (4 * rows.sstride).wrapping_sub(2 * nb),
            q = inout(reg) qc => _,
            qstep = in(reg) qstep,
            qback = in(reg) qback,
            qs = inout(reg) qs => _,
            qsstep = in(reg) qsstep,
            qsback = in(reg) qsback,
            nb = in(reg) nb,
            b = out(reg) _,
            n = inout(reg) rows.quads => _,
            out = inout(reg) out => _,
            inout("v0") max[0],
            inout("v1") max[1],
            inout("v2") max[2],
            inout("v3") max[3],
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v29") _,
            options(nostack),
        );
    }
}
