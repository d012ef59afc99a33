//! The 64-byte image header.

use super::SnapshotError;
use crate::error::ConfigError;
use crate::format::ElementFormat;
use crate::planner::{CacheConfig, PoolKind};
use crate::shape::Shape;

/// First bytes of every image.
pub const MAGIC: [u8; 4] = *b"EKVS";
/// Layout version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;

/// What an image's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Header {
    /// The model / namespace fingerprint given when the image was written.
    pub fingerprint: u64,
    /// Cache shape.
    pub shape: Shape,
    /// Tokens per page.
    pub page_tokens: u16,
    /// K page format.
    pub k_format: ElementFormat,
    /// V page format.
    pub v_format: ElementFormat,
    /// Token count.
    pub tokens: u32,
    /// Pages: `ceil(tokens / page_tokens)`.
    pub pages: u32,
    /// Payload bytes.
    pub payload: u32,
    /// Image bytes, CRC included.
    pub image: u32,
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn get16(b: &[u8; HEADER_BYTES], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn get32(b: &[u8; HEADER_BYTES], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn encode_format(f: ElementFormat) -> [u8; 8] {
    let (code, a, b, flag) = match f {
        ElementFormat::F32 => (1u8, 0u16, 0u16, 0u8),
        ElementFormat::F16 => (2, 0, 0, 0),
        ElementFormat::Bf16 => (3, 0, 0, 0),
        ElementFormat::Int8 { group } => (4, group, 0, 0),
        ElementFormat::Fp8Tile { dv, tile, bf16 } => (5, dv, tile, u8::from(bf16)),
    };
    let [a0, a1] = a.to_le_bytes();
    let [b0, b1] = b.to_le_bytes();
    [code, 0, a0, a1, b0, b1, flag, 0]
}

fn decode_format(e: &[u8]) -> Result<ElementFormat, SnapshotError> {
    let a = u16::from_le_bytes([e[2], e[3]]);
    let b = u16::from_le_bytes([e[4], e[5]]);
    Ok(match (e[0], e[6]) {
        (1, 0) => ElementFormat::F32,
        (2, 0) => ElementFormat::F16,
        (3, 0) => ElementFormat::Bf16,
        (4, 0) => ElementFormat::Int8 { group: a },
        (5, flag @ (0 | 1)) => ElementFormat::Fp8Tile {
            dv: a,
            tile: b,
            bf16: flag == 1,
        },
        _ => return Err(SnapshotError::CorruptSnapshot),
    })
}

impl Header {
    /// The header of an image of `tokens` tokens of a cache configured as `config`.
    ///
    /// # Errors
    ///
    /// [`InvalidFormat`](ConfigError::InvalidFormat) and the like for a configuration that
    /// does not plan, [`Overflow`](ConfigError::Overflow) for an image past 4 GiB.
    pub fn new(config: &CacheConfig, tokens: u32, fingerprint: u64) -> Result<Header, ConfigError> {
        let geometry = config.geometry()?;
        let p = config.page_tokens as u64;
        let pages = (tokens as u64).div_ceil(p);
        // Checked: a damaged header can claim any shape (u16 × u16 × u64 × ... overflows u64).
        let mut per_page = 0u64;
        for pool in PoolKind::ALL {
            let bytes = (config.shape.layers as u64)
                .checked_mul(p)
                .and_then(|v| v.checked_mul(geometry.pool_row_bytes(pool) as u64))
                .ok_or(ConfigError::Overflow)?;
            per_page = per_page.checked_add(bytes).ok_or(ConfigError::Overflow)?;
        }
        let payload = pages.checked_mul(per_page).ok_or(ConfigError::Overflow)?;
        let image = (HEADER_BYTES as u64 + 4 * tokens as u64 + 4)
            .checked_add(payload)
            .ok_or(ConfigError::Overflow)?;
        let fits = |v: u64| u32::try_from(v).map_err(|_| ConfigError::Overflow);
        Ok(Header {
            fingerprint,
            shape: config.shape,
            page_tokens: config.page_tokens,
            k_format: config.k_format,
            v_format: config.v_format,
            tokens,
            pages: fits(pages)?,
            payload: fits(payload)?,
            image: fits(image)?,
        })
    }

    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC);
        put16(&mut b, 4, VERSION);
        put16(&mut b, 6, HEADER_BYTES as u16);
        b[8..16].copy_from_slice(&self.fingerprint.to_le_bytes());
        put16(&mut b, 16, self.shape.layers);
        put16(&mut b, 18, self.shape.kv_heads);
        put16(&mut b, 20, self.shape.head_dim);
        put16(&mut b, 22, self.page_tokens);
        b[24..32].copy_from_slice(&encode_format(self.k_format));
        b[32..40].copy_from_slice(&encode_format(self.v_format));
        put32(&mut b, 40, self.tokens);
        put32(&mut b, 44, self.pages);
        put32(&mut b, 48, self.payload);
        put32(&mut b, 52, self.image);
        b
    }

    /// Parses and checks header bytes: magic, version, and that every size follows from the
    /// others (so a damaged size field is caught before the CRC pass reads a wrong length).
    ///
    /// # Errors
    ///
    /// [`BadMagic`](SnapshotError::BadMagic),
    /// [`UnsupportedVersion`](SnapshotError::UnsupportedVersion),
    /// [`CorruptSnapshot`](SnapshotError::CorruptSnapshot).
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, SnapshotError> {
        if b[0..4] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        if get16(b, 4) != VERSION {
            return Err(SnapshotError::UnsupportedVersion);
        }
        if get16(b, 6) as usize != HEADER_BYTES || b[56..64] != [0; 8] {
            return Err(SnapshotError::CorruptSnapshot);
        }
        let shape = Shape {
            layers: get16(b, 16),
            kv_heads: get16(b, 18),
            head_dim: get16(b, 20),
        };
        let config = CacheConfig::new(shape)
            .with_page_tokens(get16(b, 22))
            .with_formats(decode_format(&b[24..32])?, decode_format(&b[32..40])?);
        let fingerprint =
            u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        // A shape or format that does not plan is damage too.
        let expected = Header::new(&config, get32(b, 40), fingerprint)
            .map_err(|_| SnapshotError::CorruptSnapshot)?;
        if expected.encode() != *b {
            return Err(SnapshotError::CorruptSnapshot);
        }
        Ok(expected)
    }

    /// Whether a cache configured as `config` can hold this image's pages as they are.
    pub fn matches(&self, config: &CacheConfig) -> bool {
        self.shape == config.shape
            && self.page_tokens == config.page_tokens
            && self.k_format == config.k_format
            && self.v_format == config.v_format
    }
}
