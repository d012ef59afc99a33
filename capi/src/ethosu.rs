//! Strong definitions of the Arm Ethos-U driver's platform hooks (feature `ethosu`), routed to a
//! registered [`CacheMaintenance`] and per-region [`AddressMap`]s.
//!
//! The Ethos-U core driver (1.0 prototypes) calls, around every inference:
//!
//! ```c
//! void ethosu_flush_dcache(uint32_t *p, size_t bytes);      // before: clean each base region
//! void ethosu_invalidate_dcache(uint32_t *p, size_t bytes); // after: invalidate each region
//! uint64_t ethosu_address_remap(uint64_t address, int index); // CPU → NPU address of region
//! ```
//!
//! The driver defines them weak; linking this crate with the feature replaces them. `p` is an
//! address the driver never dereferences, `p == NULL` means the whole cache, and ranges need not
//! be whole cache lines. So a flush cleans the range expanded to whole lines (cleaning more is
//! harmless), and an invalidate clean-invalidates the partial first and last lines (so no
//! neighbour's dirty bytes are discarded) and invalidates the whole lines between.
//!
//! Register once at start-up with [`register`] (Rust) or `ekv_ethosu_register` (C). Until then,
//! and on any failure, the hooks do nothing (or return the address unchanged) and record the
//! error, which [`take_last_error`] / `ekv_ethosu_last_error` report. Hooks never panic and use
//! only atomic loads and stores (no compare-and-swap), so they work on thumbv6m too.
//!
//! ```
//! use edgekv_capi::ethosu::{EthosuHooks, Registration, register};
//! use edgekv_hal::{DevAddr, NoCache, OffsetMap};
//!
//! // Region 1 (the KV arena, in TCM) is seen by the NPU through an alias.
//! static HOOKS: EthosuHooks<NoCache, OffsetMap> = EthosuHooks::new(NoCache::new())
//!     .with_region(1, match OffsetMap::new(0x2000_0000, 0x1_0000, DevAddr(0x3000_0000)) {
//!         Ok(m) => m,
//!         Err(_) => panic!("bad window"),
//!     });
//! static REG: Registration = Registration::new(&HOOKS);
//! register(&REG);
//! assert_eq!(edgekv_capi::ethosu::remap(0x2000_0040, 1), Ok(0x3000_0040));
//! ```

use core::ptr;
use core::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use crate::{EKV_ERR_NOT_REGISTERED, EKV_OK, EkvStatus};
use edgekv_hal::{AddressMap, CacheMaintenance, HalError, IdentityMap, expand_to_lines};

/// Base-pointer regions of an Ethos-U command stream.
pub const REGIONS: usize = 8;

/// What the hooks call: implemented by [`EthosuHooks`], or by any `Sync` type for another
/// policy.
pub trait EthosuTarget: Sync {
    /// Cleans `[addr, addr + bytes)` (any alignment), or the whole data cache for `None`.
    ///
    /// # Errors
    ///
    /// Whatever the maintenance reports; [`HalError::Unsupported`] for a whole-cache request
    /// the target cannot do.
    fn flush(&self, range: Option<(usize, usize)>) -> Result<(), HalError>;

    /// Invalidates `[addr, addr + bytes)` (any alignment) without losing bytes outside it, or
    /// clean-invalidates the whole data cache for `None`.
    ///
    /// # Errors
    ///
    /// As [`flush`](Self::flush).
    fn invalidate(&self, range: Option<(usize, usize)>) -> Result<(), HalError>;

    /// The NPU address of CPU address `address` in base region `index` (−1: command stream).
    ///
    /// # Errors
    ///
    /// The map's errors.
    fn remap(&self, address: u64, index: i32) -> Result<u64, HalError>;
}

/// The stock target: a cache maintenance (cloned for each call, since hooks may run on several
/// threads and maintenance methods take `&mut self`), one address map per base region (`None`:
/// identity), and optional whole-cache operations.
pub struct EthosuHooks<M, A> {
    maint: M,
    regions: [Option<A>; REGIONS],
    clean_all: Option<fn()>,
    clean_invalidate_all: Option<fn()>,
}

