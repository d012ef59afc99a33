use super::*;

const TCM: usize = 0x2000_0000;
const NPU: u64 = 0x3000_0000;
const KIB64: usize = 0x1_0000;

fn tcm() -> OffsetMap {
    OffsetMap::new(TCM, KIB64, DevAddr(NPU)).unwrap()
}

// ---- IdentityMap ----

#[test]
fn identity_maps_everything_in_range() {
    assert_eq!(IdentityMap.to_device(0, 0), Ok(DevAddr(0)));
    assert_eq!(
        IdentityMap.to_device(0x2400_0000, 4096),
        Ok(DevAddr(0x2400_0000))
    );
    assert_eq!(
        IdentityMap.to_device(usize::MAX - 10, 10),
        Ok(DevAddr((usize::MAX - 10) as u64))
    );
}

#[test]
fn identity_zero_length_at_top_is_ok() {
    assert_eq!(
        IdentityMap.to_device(usize::MAX, 0),
        Ok(DevAddr(usize::MAX as u64))
    );
}

#[test]
fn identity_overflow() {
    assert_eq!(
        IdentityMap.to_device(usize::MAX, 1),
        Err(HalError::Overflow)
    );
    assert_eq!(
        IdentityMap.to_device(1, usize::MAX),
        Err(HalError::Overflow)
    );
    assert_eq!(
        IdentityMap.to_device(usize::MAX - 10, 11),
        Err(HalError::Overflow)
    );
}

// ---- MapEntry / OffsetMap construction ----

#[test]
fn offset_new_rejects_empty_window() {
    assert_eq!(
        OffsetMap::new(TCM, 0, DevAddr(NPU)),
        Err(HalError::EmptyWindow)
    );
}

#[test]
fn offset_new_rejects_cpu_overflow() {
    assert_eq!(
        OffsetMap::new(usize::MAX, 1, DevAddr(0)),
        Err(HalError::Overflow)
    );
    assert_eq!(
        OffsetMap::new(usize::MAX - 15, 17, DevAddr(0)),
        Err(HalError::Overflow)
    );
}

#[test]
fn offset_new_rejects_dev_overflow() {
    assert_eq!(
        OffsetMap::new(0, 16, DevAddr(u64::MAX - 15)),
        Err(HalError::Overflow)
    );
    assert_eq!(
        OffsetMap::new(0, 1, DevAddr(u64::MAX)),
        Err(HalError::Overflow)
    );
}

#[test]
fn offset_new_accepts_window_ending_at_top() {
    let m = OffsetMap::new(usize::MAX - 15, 15, DevAddr(u64::MAX - 15)).unwrap();
    assert_eq!(m.to_device(usize::MAX - 15, 15), Ok(DevAddr(u64::MAX - 15)));
    assert_eq!(
        m.entry(),
        MapEntry::new(usize::MAX - 15, 15, DevAddr(u64::MAX - 15))
    );
}

#[test]
fn offset_new_is_const() {
    const M: Result<OffsetMap, HalError> = OffsetMap::new(TCM, KIB64, DevAddr(NPU));
    assert_eq!(M, Ok(tcm()));
}

// ---- OffsetMap translation ----

#[test]
fn offset_translates_inside_window() {
    let m = tcm();
    assert_eq!(m.to_device(TCM, KIB64), Ok(DevAddr(NPU)));
    assert_eq!(m.to_device(TCM + 0x100, 64), Ok(DevAddr(NPU + 0x100)));
    assert_eq!(
        m.to_device(TCM + KIB64 - 1, 1),
        Ok(DevAddr(NPU + KIB64 as u64 - 1))
    );
}

#[test]
fn offset_device_below_cpu() {
    let m = OffsetMap::new(0x3000_0000, 0x100, DevAddr(0x10)).unwrap();
    assert_eq!(m.to_device(0x3000_0080, 0x80), Ok(DevAddr(0x90)));
}

#[test]
fn offset_outside_window_is_unmapped() {
    let m = tcm();
    assert_eq!(m.to_device(TCM - 1, 1), Err(HalError::Unmapped));
    assert_eq!(m.to_device(TCM - 1, 2), Err(HalError::Unmapped));
    assert_eq!(m.to_device(TCM + KIB64, 1), Err(HalError::Unmapped));
    assert_eq!(m.to_device(TCM + KIB64 - 1, 2), Err(HalError::Unmapped));
    assert_eq!(m.to_device(TCM, KIB64 + 1), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0, 16), Err(HalError::Unmapped));
}

