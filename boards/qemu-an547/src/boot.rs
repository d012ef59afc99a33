//! The boot descriptor the task runner places at the start of DDR (QEMU's generic loader), and
//! the memory it points at: the GGUF model and the chat script in DDR (standing in for a
//! memory-mapped external flash and a host link), the system prompt's snapshot image in QSPI
//! flash. Everything is checked before a slice is made: a missing or bad descriptor is an error
//! the firmware reports, never a fault.
//!
//! Layout: eight little-endian `u32` words at [`DESCRIPTOR`]: magic `EKVB`, version 1, then
//! address and length in bytes of the model, the script and the image.

/// Where the descriptor is.
pub const DESCRIPTOR: usize = 0x6000_0000;
/// DDR, where the model and the script may be (after the descriptor's 4 KiB).
const DDR: (usize, usize) = (DESCRIPTOR + 0x1000, 0xE000_0000);
/// QSPI flash, where the image may be.
const QSPI: (usize, usize) = (0x2800_0000, 0x2880_0000);
const MAGIC: u32 = u32::from_le_bytes(*b"EKVB");
const VERSION: u32 = 1;

/// What the descriptor points at.
pub struct Boot {
    /// The GGUF file.
    pub model: &'static [u8],
    /// The chat script ([`edgekv_llm::chat::wire`] words).
    pub script: &'static [u32],
    /// The system prompt's snapshot image.
    pub image: &'static [u8],
}

/// Why the descriptor was refused.
#[derive(Debug, Clone, Copy, defmt::Format)]
pub enum BootError {
    /// No descriptor (wrong magic): the firmware was started without the task runner.
    NoDescriptor,
    /// A descriptor of another version.
    Version(u32),
    /// A region (named) outside its memory, empty, or misaligned.
    Region(&'static str),
}

fn word(i: usize) -> u32 {
    // SAFETY: DDR is mapped RAM on mps3-an547 and the descriptor's 32 bytes lie at its start,
    // 4-aligned; nothing in the firmware writes DDR, so the read races nothing.
    unsafe { core::ptr::read_volatile((DESCRIPTOR as *const u32).add(i)) }
}

/// `(addr, len)` from words `i`, `i + 1`, checked to lie inside `window` with `align`.
fn region(
    i: usize,
    window: (usize, usize),
    align: usize,
    name: &'static str,
) -> Result<(usize, usize), BootError> {
    let (addr, len) = (word(i) as usize, word(i + 1) as usize);
    let inside = addr >= window.0 && len > 0 && len <= window.1 - addr;
    if !inside || addr % align != 0 || len % align != 0 {
        return Err(BootError::Region(name));
    }
    Ok((addr, len))
}

/// Reads and checks the descriptor.
pub fn read() -> Result<Boot, BootError> {
    if word(0) != MAGIC {
        return Err(BootError::NoDescriptor);
    }
    if word(1) != VERSION {
        return Err(BootError::Version(word(1)));
    }
    let (model, model_len) = region(2, DDR, 1, "model")?;
    let (script, script_len) = region(4, DDR, 4, "script")?;
    let (image, image_len) = region(6, QSPI, 1, "image")?;
    let overlap = script < model + model_len && model < script + script_len;
    if overlap {
        return Err(BootError::Region("script overlaps model"));
    }
    // SAFETY: each region was checked above to lie inside mapped, readable memory (DDR or the
    // QSPI ROM) that the firmware never writes, so shared `'static` slices of it are sound; the
    // script is 4-aligned and a whole number of words, and any bit pattern is a valid u8 / u32.
    unsafe {
        Ok(Boot {
            model: core::slice::from_raw_parts(model as *const u8, model_len),
            script: core::slice::from_raw_parts(script as *const u32, script_len / 4),
            image: core::slice::from_raw_parts(image as *const u8, image_len),
        })
    }
}