impl<M, A: Copy> EthosuHooks<M, A> {
    /// Hooks with this maintenance, identity maps and no whole-cache operations.
    pub const fn new(maint: M) -> Self {
        EthosuHooks {
            maint,
            regions: [None; REGIONS],
            clean_all: None,
            clean_invalidate_all: None,
        }
    }

    /// Maps region `index` (0..8) with `map`; other indices are ignored.
    #[must_use]
    pub const fn with_region(mut self, index: usize, map: A) -> Self {
        if index < REGIONS {
            self.regions[index] = Some(map);
        }
        self
    }

    /// Whole-cache clean and clean-invalidate, for the driver's `NULL` requests (without them
    /// such a request is recorded as [`HalError::Unsupported`]).
    #[must_use]
    pub const fn with_whole_cache(mut self, clean_all: fn(), clean_invalidate_all: fn()) -> Self {
        self.clean_all = Some(clean_all);
        self.clean_invalidate_all = Some(clean_invalidate_all);
        self
    }
}

/// Runs a whole-cache operation if there is one.
fn whole(op: Option<fn()>) -> Result<(), HalError> {
    op.map(|f| f()).ok_or(HalError::Unsupported)
}

/// Invalidates an arbitrary range through `m` without discarding bytes outside it: partial
/// edge lines are cleaned and invalidated, whole lines between are invalidated.
pub fn invalidate_range(
    m: &mut impl CacheMaintenance,
    addr: usize,
    bytes: usize,
) -> Result<(), HalError> {
    let line = m.line_size();
    let (start, len) = expand_to_lines(addr, bytes, line)?;
    if len == 0 {
        return Ok(());
    }
    let end = start + len; // checked by expand_to_lines
    let head = if addr != start { line } else { 0 };
    let tail_partial = addr + bytes != end;
    if len == line && (head != 0 || tail_partial) {
        // One line, partly outside the range.
        return m.clean_invalidate(start, len);
    }
    let tail = if tail_partial { line } else { 0 };
    if head != 0 {
        m.clean_invalidate(start, line)?;
    }
    m.invalidate(start + head, len - head - tail)?;
    if tail != 0 {
        m.clean_invalidate(end - line, line)?;
    }
    Ok(())
}

impl<M, A> EthosuTarget for EthosuHooks<M, A>
where
    M: CacheMaintenance + Clone + Sync,
    A: AddressMap + Sync,
{
    fn flush(&self, range: Option<(usize, usize)>) -> Result<(), HalError> {
        let Some((addr, bytes)) = range else {
            return whole(self.clean_all);
        };
        let mut m = self.maint.clone();
        let (start, len) = expand_to_lines(addr, bytes, m.line_size())?;
        m.clean(start, len)
    }

    fn invalidate(&self, range: Option<(usize, usize)>) -> Result<(), HalError> {
        let Some((addr, bytes)) = range else {
            return whole(self.clean_invalidate_all);
        };
        invalidate_range(&mut self.maint.clone(), addr, bytes)
    }

    fn remap(&self, address: u64, index: i32) -> Result<u64, HalError> {
        let cpu = usize::try_from(address).map_err(|_| HalError::Unmapped)?;
        let map = usize::try_from(index)
            .ok()
            .and_then(|i| self.regions.get(i))
            .and_then(Option::as_ref);
        let dev = match map {
            Some(m) => m.to_device(cpu, 1)?,
            None => IdentityMap.to_device(cpu, 1)?,
        };
        Ok(dev.0)
    }
}

/// A registered target: a `'static` value the hooks find through one atomic pointer.
pub struct Registration {
    target: &'static dyn EthosuTarget,
}

impl Registration {
    /// Wraps a target (usable in a `static`).
    pub const fn new(target: &'static dyn EthosuTarget) -> Self {
        Registration { target }
    }
}

