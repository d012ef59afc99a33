//! The kernel check (both kernel builds) on this CPU, the split query codes, and the hook
//! through which `attention::dispatch`'s tests force a build of the page loop.

use core::cell::Cell;
use std::vec::Vec;

use super::Build;

std::thread_local! {
    /// The build this test thread's attention calls take (`None`: this CPU's).
    static FORCED: Cell<Option<Build>> = const { Cell::new(None) };
}

/// The build a test forced on its own thread (other tests' threads are not affected).
pub(super) fn forced() -> Option<Build> {
    FORCED.with(Cell::get)
}

/// Forces this test thread's attention calls to build `b` (`None`: this CPU's).
pub(crate) fn force(b: Option<Build>) {
    FORCED.with(|f| f.set(b));
}

/// The kernel check on this CPU: both kernel builds (`SDOT` where the CPU has it) against the
/// portable kernels, every shape, no mismatch; and the NEON page kernels took every shape the
/// check offers them but for the int8 groups they leave (none of its groups: 32, 64 and whole
/// heads up to 256 are multiples of 16).
#[test]
fn the_kernel_check_passes() {
    let mut work = std::vec![0u64; crate::arch::check::WORK_WORDS];
    let mut bad = Vec::new();
    let sum = crate::arch::check::run(&mut work, &mut |m| bad.push(m)).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(sum.mismatches, 0);
    assert!(sum.compared > 0);
}

/// Split codes put back together give the codes (`Σ q·k = 256·Σ hi·k + Σ (lo − 128)·k +
/// 128·Σ k`).
#[test]
fn split_codes_recombine() {
    let codes: Vec<i16> = (0..64)
        .map(|i| (i * 1031 - 32_767) as i16)
        .chain(
            [i16::MIN + 1, 32_767, -1, 0, 255, 256, -256, 128]
                .into_iter()
                .cycle()
                .take(16),
        )
        .collect();
    let mut split = codes.clone();
    super::split_codes(&mut split);
    let bytes: &[u8] = bytemuck::cast_slice(&split);
    for (c, chunk) in codes.chunks_exact(16).zip(bytes.chunks_exact(32)) {
        for i in 0..16 {
            let (hi, lo) = (chunk[i] as i8 as i32, chunk[16 + i] as i8 as i32);
            assert_eq!(256 * hi + lo + 128, c[i] as i32);
        }
    }
}
