//! Plain buffers handed to a device: inputs the CPU wrote, outputs the device writes.

use crate::{AddressMap, CacheMaintenance, DevAddr, HalError, line_aligned};

fn check(
    map: &impl AddressMap,
    maint: &impl CacheMaintenance,
    bytes: &[u8],
) -> Result<DevAddr, HalError> {
    let (cpu, len) = (bytes.as_ptr() as usize, bytes.len());
    line_aligned(cpu, len, maint.line_size())?;
    map.to_device(cpu, len)
}

/// An input the CPU wrote (queries, a staging tensor) made visible to the device: checks that
/// `buf` is whole cache lines the device can address, cleans it and returns its device address.
///
/// # Errors
///
/// [`HalError::Misaligned`], the map's errors; nothing is cleaned then.
pub fn device_input<T: bytemuck::Pod>(
    map: &impl AddressMap,
    maint: &mut impl CacheMaintenance,
    buf: &[T],
) -> Result<DevAddr, HalError> {
    let bytes = bytemuck::cast_slice(buf);
    let dev = check(map, maint, bytes)?;
    maint.clean_slice(bytes)?;
    Ok(dev)
}

/// An output buffer handed to the device: cleans and invalidates it first, so no line the CPU
/// dirtied can be written back over the device's data while the device works, and returns its
/// device address. The CPU must not touch `buf` until [`take_output`].
///
/// # Errors
///
/// [`HalError::Misaligned`], the map's errors; nothing is maintained then.
pub fn device_output<T: bytemuck::Pod>(
    map: &impl AddressMap,
    maint: &mut impl CacheMaintenance,
    buf: &mut [T],
) -> Result<DevAddr, HalError> {
    let dev = check(map, maint, bytemuck::cast_slice(buf))?;
    maint.clean_invalidate_slice(bytemuck::cast_slice_mut(buf))?;
    Ok(dev)
}

/// Takes back an output buffer the device finished writing: invalidates it, so the CPU reads
/// the device's bytes.
///
/// # Errors
///
/// [`HalError::Misaligned`]; nothing is invalidated then.
pub fn take_output<T: bytemuck::Pod>(
    maint: &mut impl CacheMaintenance,
    buf: &mut [T],
) -> Result<(), HalError> {
    maint.invalidate_slice(bytemuck::cast_slice_mut(buf))
}
