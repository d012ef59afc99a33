//! The 64-byte image header.

use core::ops::Range;

use super::SnapshotError;
use crate::error::ConfigError;
use crate::format::{ElementFormat, Q4Kind, Rotation};
use crate::plan::{CacheConfig, PoolKind};
use crate::shape::Shape;

/// First bytes of every image.
pub const MAGIC: [u8; 4] = *b"EKVS";
/// The newest layout version: images of several layer groups, or of a sequence whose windowed
/// group released positions ([`GroupedHeader`](super::GroupedHeader), written by
/// [`GroupedCache::snapshot`](crate::GroupedCache::snapshot)). Images of one group holding every
/// position keep the older versions ([`VERSION_2`], [`VERSION_1`]), which earlier releases read;
/// this crate reads all three.
pub const VERSION: u16 = 3;
/// The layout version of one-group images with 4-bit pages (format code 6) or rotated rows (a
/// nonzero rotation byte).
pub const VERSION_2: u16 = 2;
/// The layout version of one-group images without 4-bit pages or rotations.
pub const VERSION_1: u16 = 1;
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
    /// Rotation of the K rows.
    pub k_rotation: Rotation,
    /// Rotation of the V rows.
    pub v_rotation: Rotation,
    /// Token count.
    pub tokens: u32,
    /// Pages: `ceil(tokens / page_tokens)`.
    pub pages: u32,
    /// Payload bytes.
    pub payload: u32,
    /// Image bytes, CRC included.
    pub image: u32,
}

/// Where a field lies in the header or in a format entry: its first byte and its length.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    at: usize,
    len: usize,
}

impl Field {
    /// `len` bytes at offset 0.
    pub(super) const fn first(len: usize) -> Field {
        Field { at: 0, len }
    }

    /// `len` bytes right after `prev`.
    pub(super) const fn after(prev: Field, len: usize) -> Field {
        Field {
            at: prev.at + prev.len,
            len,
        }
    }

    /// One past its last byte.
    pub(super) const fn end(self) -> usize {
        self.at + self.len
    }

    pub(super) const fn range(self) -> Range<usize> {
        self.at..self.end()
    }
}

// The header, field after field: the one table `encode` and `decode` share (the image layout
// in the `snapshot` module docs).
pub(super) const F_MAGIC: Field = Field::first(4);
pub(super) const F_VERSION: Field = Field::after(F_MAGIC, 2);
pub(super) const F_HEADER_BYTES: Field = Field::after(F_VERSION, 2);
pub(super) const F_FINGERPRINT: Field = Field::after(F_HEADER_BYTES, 8);
pub(super) const F_LAYERS: Field = Field::after(F_FINGERPRINT, 2);
pub(super) const F_KV_HEADS: Field = Field::after(F_LAYERS, 2);
pub(super) const F_HEAD_DIM: Field = Field::after(F_KV_HEADS, 2);
pub(super) const F_PAGE_TOKENS: Field = Field::after(F_HEAD_DIM, 2);
pub(super) const F_K_FORMAT: Field = Field::after(F_PAGE_TOKENS, FORMAT_BYTES);
pub(super) const F_V_FORMAT: Field = Field::after(F_K_FORMAT, FORMAT_BYTES);
pub(super) const F_TOKENS: Field = Field::after(F_V_FORMAT, 4);
pub(super) const F_PAGES: Field = Field::after(F_TOKENS, 4);
pub(super) const F_PAYLOAD: Field = Field::after(F_PAGES, 4);
pub(super) const F_IMAGE: Field = Field::after(F_PAYLOAD, 4);
/// Zero.
pub(super) const F_RESERVED: Field = Field::after(F_IMAGE, 8);
const _: () = assert!(F_RESERVED.end() == HEADER_BYTES);