#[test]
fn offset_zero_length() {
    let m = tcm();
    assert_eq!(m.to_device(TCM, 0), Ok(DevAddr(NPU)));
    assert_eq!(
        m.to_device(TCM + KIB64 - 1, 0),
        Ok(DevAddr(NPU + KIB64 as u64 - 1))
    );
    // One-past-the-end is not a mapped byte.
    assert_eq!(m.to_device(TCM + KIB64, 0), Err(HalError::Unmapped));
    assert_eq!(m.to_device(TCM - 1, 0), Err(HalError::Unmapped));
}

#[test]
fn offset_overflow() {
    let m = tcm();
    assert_eq!(m.to_device(usize::MAX, 1), Err(HalError::Overflow));
    assert_eq!(m.to_device(TCM, usize::MAX), Err(HalError::Overflow));
}

#[test]
fn through_reference() {
    fn by_value<M: AddressMap>(m: M) -> Result<DevAddr, HalError> {
        m.to_device(TCM, 4)
    }
    let m = tcm();
    let r: &dyn AddressMap = &m;
    // `&dyn AddressMap` is itself an `AddressMap` via the blanket impl.
    assert_eq!(by_value(r), Ok(DevAddr(NPU)));
    assert_eq!(
        by_value(r).and(r.to_device(TCM - 1, 1)),
        Err(HalError::Unmapped)
    );
}

// ---- TableMap construction ----

const ITCM: MapEntry = MapEntry::new(0x0000_0000, 0x8_0000, DevAddr(0x1000_0000));
const DTCM: MapEntry = MapEntry::new(0x2000_0000, 0x8_0000, DevAddr(0x3000_0000));

#[test]
fn table_empty_maps_nothing() {
    let entries = [];
    let m = TableMap::new(&entries).unwrap();
    assert!(m.entries().is_empty());
    assert_eq!(m.to_device(0, 0), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x2000_0000, 4), Err(HalError::Unmapped));
    assert_eq!(m.to_device(usize::MAX, 1), Err(HalError::Overflow));
}

#[test]
fn table_rejects_bad_entries() {
    let empty = [ITCM, MapEntry::new(0x4000_0000, 0, DevAddr(0))];
    assert_eq!(TableMap::new(&empty), Err(HalError::EmptyWindow));
    let cpu_ovf = [MapEntry::new(usize::MAX - 3, 4, DevAddr(0)), ITCM];
    assert_eq!(TableMap::new(&cpu_ovf), Err(HalError::Overflow));
    let dev_ovf = [DTCM, MapEntry::new(0x4000_0000, 2, DevAddr(u64::MAX))];
    assert_eq!(TableMap::new(&dev_ovf), Err(HalError::Overflow));
}

#[test]
fn table_rejects_overlap() {
    // Partial overlap, either order.
    let a = MapEntry::new(0x1000, 0x100, DevAddr(0));
    let b = MapEntry::new(0x10ff, 0x100, DevAddr(0x8000));
    assert_eq!(TableMap::new(&[a, b]), Err(HalError::Overlap));
    assert_eq!(TableMap::new(&[b, a]), Err(HalError::Overlap));
    // Containment and duplicates.
    let inner = MapEntry::new(0x1010, 0x10, DevAddr(0x9000));
    assert_eq!(TableMap::new(&[a, inner]), Err(HalError::Overlap));
    assert_eq!(TableMap::new(&[inner, a]), Err(HalError::Overlap));
    assert_eq!(TableMap::new(&[a, a]), Err(HalError::Overlap));
    // Not adjacent pair: overlap between first and last.
    assert_eq!(TableMap::new(&[a, DTCM, inner]), Err(HalError::Overlap));
}

#[test]
fn table_accepts_adjacent_and_device_aliases() {
    let a = MapEntry::new(0x1000, 0x100, DevAddr(0x5000));
    let b = MapEntry::new(0x1100, 0x100, DevAddr(0x5000)); // same device bytes
    let entries = [b, a];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x1000, 0x10), Ok(DevAddr(0x5000)));
    assert_eq!(m.to_device(0x1100, 0x10), Ok(DevAddr(0x5000)));
    assert_eq!(m.entries(), &[b, a]);
}

