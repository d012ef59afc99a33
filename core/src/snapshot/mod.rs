//! KV snapshots: a sequence's tokens and pages as one image in flash, restored bit for bit.
//!
//! The use case: a system prompt's KV computed once (on the host, or on the board) and stored in
//! the board's flash, restored at boot instead of prefilled. Images are written through
//! `embedded-storage`'s [`NorFlash`](embedded_storage::nor_flash::NorFlash) (erase first, then
//! program in `WRITE_SIZE` chunks) and read back through
//! [`ReadNorFlash`](embedded_storage::nor_flash::ReadNorFlash), so SPI and memory-mapped flash
//! both work; [`SliceFlash`] reads an image from a byte slice, [`RamFlash`] is a NOR flash in RAM
//! for hosts and tests. [`SnapshotStore`] keeps images in two or more slots of a flash region
//! with a commit record written last, so that a power cut while an image is written never loses
//! the previous one.
//!
//! # Image layout (version 1, little-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `b"EKVS"` |
//! | 4..6 | version (1) |
//! | 6..8 | header bytes (64) |
//! | 8..16 | fingerprint: the model / namespace the KV belongs to |
//! | 16..24 | layers, kv_heads, head_dim, page_tokens (u16 each) |
//! | 24..32, 32..40 | K and V formats: code (1 f32, 2 f16, 3 bf16, 4 int8, 5 fp8 tile), 0, a, b (u16), flag, 0 |
//! | 40..44 | tokens `n` |
//! | 44..48 | pages `ceil(n / page_tokens)` |
//! | 48..52 | payload bytes |
//! | 52..56 | image bytes (everything, CRC included) |
//! | 56..64 | zero |
//! | 64.. | `n` token ids (u32) |
//! | then | payload: per page, per layer, per pool with scales or values (K values, K scales, V values, V scales): `page_tokens` rows of the pool's row bytes, rows past `n` zero |
//! | last 4 | CRC-32 (ISO-HDLC) of all bytes before it |
//!
//! Version 2 is the same layout, written for images with 4-bit pages (format code 6) or a
//! rotation (the byte after a format's code: 1 Hadamard, 2 signed Hadamard); version 1 images
//! have neither.
//!
//! The image does not depend on the cache's alignment or pool size: a cache with the same shape,
//! formats and page size restores it.
//!
//! # Grouped images (version 3, little-endian)
//!
//! [`GroupedCache::snapshot`](crate::GroupedCache::snapshot) writes a sequence of a cache of
//! several layer groups, or of one group whose window released positions, as a version-3 image
//! ([`GroupedHeader`]); a one-group sequence holding every position is written as above, byte
//! for byte as [`KvCache::snapshot`](crate::KvCache::snapshot) writes it. A windowed group's
//! image holds only the pages the group still held: the sinks' pages and those from its first
//! held position on, so a restored sequence continues exactly where the saved one stood.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `b"EKVS"` |
//! | 4..6 | version (3) |
//! | 6..8 | header bytes: 64 + 48 × groups |
//! | 8..16 | fingerprint |
//! | 16..24 | layers (of the model, every group), kv_heads, head_dim, page_tokens (u16 each) |
//! | 24..26 | layer groups `G` (1 to [`MAX_GROUPS`](crate::MAX_GROUPS)) |
//! | 26..40 | zero |
//! | 40..44 | tokens `n` |
//! | 44..48 | pages stored, summed over the groups |
//! | 48..52 | payload bytes |
//! | 52..56 | image bytes (everything, CRC included) |
//! | 56..64 | zero |
//! | 64.. | `G` group entries of 48 bytes, group 0 first (below) |
//! | then | `n` token ids (u32), of every position (released ones included) |
//! | then | payload: per group, per page it holds (in page-table order), per layer of the group, per pool with scales or values: `page_tokens` rows of the pool's row bytes, rows past `n` zero |
//! | last 4 | CRC-32 (ISO-HDLC) of all bytes before it |
//!
//! A group entry:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | layers: 0 the rest (group 0, the base group; then bytes 2..6 are zero), 1 a run, 2 every `period`-th layer |
//! | 1 | zero |
//! | 2..4, 4..6 | a run's first layer and count, or the period and the first layer (u16 each) |
//! | 6..8 | layers the group holds |
//! | 8..16, 16..24 | the group's K and V formats, as in bytes 24..40 of versions 1 and 2 (code, rotation, a, b, flag, 0) |
//! | 24..28 | window in positions (0: none, every position kept; then sinks and rollback are 0) |
//! | 28..32 | sinks |
//! | 32..36 | rollback positions |
//! | 36..40 | first released position (a page boundary: the end of the sinks' pages) |
//! | 40..44 | first held position after the released ones (a page boundary; equal to the field before when none was released) |
//! | 44..48 | pages stored for the group: `ceil(n / page_tokens)` less the released ones |
//!
//! A reader checks every field against the others (a group entry that contradicts the rest is
//! [`CorruptGroupEntry`](SnapshotError::CorruptGroupEntry): groups that overlap, a released
//! range a window could not have released...) before the CRC pass, and a grouped image against
//! the cache's groups ([`GroupCountMismatch`](SnapshotError::GroupCountMismatch),
//! [`GroupLayersMismatch`](SnapshotError::GroupLayersMismatch),
//! [`GroupFormatMismatch`](SnapshotError::GroupFormatMismatch),
//! [`GroupWindowMismatch`](SnapshotError::GroupWindowMismatch)) before anything changes.
//! [`KvCache::restore`](crate::KvCache::restore) refuses version 3 with
//! [`GroupedImage`](SnapshotError::GroupedImage); a `GroupedCache` reads every version.

mod error;
mod flash;
mod grouped;
mod header;
mod store;
mod stream;

pub use error::SnapshotError;
pub use flash::{PowerCutFlash, RamFlash, SliceFlash};
pub use grouped::{GROUP_ENTRY_BYTES, GroupImage, GroupedHeader, MAX_HEADER_BYTES};
pub use header::{HEADER_BYTES, Header, MAGIC, VERSION, VERSION_1, VERSION_2};
pub use store::{Commit, MAX_SLOTS, RECORD_BYTES, RECORD_MAGIC, SnapshotStore};
pub(crate) use stream::{Reader, Writer, image_writer};