// A format entry (`F_K_FORMAT`, `F_V_FORMAT`), field after field.
pub(super) const FORMAT_BYTES: usize = 8;
const E_CODE: Field = Field::first(1);
/// The half's rotation: 0 none, 1 Hadamard, 2 signed Hadamard (zero before rotations existed).
const E_ROTATION: Field = Field::after(E_CODE, 1);
const E_A: Field = Field::after(E_ROTATION, 2);
const E_B: Field = Field::after(E_A, 2);
const E_FLAG: Field = Field::after(E_B, 1);
/// Zero.
const E_PAD_END: Field = Field::after(E_FLAG, 1);
const _: () = assert!(E_PAD_END.end() == FORMAT_BYTES);

/// Writes `bytes` (of the field's length, by construction of the table) into field `f` of `b`.
pub(super) fn put(b: &mut [u8], f: Field, bytes: &[u8]) {
    b[f.range()].copy_from_slice(bytes);
}

/// The `N` bytes of field `f` of `b` (`N` is the field's length).
pub(super) fn get<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[f.range()]);
    out
}

pub(super) fn get16(b: &[u8], f: Field) -> u16 {
    u16::from_le_bytes(get(b, f))
}

pub(super) fn get32(b: &[u8], f: Field) -> u32 {
    u32::from_le_bytes(get(b, f))
}

pub(super) fn encode_format(f: ElementFormat, r: Rotation) -> [u8; FORMAT_BYTES] {
    let (code, a, b, flag) = match f {
        ElementFormat::F32 => (1u8, 0u16, 0u16, 0u8),
        ElementFormat::F16 => (2, 0, 0, 0),
        ElementFormat::Bf16 => (3, 0, 0, 0),
        ElementFormat::Int8 { group } => (4, group, 0, 0),
        ElementFormat::Fp8Tile { dv, tile, bf16 } => (5, dv, tile, u8::from(bf16)),
        ElementFormat::Int4 { kind: Q4Kind::Q4_0 } => (6, 0, 0, 0),
        ElementFormat::Int4 { kind: Q4Kind::Q4_1 } => (6, 1, 0, 0),
    };
    let mut e = [0u8; FORMAT_BYTES];
    put(&mut e, E_CODE, &[code]);
    let rot = match r {
        Rotation::None => 0u8,
        Rotation::Hadamard => 1,
        Rotation::SignedHadamard => 2,
    };
    put(&mut e, E_ROTATION, &[rot]);
    put(&mut e, E_A, &a.to_le_bytes());
    put(&mut e, E_B, &b.to_le_bytes());
    put(&mut e, E_FLAG, &[flag]);
    e
}