static REGISTERED: AtomicPtr<Registration> = AtomicPtr::new(ptr::null_mut());
static LAST_ERROR: AtomicI32 = AtomicI32::new(EKV_OK);

/// Routes the hooks to `registration` (replacing any earlier one).
pub fn register(registration: &'static Registration) {
    REGISTERED.store(ptr::from_ref(registration).cast_mut(), Ordering::Release);
}

/// Makes the hooks do nothing again (each call records `EKV_ERR_NOT_REGISTERED`).
pub fn unregister() {
    REGISTERED.store(ptr::null_mut(), Ordering::Release);
}

/// The status of the most recent failed hook call (`EKV_OK` if none) since the last call of
/// this function, which clears it.
pub fn take_last_error() -> EkvStatus {
    let e = LAST_ERROR.load(Ordering::Relaxed);
    LAST_ERROR.store(EKV_OK, Ordering::Relaxed);
    e
}

/// Runs `f` on the registered target, recording a failure.
fn with_target<T>(f: impl FnOnce(&dyn EthosuTarget) -> Result<T, HalError>) -> Option<T> {
    let reg = REGISTERED.load(Ordering::Acquire);
    // SAFETY: REGISTERED only ever holds null or a pointer made from a `&'static Registration`.
    let Some(reg) = (unsafe { reg.as_ref() }) else {
        LAST_ERROR.store(EKV_ERR_NOT_REGISTERED, Ordering::Relaxed);
        return None;
    };
    match f(reg.target) {
        Ok(v) => Some(v),
        Err(e) => {
            LAST_ERROR.store(crate::hal_status(e), Ordering::Relaxed);
            None
        }
    }
}

/// What `ethosu_flush_dcache(p, bytes)` does, callable from Rust (`p == 0`: whole cache).
///
/// # Errors
///
/// As [`EthosuTarget::flush`]; `Err(EKV_ERR_NOT_REGISTERED)` without a registration.
pub fn flush(p: usize, bytes: usize) -> Result<(), EkvStatus> {
    let range = (p != 0).then_some((p, bytes));
    with_target(|t| t.flush(range)).ok_or_else(take_last_error)
}

/// What `ethosu_invalidate_dcache(p, bytes)` does (`p == 0`: whole cache).
///
/// # Errors
///
/// As [`flush`].
pub fn invalidate(p: usize, bytes: usize) -> Result<(), EkvStatus> {
    let range = (p != 0).then_some((p, bytes));
    with_target(|t| t.invalidate(range)).ok_or_else(take_last_error)
}

/// What `ethosu_address_remap(address, index)` does.
///
/// # Errors
///
/// As [`flush`].
pub fn remap(address: u64, index: i32) -> Result<u64, EkvStatus> {
    with_target(|t| t.remap(address, index)).ok_or_else(take_last_error)
}

/// Ethos-U driver hook: cleans `[p, p + bytes)` (NULL: the whole cache) before the NPU reads.
/// Failures are recorded (`ekv_ethosu_last_error`), never fatal.
#[unsafe(no_mangle)]
pub extern "C" fn ethosu_flush_dcache(p: *mut u32, bytes: usize) {
    let range = (!p.is_null()).then_some((p.addr(), bytes));
    let _ = with_target(|t| t.flush(range));
}

/// Ethos-U driver hook: invalidates `[p, p + bytes)` (NULL: the whole cache) after the NPU
/// wrote. Failures are recorded, never fatal.
#[unsafe(no_mangle)]
pub extern "C" fn ethosu_invalidate_dcache(p: *mut u32, bytes: usize) {
    let range = (!p.is_null()).then_some((p.addr(), bytes));
    let _ = with_target(|t| t.invalidate(range));
}

/// Ethos-U driver hook: the NPU address of `address` in base region `index`; on failure the
/// address unchanged (and the failure recorded).
#[unsafe(no_mangle)]
pub extern "C" fn ethosu_address_remap(address: u64, index: core::ffi::c_int) -> u64 {
    with_target(|t| t.remap(address, index)).unwrap_or(address)
}
