//! Threads on the host (feature `std`): [`matmul_quant`](super::matmul_quant) and
//! [`matmul_f32`](super::matmul_f32) share a matrix's output rows between [`threads`] threads,
//! each writing its rows for every token into a buffer of its own, copied into place after all
//! have finished. Every output is computed by the same code from the same weight row and
//! activation row as on one thread, so the bits are the same at any thread count.
//!
//! The threads are a team kept between matmuls ([`edgekv::Workers`], the core's attention
//! team: idle workers spin for 100 µs, then sleep), so a split costs a handoff of about a
//! microsecond rather than starting threads (tens of microseconds, more on a busy machine):
//! decode's small matmuls gain from it too. While one thread of the process uses the team,
//! another's matmuls start scoped threads instead.
//!
//! One process-wide count, as [`set_kernels`](super::set_kernels): the forward pass, the engine
//! and the chat sessions need no new argument, and the `no_std` build is unchanged. Matmuls too
//! small to gain from a thread ([`MIN_WORK`] multiply-accumulates a thread) stay on one.

extern crate std;

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, TryLockError};
use std::thread;
use std::vec;
use std::vec::Vec;

use edgekv::Workers;

use super::Matrix;

/// The team of [`threads`] threads (created at the first split after [`set_threads`]).
static TEAM: Mutex<Option<Workers>> = Mutex::new(None);

/// Threads per matmul ([`set_threads`]).
static THREADS: AtomicUsize = AtomicUsize::new(1);

/// Multiply-accumulates (weight rows × columns × activation rows) a thread must get before a
/// matmul is split: a handoff to the team costs about a microsecond (a few when its workers
/// sleep), some 10 k multiply-accumulates of the AVX2 kernels, and each share's buffer is
/// copied into place. SmolLM2's decode splits every matmul of its layers (0.1–0.9 M a token)
/// and its LM head (28 M).
pub const MIN_WORK: usize = 1 << 16;

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
    {
        // Each share's buffer, taken by the one thread that runs the share.
        let slots: Vec<Mutex<&mut Vec<f32>>> = bufs.iter_mut().map(Mutex::new).collect();
        let share = |k: usize| {
            let mut buf = slots[k].lock().unwrap_or_else(PoisonError::into_inner);
            part(&sub(k), &mut buf[..]);
        };
        run_shares(shares, &share);
    }
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

/// `f` on the team of [`threads`] threads (started, or started again with a new count, here);
/// `None` when another thread holds the team or its threads cannot be started.
pub(crate) fn with_team<R>(f: impl FnOnce(&mut Workers) -> R) -> Option<R> {
    let mut team = match TEAM.try_lock() {
        Ok(team) => team,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let want = threads();
    if team.as_ref().map(Workers::threads) != Some(want) {
        // The old team stops first.
        *team = None;
        *team = Workers::new(want).ok();
    }
    team.as_mut().map(f)
}

/// `share(0)` … `share(shares − 1)`, the first on this thread: on the team when no other thread
/// holds it, else on scoped threads started for this call.
fn run_shares(shares: usize, share: &(dyn Fn(usize) + Sync)) {
    if with_team(|workers| workers.run(shares, share)).is_some() {
        return;
    }
    thread::scope(|scope| {
        for k in 1..shares {
            scope.spawn(move || share(k));
        }
        share(0);
    });
}
