//! Threads on the host (feature `std`): [`matmul_quant`](super::matmul_quant) and
//! [`matmul_f32`](super::matmul_f32) share a matrix's output rows between [`threads`] threads
//! (q, k and v, or gate and up, in one split: [`split`]), in chunks the threads take in turn,
//! largest first, so a thread slowed by a busy core takes fewer; one token's rows are written in
//! place, several tokens' into a kept buffer and copied into place after all have finished. The
//! forward pass's per-token steps (norms, RoPE, the activations' quantization, the gated
//! activation) are shared the same way in a prefill ([`each`]). Every output is computed by the
//! same code from the same inputs as on one thread, so the bits are the same at any thread
//! count.
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
use std::vec::Vec;

use edgekv::Workers;

use super::Matrix;

/// The team of [`threads`] threads (created at the first split after [`set_threads`]).
static TEAM: Mutex<Option<Workers>> = Mutex::new(None);

/// The chunk buffer of [`split`] for several tokens, kept between calls.
static BUFFER: Mutex<Vec<f32>> = Mutex::new(Vec::new());

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

/// Multiply-accumulates of the smallest chunk of a split matmul.
const MIN_CHUNK_WORK: usize = MIN_WORK / 16;

/// One chunk of a split: rows `rows` of matrix `matrix`.
struct Chunk {
    matrix: usize,
    rows: core::ops::Range<usize>,
}

/// Runs `part` over the rows of every matrix of `ms` (they share one input of `n` activation
/// rows) on [`threads`] threads, this one included, in chunks of whole groups of four rows (the
/// kernels' widest row tile) that the threads take in turn, largest first: `part(sub, buf)`
/// computes the rows of the sub-matrix `sub` for the `n` activation rows into `buf`
/// (`n × sub.rows`, token-major). With one activation row, `buf` is the chunk's part of its
/// `outs[i]` itself; with more, it is the chunk's part of a buffer, copied into `outs[i]`
/// (`n × ms[i].rows`) when all chunks are done. One handoff to the team serves all of `ms` (q, k and v; gate and
/// up). `false` (nothing done) when one thread does it: one thread, not enough work for two,
/// or an `outs[i]` shorter than `n × ms[i].rows`.
pub(super) fn split(
    ms: &[&Matrix<'_>],
    n: usize,
    outs: &mut [&mut [f32]],
    part: &(dyn Fn(&Matrix<'_>, &mut [f32]) + Sync),
) -> bool {
    let work = ms.iter().fold(0usize, |w, m| {
        w.saturating_add(m.rows.saturating_mul(m.cols).saturating_mul(n))
    });
    let groups: usize = ms.iter().map(|m| m.rows.div_ceil(4)).sum();
    let shares = threads().min(work / MIN_WORK).min(groups);
    if shares < 2
        || ms.len() != outs.len()
        || ms
            .iter()
            .zip(outs.iter())
            .any(|(m, o)| o.len() < n * m.rows)
    {
        return false;
    }
    // Guided chunks: each a `2 · shares`-th of the rows left (at least `MIN_CHUNK_WORK`), taken
    // by the threads in turn from a shared counter. A thread that runs slower (a busy core, a
    // colder cache) takes fewer, and the last chunks are small, so the threads finish close
    // together, where fixed shares wait for the slowest. Chunks do not cross matrices.
    let group_work = (4 * ms[0].cols * n).max(1);
    let min_groups = MIN_CHUNK_WORK.div_ceil(group_work).max(1);
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut left = groups;
    for (i, m) in ms.iter().enumerate() {
        let mut g0 = 0;
        let g = m.rows.div_ceil(4);
        while g0 < g {
            let size = left.div_ceil(2 * shares).max(min_groups).min(g - g0);
            chunks.push(Chunk {
                matrix: i,
                rows: g0 * 4..((g0 + size) * 4).min(m.rows),
            });
            g0 += size;
            left -= size;
        }
    }
    let sub = |c: &Chunk| {
        let m = ms[c.matrix];
        Matrix {
            data: &m.data[c.rows.start * m.row_bytes..c.rows.end * m.row_bytes],
            rows: c.rows.len(),
            ..*m
        }
    };
    // Several tokens' rows go to a buffer laid out chunk by chunk, kept between calls (a fresh
    // one of this size costs the kernel's page clearing on every call).
    let mut kept = match BUFFER.try_lock() {
        Ok(b) => Some(b),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    let mut own = Vec::new();
    let buf: &mut Vec<f32> = kept.as_deref_mut().unwrap_or(&mut own);
    if n > 1 {
        buf.clear();
        buf.resize(n * ms.iter().map(|m| m.rows).sum::<usize>(), 0.0);
    }
    {
        // Each chunk's output, taken by the one thread that runs the chunk.
        let mut slots: Vec<Mutex<&mut [f32]>> = Vec::with_capacity(chunks.len());
        if n == 1 {
            let mut rests: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
            for c in &chunks {
                let rest = core::mem::take(&mut rests[c.matrix]);
                let (slot, tail) = rest.split_at_mut(c.rows.len());
                slots.push(Mutex::new(slot));
                rests[c.matrix] = tail;
            }
        } else {
            let mut rest = &mut buf[..];
            for c in &chunks {
                let (slot, tail) = core::mem::take(&mut rest).split_at_mut(n * c.rows.len());
                slots.push(Mutex::new(slot));
                rest = tail;
            }
        }
        let next = AtomicUsize::new(0);
        let share = |_: usize| loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let (Some(c), Some(slot)) = (chunks.get(k), slots.get(k)) else {
                break;
            };
            let mut out = slot.lock().unwrap_or_else(PoisonError::into_inner);
            part(&sub(c), &mut out[..]);
        };
        run_shares(shares, &share);
    }
    if n > 1 {
        let mut at = 0;
        for c in &chunks {
            let (rows, len) = (ms[c.matrix].rows, c.rows.len());
            let src = &buf[at..at + n * len];
            for (t, src) in src.chunks_exact(len.max(1)).enumerate() {
                outs[c.matrix][t * rows + c.rows.start..][..len].copy_from_slice(src);
            }
            at += n * len;
        }
    }
    true
}

/// `f` on every item of `items`, the items taken in turn by [`threads`] threads (this one
/// included).
pub(crate) fn each<I: Send>(items: impl Iterator<Item = I>, f: &(dyn Fn(I) + Sync)) {
    let slots: Vec<Mutex<Option<I>>> = items.map(|i| Mutex::new(Some(i))).collect();
    let shares = threads().min(slots.len());
    let next = AtomicUsize::new(0);
    run_shares(shares, &|_| loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = slots.get(k) else {
            break;
        };
        let item = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(item) = item {
            f(item);
        }
    });
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
