//! Threads on the host (feature `std`): [`matmul_quant`](super::matmul_quant) and
//! [`matmul_f32`](super::matmul_f32) share a matrix's output rows between [`threads`] threads
//! (`std::thread::scope`: the calling thread takes the first share, one new thread each of the
//! others), each writing its rows for every token into a buffer of its own, copied into place
//! after the join. Every output is computed by the same code from the same weight row and
//! activation row as on one thread, so the bits are the same at any thread count.
//!
//! One process-wide count, as [`set_kernels`](super::set_kernels): the forward pass, the engine
//! and the chat sessions need no new argument, and the `no_std` build is unchanged. Matmuls too
//! small to gain from a thread ([`MIN_WORK`] multiply-accumulates a thread) stay on one.

extern crate std;

use core::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::vec;
use std::vec::Vec;

use super::Matrix;

/// Threads per matmul ([`set_threads`]).
static THREADS: AtomicUsize = AtomicUsize::new(1);

/// Multiply-accumulates (weight rows × columns × activation rows) a thread must get before a
/// matmul is split: starting a thread costs tens of microseconds (more on a busy machine, where
/// it waits for a core), about 100 k multiply-accumulates of the AVX2 kernels or more. SmolLM2's
/// decode splits only its LM head (28 M); its layers' matmuls (0.1–0.9 M a token) stay on one
/// thread, since splitting them at 256 k made decode slower on the shared test machine; prefill
/// chunks split every matmul.
pub const MIN_WORK: usize = 1 << 20;

/// Sets the threads each matmul's output rows are shared between, for every thread of the
/// process (1, the default: the calling thread alone; 0 counts as 1). The bits do not depend
/// on it.
pub fn set_threads(n: usize) {
    THREADS.store(n.max(1), Ordering::Relaxed);
}

/// The threads each matmul's output rows are shared between ([`set_threads`]).
pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// Runs `part` over `m`'s rows in [`threads`] shares, each on its own thread (the first on this
/// one): `part(sub, buf)` computes the rows of the sub-matrix `sub` for the `n` activation rows
/// into `buf` (`n × sub.rows`, token-major), which is then copied into `out` (`n × m.rows`).
/// `false` (nothing done) when one thread does it: one share, not enough work for two, or `out`
/// shorter than `n × m.rows`.
pub(super) fn split(
    m: &Matrix<'_>,
    n: usize,
    out: &mut [f32],
    part: &(dyn Fn(&Matrix<'_>, &mut [f32]) + Sync),
) -> bool {
    let work = m.rows.saturating_mul(m.cols).saturating_mul(n);
    let shares = threads().min(work / MIN_WORK).min(m.rows);
    if shares < 2 || out.len() < n * m.rows {
        return false;
    }
    // Shares of whole groups of four rows (the kernels' widest row tile), the remainder spread
    // over the first shares.
    let groups = m.rows.div_ceil(4);
    let bounds: Vec<usize> = (0..=shares)
        .map(|k| (groups * k / shares * 4).min(m.rows))
        .collect();
    let sub = |k: usize| {
        let (o0, o1) = (bounds[k], bounds[k + 1]);
        Matrix {
            data: &m.data[o0 * m.row_bytes..o1 * m.row_bytes],
            rows: o1 - o0,
            ..*m
        }
    };
    let mut bufs: Vec<Vec<f32>> = (0..shares)
        .map(|k| vec![0.0; n * (bounds[k + 1] - bounds[k])])
        .collect();
    thread::scope(|scope| {
        let (first, rest) = bufs.split_at_mut(1);
        for (k, buf) in rest.iter_mut().enumerate() {
            let sub = sub(k + 1);
            scope.spawn(move || part(&sub, buf));
        }
        part(&sub(0), &mut first[0]);
    });
    for (k, buf) in bufs.iter().enumerate() {
        let (o0, len) = (bounds[k], bounds[k + 1] - bounds[k]);
        if len == 0 {
            continue;
        }
        for (t, src) in buf.chunks_exact(len).enumerate() {
            out[t * m.rows + o0..][..len].copy_from_slice(src);
        }
    }
    true
}