pub(super) fn decode_format(e: &[u8]) -> Result<(ElementFormat, Rotation), SnapshotError> {
    let (a, b) = (get16(e, E_A), get16(e, E_B));
    let [code] = get(e, E_CODE);
    let [flag] = get(e, E_FLAG);
    let rot = match get(e, E_ROTATION) {
        [0] => Rotation::None,
        [1] => Rotation::Hadamard,
        [2] => Rotation::SignedHadamard,
        _ => return Err(SnapshotError::CorruptSnapshot),
    };
    let f = match (code, flag) {
        (1, 0) => ElementFormat::F32,
        (2, 0) => ElementFormat::F16,
        (3, 0) => ElementFormat::Bf16,
        (4, 0) => ElementFormat::Int8 { group: a },
        (5, flag @ (0 | 1)) => ElementFormat::Fp8Tile {
            dv: a,
            tile: b,
            bf16: flag == 1,
        },
        (6, 0) if b == 0 && a <= 1 => ElementFormat::Int4 {
            kind: if a == 0 { Q4Kind::Q4_0 } else { Q4Kind::Q4_1 },
        },
        _ => return Err(SnapshotError::CorruptSnapshot),
    };
    Ok((f, rot))
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
            k_rotation: config.k_rotation,
            v_rotation: config.v_rotation,
            tokens,
            pages: fits(pages)?,
            payload: fits(payload)?,
            image: fits(image)?,
        })
    }

    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        put(&mut b, F_MAGIC, &MAGIC);
        put(&mut b, F_VERSION, &self.version().to_le_bytes());
        put(&mut b, F_HEADER_BYTES, &(HEADER_BYTES as u16).to_le_bytes());
        put(&mut b, F_FINGERPRINT, &self.fingerprint.to_le_bytes());
        put(&mut b, F_LAYERS, &self.shape.layers.to_le_bytes());
        put(&mut b, F_KV_HEADS, &self.shape.kv_heads.to_le_bytes());
        put(&mut b, F_HEAD_DIM, &self.shape.head_dim.to_le_bytes());
        put(&mut b, F_PAGE_TOKENS, &self.page_tokens.to_le_bytes());
        put(
            &mut b,
            F_K_FORMAT,
            &encode_format(self.k_format, self.k_rotation),
        );
        put(
            &mut b,
            F_V_FORMAT,
            &encode_format(self.v_format, self.v_rotation),
        );
        put(&mut b, F_TOKENS, &self.tokens.to_le_bytes());
        put(&mut b, F_PAGES, &self.pages.to_le_bytes());
        put(&mut b, F_PAYLOAD, &self.payload.to_le_bytes());
        put(&mut b, F_IMAGE, &self.image.to_le_bytes());
        b
    }

    /// Parses and checks header bytes: magic, version, and that every size follows from the
    /// others (so a damaged size field is caught before the CRC pass reads a wrong length).
    ///
    /// # Errors
    ///
    /// [`BadMagic`](SnapshotError::BadMagic),
    /// [`UnsupportedVersion`](SnapshotError::UnsupportedVersion),
    /// [`GroupedImage`](SnapshotError::GroupedImage) for a version-3 image (read it with
    /// [`GroupedHeader::decode`](super::GroupedHeader::decode)),
    /// [`CorruptSnapshot`](SnapshotError::CorruptSnapshot).
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, SnapshotError> {
        if get::<4>(b, F_MAGIC) != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        match get16(b, F_VERSION) {
            VERSION_1 | VERSION_2 => {}
            VERSION => return Err(SnapshotError::GroupedImage),
            _ => return Err(SnapshotError::UnsupportedVersion),
        }
        if get16(b, F_HEADER_BYTES) as usize != HEADER_BYTES || get::<8>(b, F_RESERVED) != [0; 8] {
            return Err(SnapshotError::CorruptSnapshot);
        }
        let shape = Shape {
            layers: get16(b, F_LAYERS),
            kv_heads: get16(b, F_KV_HEADS),
            head_dim: get16(b, F_HEAD_DIM),
        };
        let (k, k_rot) = decode_format(&b[F_K_FORMAT.range()])?;
        let (v, v_rot) = decode_format(&b[F_V_FORMAT.range()])?;
        let config = CacheConfig::new(shape)
            .with_page_tokens(get16(b, F_PAGE_TOKENS))
            .with_formats(k, v)
            .with_rotations(k_rot, v_rot);
        let fingerprint = u64::from_le_bytes(get(b, F_FINGERPRINT));
        // A shape or format that does not plan is damage too.
        let expected = Header::new(&config, get32(b, F_TOKENS), fingerprint)
            .map_err(|_| SnapshotError::CorruptSnapshot)?;
        if expected.encode() != *b {
            return Err(SnapshotError::CorruptSnapshot);
        }
        Ok(expected)
    }

    /// The layout version of this header: [`VERSION_2`] if it needs it (4-bit pages or a
    /// rotation), else [`VERSION_1`].
    pub fn version(&self) -> u16 {
        let int4 = |f| matches!(f, ElementFormat::Int4 { .. });
        let newer = int4(self.k_format)
            || int4(self.v_format)
            || self.k_rotation.is_some()
            || self.v_rotation.is_some();
        if newer { VERSION_2 } else { VERSION_1 }
    }

    /// Whether a cache configured as `config` can hold this image's pages as they are.
    pub fn matches(&self, config: &CacheConfig) -> bool {
        self.shape == config.shape
            && self.page_tokens == config.page_tokens
            && self.k_format == config.k_format
            && self.v_format == config.v_format
            && self.k_rotation == config.k_rotation
            && self.v_rotation == config.v_rotation
    }
}
