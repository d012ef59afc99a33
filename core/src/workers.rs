//! [`Workers`]: threads kept between attention calls (`std`), so that splitting one decode step
//! costs a handoff of a few hundred nanoseconds instead of starting and joining threads
//! (~45 µs a call on a Linux SoC, a tenth of an 8k-key decode step).
//!
//! Written here rather than taken from a crate: the gain depends on idle workers that spin for a
//! bounded time before they sleep, so that a call arriving soon after the last one is picked up
//! at once. rayon's pool puts idle workers to sleep and measured no gain on two cores; scoped
//! pools built on channels wake their workers the same way.
//!
//! The one `unsafe` block lets a worker run a closure that borrows the caller's stack: the
//! caller does not return (nor unwind) before every worker has finished with it.

#![allow(unsafe_code)]

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::boxed::Box;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::vec::Vec;

/// A job: called once with each participating thread's index (the caller runs index 0).
type Job = dyn Fn(usize) + Sync;

/// A panic payload carried from a worker back to the caller.
type Panic = Box<dyn core::any::Any + Send>;

/// A team of threads for [`KvCache::attention_workers`](crate::KvCache::attention_workers): `threads − 1`
/// workers started once, plus the calling thread. Between calls a worker spins for
/// [`spin`](Self::with_spin) (100 µs by default) watching for the next call, then sleeps until one
/// comes. A call within the spin finds the workers spinning (a handoff of well under a
/// microsecond); a later one wakes them (the operating system's wake-up, a few microseconds on
/// Linux) — both far cheaper than starting threads. Spinning occupies a core while it lasts:
/// raise it for back-to-back calls, set it to zero to never spin.
///
/// Dropping the team stops and joins its workers.
pub struct Workers {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

/// State shared between the caller and the workers.
struct Shared {
    /// Bumped (under `state`'s lock) once per posted job; spinning workers watch it.
    epoch: AtomicU64,
    /// Participating workers that have not yet finished the current job.
    pending: AtomicUsize,
    /// Set when the team is dropped.
    stop: AtomicBool,
    /// How long an idle worker spins before it sleeps.
    spin: Duration,
    state: Mutex<State>,
    /// Signalled when a job is posted or the team stops, for sleeping workers.
    posted: Condvar,
}

/// The current job, read by workers under the lock.
struct State {
    epoch: u64,
    /// Threads taking part in the current job, the caller included.
    threads: usize,
    /// The current job; only valid while the caller waits in `Workers::run`.
    job: Option<&'static Job>,
    /// Workers asleep on `posted` (the caller signals only when some are).
    sleeping: usize,
    /// The first panic of a worker in the current job.
    panic: Option<Panic>,
}

impl Workers {
    /// A team of `threads` threads in all: `threads − 1` workers are started now (0 and 1 both
    /// mean none: calls run on the calling thread alone).
    ///
    /// # Errors
    ///
    /// The operating system's error if a worker thread cannot be started (those already
    /// started are stopped again).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        Self::with_spin(threads, Duration::from_micros(100))
    }

    /// [`new`](Self::new) with idle workers spinning for `spin` before they sleep
    /// (`Duration::ZERO`: they sleep at once and every call wakes them).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_spin(threads: usize, spin: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            spin,
            state: Mutex::new(State {
                epoch: 0,
                threads: 0,
                job: None,
                sleeping: 0,
                panic: None,
            }),
            posted: Condvar::new(),
        });
        let mut team = Self {
            shared,
            handles: Vec::new(),
        };
        for index in 1..threads.max(1) {
            let shared = Arc::clone(&team.shared);
            let handle = std::thread::Builder::new()
                .name(std::format!("edgekv-worker-{index}"))
                .spawn(move || shared.work(index))?;
            team.handles.push(handle);
        }
        Ok(team)
    }

    /// Threads of the team, the calling thread included.
    pub fn threads(&self) -> usize {
        self.handles.len() + 1
    }

    /// `f(0)` … `f(n − 1)` with `n = threads.clamp(1, self.threads())`: `f(0)` on the calling
    /// thread, the others on workers 1 … n − 1; returns when all have finished. A panic in any
    /// of them is resumed here, after all have finished. The attention calls use it; so can a
    /// caller's own work between them (`edgekv-llm` shares its matmuls' rows this way).
    pub fn run(&mut self, threads: usize, f: &(dyn Fn(usize) + Sync)) {
        let n = threads.clamp(1, self.threads());
        if n == 1 {
            f(0);
            return;
        }
        // SAFETY: the reference is only made `'static` in type. Workers use it only between the
        // post below and their `pending` decrement, and `Wait` does not let this function return
        // or unwind before `pending` is 0; the job is then cleared under the lock, so no worker
        // can see it afterwards.
        let job = unsafe { core::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f) };
        let shared = &*self.shared;
        {
            let mut st = shared.lock();
            st.epoch += 1;
            st.threads = n;
            st.job = Some(job);
            shared.pending.store(n - 1, Ordering::Relaxed);
            shared.epoch.store(st.epoch, Ordering::Release);
            if st.sleeping > 0 {
                shared.posted.notify_all();
            }
        }
        let wait = Wait(shared);
        f(0);
        drop(wait);
        let panic = {
            let mut st = shared.lock();
            st.job = None;
            st.panic.take()
        };
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }
}