#[test]
fn table_new_is_const() {
    static ENTRIES: [MapEntry; 2] = [ITCM, DTCM];
    static MAP: TableMap<'static> = match TableMap::new(&ENTRIES) {
        Ok(m) => m,
        Err(_) => panic!("invalid table"),
    };
    assert_eq!(MAP.to_device(0x40, 4), Ok(DevAddr(0x1000_0040)));
}

// ---- TableMap translation ----

#[test]
fn table_translates_each_window() {
    let entries = [DTCM, ITCM];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x0000_0100, 0x100), Ok(DevAddr(0x1000_0100)));
    assert_eq!(m.to_device(0x2007_ff00, 0x100), Ok(DevAddr(0x3007_ff00)));
    assert_eq!(m.to_device(0x2000_0000, 0), Ok(DevAddr(0x3000_0000)));
}

#[test]
fn table_outside_windows_is_unmapped() {
    let entries = [ITCM, DTCM];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x1000_0000, 4), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x0007_fffc, 8), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x1fff_fffc, 8), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x2008_0000, 0), Err(HalError::Unmapped));
    assert_eq!(m.to_device(usize::MAX - 4, 4), Err(HalError::Unmapped));
}

#[test]
fn table_overflow() {
    let entries = [ITCM, DTCM];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(
        m.to_device(0x2000_0000, usize::MAX),
        Err(HalError::Overflow)
    );
    assert_eq!(m.to_device(usize::MAX, 1), Err(HalError::Overflow));
}

#[test]
fn table_straddle_device_discontiguous_is_unmapped() {
    // Adjacent in CPU space, not in device space.
    let a = MapEntry::new(0x1000, 0x100, DevAddr(0x8000));
    let b = MapEntry::new(0x1100, 0x100, DevAddr(0x4000));
    let entries = [a, b];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x10f0, 0x10), Ok(DevAddr(0x80f0)));
    assert_eq!(m.to_device(0x1100, 0x10), Ok(DevAddr(0x4000)));
    assert_eq!(m.to_device(0x10f0, 0x20), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x1000, 0x200), Err(HalError::Unmapped));
    // Zero-length at the boundary: the address belongs to `b`.
    assert_eq!(m.to_device(0x1100, 0), Ok(DevAddr(0x4000)));
}

#[test]
fn table_straddle_device_contiguous_is_mapped() {
    // Three entries contiguous on both sides, given out of order.
    let a = MapEntry::new(0x1000, 0x100, DevAddr(0x8000));
    let b = MapEntry::new(0x1100, 0x100, DevAddr(0x8100));
    let c = MapEntry::new(0x1200, 0x100, DevAddr(0x8200));
    let entries = [c, a, b];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x10f0, 0x20), Ok(DevAddr(0x80f0)));
    assert_eq!(m.to_device(0x1000, 0x300), Ok(DevAddr(0x8000)));
    assert_eq!(m.to_device(0x1000, 0x301), Err(HalError::Unmapped));
    assert_eq!(m.to_device(0x0fff, 0x2), Err(HalError::Unmapped));
}

#[test]
fn table_straddle_gap_is_unmapped() {
    // Contiguous on the device side but with a CPU gap.
    let a = MapEntry::new(0x1000, 0x100, DevAddr(0x8000));
    let b = MapEntry::new(0x1200, 0x100, DevAddr(0x8100));
    let entries = [a, b];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(0x10f0, 0x20), Err(HalError::Unmapped));
}

#[test]
fn table_window_at_top_of_address_space() {
    let a = MapEntry::new(usize::MAX - 0xff, 0xff, DevAddr(0x100));
    let entries = [a];
    let m = TableMap::new(&entries).unwrap();
    assert_eq!(m.to_device(usize::MAX - 0xff, 0xff), Ok(DevAddr(0x100)));
    assert_eq!(m.to_device(usize::MAX - 1, 1), Ok(DevAddr(0x1fe)));
    assert_eq!(m.to_device(usize::MAX - 1, 2), Err(HalError::Overflow));
    assert_eq!(m.to_device(usize::MAX, 0), Err(HalError::Unmapped));
}
