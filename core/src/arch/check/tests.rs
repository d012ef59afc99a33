use std::vec::Vec;

use super::*;
use crate::arch::PageKernels;

/// The portable kernels, but int8 scores of runs of two heads off by one ulp in one lane: what
/// the check must name.
struct Broken;

impl Widen for Broken {
    fn one(h: u16) -> f32 {
        Portable::one(h)
    }
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        Portable::block(b)
    }
}

impl Softmax for Broken {
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES] {
        Portable::reduce8(x)
    }
}

impl PageKernels for Broken {
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G] {
        let mut s = kernels::int8_scores::<Self, G>(q, rows, g);
        if G == 2 {
            s[1][0] = f32::from_bits(s[1][0].to_bits() ^ 1);
        }
        s
    }
}

impl Isa for Broken {}

fn no_arrangement(_: &mut [i16], _: usize) {}

#[test]
fn the_portable_kernels_match_themselves() {
    let mut work = std::vec![0u64; WORK_WORDS];
    let mut bad = Vec::new();
    let sum = run_isa::<Portable>(&mut work, no_arrangement, &mut |m| bad.push(m)).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    // 8 head_dims (32 to 256) × their groups (32 and 64 where they divide the head, the whole
    // head past 64: 1, 2, 2, 3, 2, 3, 2, 3 = 18 shapes) × 4 runs × 3 row counts × 2 kernels,
    // then 12 softmax sums and maxima, 3 exp_rows, reduce8 and two widenings; the portable build
    // has no page kernel: 18 × 4 × 3 × 2 declined.
    assert_eq!(sum.compared, 18 * 4 * 3 * 2 + 12 + 3 + 1 + 2);
    assert_eq!(sum.declined, 18 * 4 * 3 * 2);
    assert_eq!(sum.mismatches, 0);
}

#[test]
fn a_broken_kernel_is_named_with_its_shapes() {
    let mut work = std::vec![0u64; WORK_WORDS];
    let mut bad = Vec::new();
    let sum = run_isa::<Broken>(&mut work, no_arrangement, &mut |m| bad.push(m)).unwrap();
    // Every shape of runs of two, one row count each: 18 shapes × 3 row counts.
    assert_eq!(sum.mismatches, 18 * 3);
    assert_eq!(bad.len(), 18 * 3);
    assert!(
        bad.iter().all(|m| m.kernel == "int8_scores" && m.run == 2),
        "{bad:?}"
    );
    assert!(bad.contains(&Mismatch {
        kernel: "int8_scores",
        run: 2,
        head_dim: 256,
        group: 256,
        rows: 8,
    }));
}

#[test]
fn a_short_workspace_is_refused() {
    let mut work = std::vec![0u64; WORK_WORDS - 1];
    assert_eq!(
        run_isa::<Portable>(&mut work, no_arrangement, &mut |_| {}),
        None
    );
}
