//! The scores of a page's whole quads of int8 rows in groups of 32 (Q8_0's K) for a run of `G`
//! query heads without `SDOT` (Cortex-A53), in one `asm!` block: `int8::group_sums4`' exact
//! sums (key codes widened to 16 bits, `SMULL` / `SMLAL` into one accumulator per row, then an
//! `ADDP` tree: row `i`'s sum in lane `i`) and `int8::scores4`' float steps, with every pointer
//! and step in a register across the page's quads and groups. Generic in the run length (`.irp`
//! over the heads, `.if` against `G`) and in head_dim (a run-time group count).

use core::arch::asm;

use super::dot_quads::{Quad, QuadRows};

/// One row's exact sums of a group of 32 key codes (`k0`..`k3`: codes 0–7, 8–15, 16–23, 24–31
/// widened) with the query codes in `v4`–`v7`, into accumulator `acc`.
macro_rules! row_sums {
    ($acc:literal, $k0:literal, $k1:literal, $k2:literal, $k3:literal) => {
        concat!(
            "smull v",
            $acc,
            ".4s, v",
            $k0,
            ".4h, v4.4h\n",
            "smlal2 v",
            $acc,
            ".4s, v",
            $k0,
            ".8h, v4.8h\n",
            "smlal v",
            $acc,
            ".4s, v",
            $k1,
            ".4h, v5.4h\n",
            "smlal2 v",
            $acc,
            ".4s, v",
            $k1,
            ".8h, v5.8h\n",
            "smlal v",
            $acc,
            ".4s, v",
            $k2,
            ".4h, v6.4h\n",
            "smlal2 v",
            $acc,
            ".4s, v",
            $k2,
            ".8h, v6.8h\n",
            "smlal v",
            $acc,
            ".4s, v",
            $k3,
            ".4h, v7.4h\n",
            "smlal2 v",
            $acc,
            ".4s, v",
            $k3,
            ".8h, v7.8h\n",
        )
    };
}

/// One row's group of 32 key codes (from `ptr`, which steps on by 32) widened to 16 bits into
/// `k0`..`k3`.
macro_rules! row_keys {
    ($ptr:literal, $k0:literal, $k1:literal, $k2:literal, $k3:literal) => {
        concat!(
            "ld1 {{v4.16b, v5.16b}}, [{",
            $ptr,
            "}], #32\n",
            "sxtl v",
            $k0,
            ".8h, v4.8b\n",
            "sxtl2 v",
            $k1,
            ".8h, v4.16b\n",
            "sxtl v",
            $k2,
            ".8h, v5.8b\n",
            "sxtl2 v",
            $k3,
            ".8h, v5.16b\n",
        )
    };
}

/// Each whole quad `j` of `rows`' scores for the `G` heads of `qc` (codes as they are) and `qs`
/// (their scales, `hd / 32` a head) into `out[j][h]`; per group of 32,
/// `score += (q scale · k scale) · (f32)sum`, groups in order from zero (`kernels::int8_scores`'
/// steps).
///
/// # Safety
///
/// `hd` a nonzero multiple of 32; `qc` holds `G·hd` codes, `qs` `G·hd/32` scales, `out`
/// `rows.quads` quads; rows `0..4·rows.quads` hold `hd` readable codes and `hd/16` scale bytes
/// at `k` and `s` plus their strides; `1 ≤ G ≤ 4`.
#[inline(always)]
pub(super) unsafe fn smlal_quads<const G: usize>(
    qc: *const i16,
    qs: *const f32,
    hd: usize,
    rows: QuadRows,
    out: *mut Quad,
) {
    let nb = hd / 32;
    let (qstep, qsstep) = (2 * hd, 4 * nb);
    // The last head's loads step back to the first head's next group.
    let qback = 64usize.wrapping_sub((G - 1) * qstep);
    let qsback = 4usize.wrapping_sub((G - 1) * qsstep);
    let k = rows.k;
    let s = rows.s;
    // SAFETY: the caller's obligations: every load reads within rows `0..4·quads` (each row's
    // `hd` codes 32 at a time, its `nb` scales two bytes at a time, then the pointers step to
    // the next quad's rows), the `G` heads' codes (64 bytes a head and group) and scales, and
    // `ST1` writes quad `j` of `out`. Registers: `v16`–`v31` the quad's group of keys widened
    // (row `i` in `v16 + 4i`..), `v4`–`v7` a head's group of query codes, `v0`–`v3` the rows'
    // sums, `v10`–`v13` each head's scores, `v8` the rows' k scales, `v9` the products.
    unsafe {
        asm!(
            "2:",
            ".irp h, 0, 1, 2, 3",
            ".if \\h < {heads}",
            "movi v1\\h\\().4s, #0",
            ".endif",
            ".endr",
            "mov {b}, {nb}",
            "1:",
            row_keys!("k0", 16, 17, 18, 19),
            row_keys!("k1", 20, 21, 22, 23),
            row_keys!("k2", 24, 25, 26, 27),
            row_keys!("k3", 28, 29, 30, 31),
            "ld1 {{v8.h}}[0], [{s0}], #2",
            "ld1 {{v8.h}}[1], [{s1}], #2",
            "ld1 {{v8.h}}[2], [{s2}], #2",
            "ld1 {{v8.h}}[3], [{s3}], #2",
            "fcvtl v8.4s, v8.4h",
            ".irp h, 0, 1, 2, 3",
            ".if \\h < {heads}",
            ".if \\h < {heads} - 1",
            "ld1 {{v4.8h-v7.8h}}, [{q}], {qstep}",
            ".else",
            "ld1 {{v4.8h-v7.8h}}, [{q}], {qback}",
            ".endif",
            row_sums!(0, 16, 17, 18, 19),
            row_sums!(1, 20, 21, 22, 23),
            row_sums!(2, 24, 25, 26, 27),
            row_sums!(3, 28, 29, 30, 31),
            "addp v0.4s, v0.4s, v1.4s",
            "addp v2.4s, v2.4s, v3.4s",
            "addp v0.4s, v0.4s, v2.4s",
            "scvtf v0.4s, v0.4s",
            ".if \\h < {heads} - 1",
            "ld1r {{v9.4s}}, [{qs}], {qsstep}",
            ".else",
            "ld1r {{v9.4s}}, [{qs}], {qsback}",
            ".endif",
            "fmul v9.4s, v9.4s, v8.4s",
            "fmul v9.4s, v9.4s, v0.4s",
            "fadd v1\\h\\().4s, v1\\h\\().4s, v9.4s",
            ".endif",
            ".endr",
            "subs {b}, {b}, #1",
            "b.ne 1b",
            // The quad's scores; the pointers to the next quad.
            "st1 {{v10.4s-v13.4s}}, [{out}], #64",
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
            out("v0") _, out("v1") _, out("v2") _, out("v3") _,
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack),
        );
    }
}