impl core::fmt::Debug for Workers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads())
            .field("spin", &self.shared.spin)
            .finish()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        {
            let _st = self.shared.lock();
            self.shared.stop.store(true, Ordering::Release);
            self.shared.posted.notify_all();
        }
        for h in self.handles.drain(..) {
            // A worker catches the job's panics, so it cannot end in one.
            let _ = h.join();
        }
    }
}

/// Waits, also while unwinding, until every participating worker has finished the posted job.
struct Wait<'a>(&'a Shared);

impl Drop for Wait<'_> {
    /// Spins as long as an idle worker does ([`Workers::with_spin`]), then yields between
    /// looks: a share that ends within the spin is seen at once, whereas a yield on a busy
    /// machine may hand the core to another process for a whole time slice.
    fn drop(&mut self) {
        let start = Instant::now();
        let mut spins = 0u32;
        while self.0.pending.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if spins >= 1 << 12 && spins % 256 == 0 && start.elapsed() >= self.0.spin {
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker's loop: wait for a job newer than the last one seen, run its share, repeat.
    fn work(&self, index: usize) {
        let mut seen = 0u64;
        loop {
            if !self.wait_for_job(seen) {
                return;
            }
            // A worker not taking part must not even copy the job's reference: the caller does
            // not wait for it and may free the closure at any time.
            let job = {
                let st = self.lock();
                seen = st.epoch;
                if index >= st.threads {
                    continue;
                }
                st.job
            };
            if let Some(job) = job {
                let run = std::panic::AssertUnwindSafe(|| job(index));
                if let Err(p) = std::panic::catch_unwind(run) {
                    let mut st = self.lock();
                    st.panic.get_or_insert(p);
                }
            }
            self.pending.fetch_sub(1, Ordering::Release);
        }
    }

    /// Spins, then sleeps, until the epoch moves past `seen` (true) or the team stops (false).
    fn wait_for_job(&self, seen: u64) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if self.epoch.load(Ordering::Acquire) != seen {
                return true;
            }
            spins = spins.wrapping_add(1);
            if spins % 256 == 0 && start.elapsed() >= self.spin {
                break;
            }
            core::hint::spin_loop();
        }
        let mut st = self.lock();
        st.sleeping += 1;
        while st.epoch == seen && !self.stop.load(Ordering::Acquire) {
            st = self.posted.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.sleeping -= 1;
        !self.stop.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_index_runs_once_per_call() {
        for spin in [Duration::ZERO, Duration::from_millis(1)] {
            let mut w = Workers::with_spin(3, spin).unwrap();
            assert_eq!(w.threads(), 3);
            for n in [0, 1, 2, 3, 7] {
                let hits: [AtomicU32; 3] = Default::default();
                w.run(n, &|k| {
                    hits[k].fetch_add(1, Ordering::Relaxed);
                });
                let want = n.clamp(1, 3);
                for (k, h) in hits.iter().enumerate() {
                    assert_eq!(
                        h.load(Ordering::Relaxed),
                        u32::from(k < want),
                        "n {n} k {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_team_of_one_runs_on_the_caller() {
        let mut w = Workers::new(0).unwrap();
        assert_eq!(w.threads(), 1);
        let me = std::thread::current().id();
        w.run(4, &|k| {
            assert_eq!(k, 0);
            assert_eq!(std::thread::current().id(), me);
        });
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_after_all_finished() {
        let mut w = Workers::with_spin(2, Duration::ZERO).unwrap();
        let done = AtomicU32::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.run(2, &|k| {
                if k == 1 {
                    panic!("worker");
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 1);
        // The team still works.
        let hits = AtomicU32::new(0);
        w.run(2, &|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_caller_panic_waits_for_the_workers() {
        let mut w = Workers::with_spin(2, Duration::ZERO).unwrap();
        let done = AtomicU32::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.run(2, &|k| {
                if k == 0 {
                    panic!("caller");
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }));
        assert!(r.is_err());
        // `run` unwound only after the worker's share had finished.
        assert_eq!(done.load(Ordering::Relaxed), 1);
    }
}
