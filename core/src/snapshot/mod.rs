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
//! The image does not depend on the cache's alignment or pool size: a cache with the same shape,
//! formats and page size restores it.

mod error;
mod flash;
mod header;
mod store;
mod stream;

pub use error::SnapshotError;
pub use flash::{PowerCutFlash, RamFlash, SliceFlash};
pub use header::{HEADER_BYTES, Header, MAGIC, VERSION, VERSION_1};
pub use store::{Commit, MAX_SLOTS, RECORD_BYTES, RECORD_MAGIC, SnapshotStore};
pub(crate) use stream::{Reader, Writer};
