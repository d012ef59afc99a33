//! C registration of the Ethos-U hooks: `ekv_ethosu_register` routes `ethosu_flush_dcache`,
//! `ethosu_invalidate_dcache` and `ethosu_address_remap` to C callbacks and address maps.

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::ethosu::{self, EthosuTarget, REGIONS, Registration, invalidate_range};
use edgekv_hal::{AddressMap, CacheMaintenance, HalError, expand_to_lines};

use super::maint::{EkvMaintenance, Maint};
use super::map::{EkvAddressMap, Map};
use super::ptr::optional;
use super::status::{EkvStatus, Fail, Res, status};

/// What the Ethos-U hooks route to, for C. The struct (and everything it points to) must stay
/// valid and unchanged while registered: make it `static const`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EkvEthosuHooks {
    /// Cache maintenance; NULL: no data cache (ranges still checked against 32-byte lines).
    pub maint: *const EkvMaintenance,
    /// Whole-cache clean for the driver's `ethosu_flush_dcache(NULL, 0)`; NULL: unsupported
    /// (recorded as `EKV_ERR_UNSUPPORTED`).
    pub clean_all: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    /// Whole-cache clean + invalidate for `ethosu_invalidate_dcache(NULL, 0)`; NULL:
    /// unsupported.
    pub clean_invalidate_all: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    /// Passed to `clean_all` and `clean_invalidate_all`.
    pub ctx: *mut c_void,
    /// The address map of each base-pointer region 0..7 (a zeroed entry is the identity);
    /// other indices (the command stream's -1) use the identity.
    pub regions: [EkvAddressMap; 8],
}

/// The registered C hooks (null: none).
static C_HOOKS: AtomicPtr<EkvEthosuHooks> = AtomicPtr::new(ptr::null_mut());

/// The target that forwards to [`C_HOOKS`].
struct CBridge;

/// The registration of [`CBridge`].
static C_REGISTRATION: Registration = Registration::new(&CBridge);

impl CBridge {
    /// The registered hooks and their checked maintenance.
    fn hooks(&self) -> Result<(&'static EkvEthosuHooks, Maint), HalError> {
        let h = C_HOOKS.load(Ordering::Acquire);
        // SAFETY: C_HOOKS holds null or a pointer `ekv_ethosu_register` checked, whose caller
        // keeps it valid and unchanged while registered.
        let h = unsafe { h.as_ref() }.ok_or(HalError::Unsupported)?;
        // SAFETY: as above (the pointer inside was checked at registration).
        let m = unsafe { optional(h.maint) }.map_err(|_| HalError::Unsupported)?;
        Ok((h, Maint::new(m).map_err(|_| HalError::Unsupported)?))
    }
}

/// Runs a C whole-cache callback.
fn whole(f: Option<unsafe extern "C" fn(*mut c_void)>, ctx: *mut c_void) -> Result<(), HalError> {
    let f = f.ok_or(HalError::Unsupported)?;
    // SAFETY: a callback the registering caller vouches for, with its own context.
    unsafe { f(ctx) };
    Ok(())
}

impl EthosuTarget for CBridge {
    fn flush(&self, range: Option<(usize, usize)>) -> Result<(), HalError> {
        let (h, mut m) = self.hooks()?;
        let Some((addr, bytes)) = range else {
            return whole(h.clean_all, h.ctx);
        };
        let (start, len) = expand_to_lines(addr, bytes, m.line_size())?;
        m.clean(start, len)
    }

    fn invalidate(&self, range: Option<(usize, usize)>) -> Result<(), HalError> {
        let (h, mut m) = self.hooks()?;
        let Some((addr, bytes)) = range else {
            return whole(h.clean_invalidate_all, h.ctx);
        };
        invalidate_range(&mut m, addr, bytes)
    }

    fn remap(&self, address: u64, index: i32) -> Result<u64, HalError> {
        let (h, _) = self.hooks()?;
        let cpu = usize::try_from(address).map_err(|_| HalError::Unmapped)?;
        let region = usize::try_from(index).ok().and_then(|i| h.regions.get(i));
        // SAFETY: the maps were checked at registration and stay valid (caller's obligation).
        let map = unsafe { Map::new(region) }.map_err(|_| HalError::Unmapped)?;
        Ok(map.to_device(cpu, 1)?.0)
    }
}

/// Checks hooks before they are registered.
///
/// # Safety
///
/// As `ekv_ethosu_register`.
unsafe fn check(h: &EkvEthosuHooks) -> Res<()> {
    // SAFETY: forwarded obligation.
    Maint::new(unsafe { optional(h.maint) }?)?;
    for r in &h.regions {
        // SAFETY: forwarded obligation.
        unsafe { Map::new(Some(r)) }?;
    }
    Ok(())
}

/// Routes the Ethos-U driver hooks to `hooks` (checked first: maintenance callbacks non-null
/// with a power-of-two line size, valid maps), or makes them do nothing again for NULL.
///
/// # Safety
///
/// `hooks` is NULL or points to an `ekv_ethosu_hooks_t` that, with everything it points to,
/// stays valid and unchanged until it is replaced or unregistered; its callbacks are safe to
/// call from wherever the driver calls its hooks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_ethosu_register(hooks: *const EkvEthosuHooks) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation.
        let Some(h) = unsafe { optional(hooks) }? else {
            ethosu::unregister();
            C_HOOKS.store(ptr::null_mut(), Ordering::Release);
            return Ok(());
        };
        // SAFETY: forwarded obligation.
        unsafe { check(h) }?;
        C_HOOKS.store(ptr::from_ref(h).cast_mut(), Ordering::Release);
        ethosu::register(&C_REGISTRATION);
        Ok::<(), Fail>(())
    })();
    status(r)
}

/// The status of the most recent failed hook call (`EKV_OK` if none) since the last call, which
/// clears it.
#[unsafe(no_mangle)]
pub extern "C" fn ekv_ethosu_last_error() -> EkvStatus {
    ethosu::take_last_error()
}

const _: () = assert!(REGIONS == 8);
