//! Cache maintenance given by C: a struct of callbacks implementing [`CacheMaintenance`].

use core::ffi::c_void;

use edgekv_hal::{CacheMaintenance, HalError, NoCache, line_aligned};

use super::status::{EKV_ERR_INVALID_LINE_SIZE, EKV_ERR_MAINTENANCE, EKV_ERR_NULL, Fail, Res};

/// A cache-maintenance callback: operate on `[addr, addr + len)`, which is always whole lines of
/// `line_size` (checked before the call). Return 0 on success; anything else stops the view,
/// which then returns `EKV_ERR_MAINTENANCE`.
pub type EkvMaintFn = unsafe extern "C" fn(ctx: *mut c_void, addr: *mut c_void, len: usize) -> i32;

/// Data-cache maintenance for the device views: `clean` before a device reads (write back dirty
/// lines), `invalidate` after a device wrote (discard lines), `clean_invalidate` both. Pass NULL
/// instead of a struct for memory that is not cached (ranges are still checked against 32-byte
/// lines). The callbacks must not call into the library with the same cache (`EKV_ERR_BUSY`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EkvMaintenance {
    /// Passed to every callback.
    pub ctx: *mut c_void,
    /// The data-cache line size in bytes: a nonzero power of two.
    pub line_size: usize,
    /// Writes dirty lines back. Required (an `ekv_maint_fn`).
    pub clean: Option<unsafe extern "C" fn(ctx: *mut c_void, addr: *mut c_void, len: usize) -> i32>,
    /// Discards lines. Required (an `ekv_maint_fn`).
    pub invalidate:
        Option<unsafe extern "C" fn(ctx: *mut c_void, addr: *mut c_void, len: usize) -> i32>,
    /// Writes back then discards lines. Required (an `ekv_maint_fn`).
    pub clean_invalidate:
        Option<unsafe extern "C" fn(ctx: *mut c_void, addr: *mut c_void, len: usize) -> i32>,
}

/// The maintenance a view runs with: C callbacks or none.
pub(crate) enum Maint {
    /// No cache: alignment checks only.
    None(NoCache),
    /// C callbacks; `failed` records a callback's nonzero return.
    C {
        /// The callbacks.
        m: EkvMaintenance,
        /// `(clean, invalidate, clean_invalidate)`, checked non-null.
        fns: [EkvMaintFn; 3],
        /// Set when a callback failed.
        failed: bool,
    },
}

impl Maint {
    /// Checks a C maintenance struct (NULL pointer: no cache).
    pub(crate) fn new(m: Option<&EkvMaintenance>) -> Res<Self> {
        let Some(m) = m else {
            return Ok(Maint::None(NoCache::new()));
        };
        let (Some(c), Some(i), Some(ci)) = (m.clean, m.invalidate, m.clean_invalidate) else {
            return Err(Fail(EKV_ERR_NULL));
        };
        if !m.line_size.is_power_of_two() {
            return Err(Fail(EKV_ERR_INVALID_LINE_SIZE));
        }
        Ok(Maint::C {
            m: *m,
            fns: [c, i, ci],
            failed: false,
        })
    }

    /// The error a failed view returns: `EKV_ERR_MAINTENANCE` if a callback failed, else `e`.
    pub(crate) fn error(&self, e: Fail) -> Fail {
        match self {
            Maint::C { failed: true, .. } => Fail(EKV_ERR_MAINTENANCE),
            _ => e,
        }
    }

    /// Checks the range, then calls callback `which` with the range's address.
    fn call(&mut self, which: usize, ptr: *mut u8, len: usize) -> Result<(), HalError> {
        match self {
            Maint::None(n) => line_aligned(ptr.addr(), len, n.line_size()).map(|_| ()),
            Maint::C { m, fns, failed } => {
                line_aligned(ptr.addr(), len, m.line_size)?;
                let f = fns[which.min(2)];
                // SAFETY: a non-null callback supplied by the caller of the view, who vouches
                // for it and its context (the documented contract of `ekv_maintenance_t`).
                let rc = unsafe { f(m.ctx, ptr.cast(), len) };
                if rc != 0 {
                    *failed = true;
                    // Any error stops the view; `error` turns it into EKV_ERR_MAINTENANCE.
                    return Err(HalError::Unsupported);
                }
                Ok(())
            }
        }
    }
}

impl CacheMaintenance for Maint {
    fn line_size(&self) -> usize {
        match self {
            Maint::None(n) => n.line_size(),
            Maint::C { m, .. } => m.line_size,
        }
    }

    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.call(0, core::ptr::without_provenance_mut(addr), len)
    }

    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.call(1, core::ptr::without_provenance_mut(addr), len)
    }

    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.call(2, core::ptr::without_provenance_mut(addr), len)
    }

    // The slice forms pass pointers with provenance, which a callback may dereference.
    fn clean_slice(&mut self, bytes: &[u8]) -> Result<(), HalError> {
        self.call(0, bytes.as_ptr().cast_mut(), bytes.len())
    }

    fn invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        self.call(1, bytes.as_mut_ptr(), bytes.len())
    }

    fn clean_invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        self.call(2, bytes.as_mut_ptr(), bytes.len())
    }
}
