//! Address maps given by C: identity, one offset window, or a table of windows.

use edgekv_hal::{AddressMap, DevAddr, HalError, IdentityMap, MapEntry, OffsetMap, TableMap};

use super::ptr::Buf;
use super::status::{EKV_ERR_INVALID_ARGUMENT, Fail, Res};

/// `ekv_address_map_t.kind`: the device sees CPU addresses unchanged (also what NULL means).
pub const EKV_MAP_IDENTITY: u32 = 0;
/// `ekv_address_map_t.kind`: one window, `window`.
pub const EKV_MAP_OFFSET: u32 = 1;
/// `ekv_address_map_t.kind`: a table of `n_entries` windows at `entries`.
pub const EKV_MAP_TABLE: u32 = 2;
/// Most windows an `EKV_MAP_TABLE` map may have.
pub const EKV_MAP_MAX_ENTRIES: usize = 16;

/// One window: `len` bytes at CPU address `cpu_base` appear to the device at `dev_base`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvMapEntry {
    /// First CPU address of the window.
    pub cpu_base: usize,
    /// Bytes in the window (nonzero).
    pub len: usize,
    /// Device address of `cpu_base`.
    pub dev_base: u64,
}

impl EkvMapEntry {
    fn to_rust(self) -> MapEntry {
        MapEntry::new(self.cpu_base, self.len, DevAddr(self.dev_base))
    }
}

/// How a device sees CPU addresses. Windows are validated on every call (nonzero, no overflow,
/// no overlap: `EKV_ERR_EMPTY_WINDOW`, `EKV_ERR_ADDRESS_OVERFLOW`, `EKV_ERR_WINDOW_OVERLAP`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EkvAddressMap {
    /// `EKV_MAP_IDENTITY`, `EKV_MAP_OFFSET` or `EKV_MAP_TABLE`.
    pub kind: u32,
    /// `EKV_MAP_OFFSET`: the window.
    pub window: EkvMapEntry,
    /// `EKV_MAP_TABLE`: the windows (at most `EKV_MAP_MAX_ENTRIES`).
    pub entries: *const EkvMapEntry,
    /// `EKV_MAP_TABLE`: how many.
    pub n_entries: usize,
}

/// A checked C address map, holding table entries by value (no heap).
pub(crate) struct Map {
    kind: u32,
    offset: Option<OffsetMap>,
    table: [MapEntry; EKV_MAP_MAX_ENTRIES],
    n: usize,
}

impl Map {
    /// Checks a C map (NULL: identity) and copies its windows.
    ///
    /// # Safety
    ///
    /// For `EKV_MAP_TABLE`, `entries` is NULL (with 0) or points to `n_entries` readable
    /// entries.
    pub(crate) unsafe fn new(m: Option<&EkvAddressMap>) -> Res<Self> {
        let mut map = Map {
            kind: EKV_MAP_IDENTITY,
            offset: None,
            table: [MapEntry::new(0, 0, DevAddr(0)); EKV_MAP_MAX_ENTRIES],
            n: 0,
        };
        let Some(m) = m else {
            return Ok(map);
        };
        map.kind = m.kind;
        match m.kind {
            EKV_MAP_IDENTITY => {}
            EKV_MAP_OFFSET => map.offset = Some(OffsetMap::from_entry(m.window.to_rust())?),
            EKV_MAP_TABLE => {
                if m.n_entries > EKV_MAP_MAX_ENTRIES {
                    return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
                }
                let entries = Buf::input(m.entries, m.n_entries)?;
                // SAFETY: readable by the caller's obligation; only read, and copied at once.
                for (dst, src) in map.table.iter_mut().zip(unsafe { entries.get() }) {
                    *dst = src.to_rust();
                }
                map.n = m.n_entries;
                TableMap::new(&map.table[..map.n])?;
            }
            _ => return Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
        }
        Ok(map)
    }
}

impl AddressMap for Map {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        match (self.kind, &self.offset) {
            (EKV_MAP_OFFSET, Some(o)) => o.to_device(cpu, len),
            // Validated in `new` (cheap to redo: at most 16 windows); TableMap borrows them.
            (EKV_MAP_TABLE, _) => TableMap::new(&self.table[..self.n])?.to_device(cpu, len),
            _ => IdentityMap.to_device(cpu, len),
        }
    }
}
