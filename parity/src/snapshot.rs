//! The snapshot flow: a system prompt's KV written as a flash image on one machine (the host, at
//! firmware build time) and restored on another (the board), whose decode steps after it must
//! equal the host's bit for bit — and equal decoding after a cold prefill
//! ([`Case::SnapshotCold`]).

use edgekv::snapshot::{Header, RamFlash, SliceFlash};
use embedded_storage::nor_flash::NorFlash;

use super::{Arenas, Case, Digest, Error, Mode, Src, run_with, tokens};

/// Tokens of the system prompt the image holds (three pages).
pub const SYSTEM_TOKENS: u32 = 48;
/// The system prompt and the 8 tokens decoded after it.
pub const SYSTEM_CHAT: [u32; 56] = tokens(0x5, &[]);
/// The fingerprint images are written and restored with (a namespace of the model's identity).
pub const FINGERPRINT: u64 =
    edgekv::prefix::namespace(&[b"edgekv-parity", b"smollm2-135m-shape", b"q8_0/f16"]);

/// Writes the system prompt's KV (prefilled in chunks, formats of [`Case::SnapshotCold`]) as an
/// image at offset 0 of `flash` and returns its header.
///
/// # Errors
///
/// As [`run`](super::run), plus [`Error::Snapshot`] for the snapshot's flash errors.
pub fn write_image<Fl: NorFlash>(arenas: &mut Arenas<'_>, flash: &mut Fl) -> Result<Header, Error> {
    let mut header = None;
    run_with(Case::SnapshotCold, arenas, &mut |_| {}, |r| {
        let src = Src::Tokens(&SYSTEM_CHAT);
        let s = r.new_seq()?;
        r.prefill(s, 0, 0..SYSTEM_TOKENS, src, Mode::Write)?;
        let prompt = &SYSTEM_CHAT[..SYSTEM_TOKENS as usize];
        header = Some(r.cache.snapshot(s, prompt, FINGERPRINT, flash, 0)?);
        Ok(())
    })?;
    header.ok_or(Error::Unexpected("no header"))
}

/// [`write_image`] into `buf` used as a RAM flash (16-byte writes, 4 KiB sectors): returns the
/// image bytes (`IMAGE_MAX` bytes of `buf` suffice).
///
/// # Errors
///
/// As [`write_image`] ([`FlashBounds`](edgekv::snapshot::SnapshotError::FlashBounds) when `buf`
/// is too short).
pub fn write_image_into<'b>(arenas: &mut Arenas<'_>, buf: &'b mut [u8]) -> Result<&'b [u8], Error> {
    let mut flash = RamFlash::<16, 4096>::new(buf);
    let len = write_image(arenas, &mut flash)?.image as usize;
    Ok(&buf[..len])
}

/// Bytes of flash [`write_image_into`] needs: the image rounded up to whole 4 KiB sectors.
pub const IMAGE_MAX: usize = 60 * 1024;

/// Restores `image` (from [`write_image`]) into a fresh cache, checks its tokens, decodes the 8
/// tokens after the system prompt and returns the digest of their attention outputs (named
/// `snapshot_restored`; its CRC equals [`Case::SnapshotCold`]'s).
///
/// # Errors
///
/// As [`run`](super::run); [`Error::Snapshot`] with the restore's error for a bad image.
pub fn decode_after_image(image: &[u8], arenas: &mut Arenas<'_>) -> Result<Digest, Error> {
    run_with(Case::SnapshotRestored, arenas, &mut |_| {}, |r| {
        let mut prompt = [0u32; SYSTEM_TOKENS as usize];
        let (s, _) = r
            .cache
            .restore(&mut SliceFlash(image), 0, FINGERPRINT, &mut prompt)?;
        if prompt[..] != SYSTEM_CHAT[..SYSTEM_TOKENS as usize] {
            return Err(Error::Unexpected("restored tokens"));
        }
        r.decode(
            s,
            0,
            SYSTEM_TOKENS..SYSTEM_CHAT.len() as u32,
            Src::Tokens(&SYSTEM_CHAT),
        )
    })
}
