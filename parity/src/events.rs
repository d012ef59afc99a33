//! What a run reports (events to the sink, the digest) and how it fails.

use super::*;

/// One step of a case, as the sink of [`run`] sees it. Sequences are named by small labels
/// (0, 1, …) local to the case. Rows and queries are the original f32 values, before any page
/// format rounds or quantizes them.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Sequence `seq` now holds these K and V rows of `layer` at positions
    /// `[start, start + k.len() / KV_ROW)` (written, or attached from the prefix index).
    Rows {
        /// Sequence label.
        seq: u8,
        /// Layer.
        layer: u16,
        /// First position.
        start: u32,
        /// K rows, `[n][kv_heads][head_dim]`.
        k: &'a [f32],
        /// V rows, `[n][kv_heads][head_dim]`.
        v: &'a [f32],
    },
    /// Sequence `child` was forked from `parent` (same positions and rows).
    Fork {
        /// Label of the forked sequence.
        parent: u8,
        /// Label of the new sequence.
        child: u8,
    },
    /// Sequence `seq` was truncated to `len` positions.
    Truncate {
        /// Sequence label.
        seq: u8,
        /// New length.
        len: u32,
    },
    /// Sequence `seq` released the pages no query at a position `≥ from` sees
    /// ([`KvCache::slide`]); the cache now uses `pages_used` pages.
    Slide {
        /// Sequence label.
        seq: u8,
        /// The position from which on queries are still to come.
        from: u32,
        /// Pages released by this call.
        released: u16,
        /// Pages in use in the whole cache afterwards.
        pages_used: u16,
    },
    /// Attention of queries at positions `[start, start + q.len() / Q_ROW)` of `seq` in `layer`;
    /// `out` is part of the digest.
    Attention {
        /// Sequence label.
        seq: u8,
        /// Layer.
        layer: u16,
        /// Position of the first query row.
        start: u32,
        /// The parameters of the call.
        params: AttentionParams,
        /// Query rows, `[n][q_heads][head_dim]`.
        q: &'a [f32],
        /// Output rows, `[n][q_heads][head_dim]`.
        out: &'a [f32],
    },
}

impl Event<'_> {
    /// The kind of cache call the event follows in `case`, and a detail, for per-call figures
    /// (stack depth, say): `rows` (written with `write_kv`, or attached from the prefix index),
    /// `fork`, `truncate`, `slide`, or `attention` with the case's page formats.
    pub const fn call(&self, case: Case) -> (&'static str, &'static str) {
        match self {
            Event::Rows { .. } => ("rows", ""),
            Event::Fork { .. } => ("fork", ""),
            Event::Truncate { .. } => ("truncate", ""),
            Event::Slide { .. } => ("slide", ""),
            Event::Attention { .. } => ("attention", case.formats_label()),
        }
    }
}

pub(crate) static CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// CRC-32 (ISO-HDLC) of f32 values as little-endian bytes, fed in any split.
pub struct OutputCrc {
    digest: crc::Digest<'static, u32>,
    values: u32,
}

impl OutputCrc {
    /// An empty digest.
    pub fn new() -> Self {
        OutputCrc {
            digest: CRC32.digest(),
            values: 0,
        }
    }

    /// Adds `values` (little-endian bytes of each).
    pub fn update(&mut self, values: &[f32]) {
        let mut bytes = [0u8; 256];
        for chunk in values.chunks(64) {
            for (b, x) in bytes.chunks_exact_mut(4).zip(chunk) {
                b.copy_from_slice(&x.to_le_bytes());
            }
            self.digest.update(&bytes[..4 * chunk.len()]);
        }
        self.values = self.values.wrapping_add(values.len() as u32);
    }

    /// Adds raw bytes (a cache's stored pages), not counted as values.
    pub fn update_bytes(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
    }

    /// Values added so far.
    pub fn values(&self) -> u32 {
        self.values
    }

    /// The CRC-32 of everything added.
    pub fn finish(self) -> u32 {
        self.digest.finalize()
    }
}

impl Default for OutputCrc {
    fn default() -> Self {
        Self::new()
    }
}

/// The result of a case: its name (fixed size, NUL-padded), the CRC-32 of its outputs and how
/// many f32 outputs it produced. `Display` gives the line hosts and boards compare:
/// `case <name> crc32 <8 hex digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest {
    /// The case.
    pub case: Case,
    /// [`Case::name`], NUL-padded.
    pub name: [u8; NAME_LEN],
    /// CRC-32 (ISO-HDLC) of every attention output f32, little-endian, in order.
    pub crc32: u32,
    /// f32 outputs digested.
    pub outputs: u32,
}

impl Digest {
    pub(crate) fn new(case: Case, crc32: u32, outputs: u32) -> Self {
        let mut name = [0u8; NAME_LEN];
        let n = case.name().as_bytes();
        name[..n.len()].copy_from_slice(n);
        Digest {
            case,
            name,
            crc32,
            outputs,
        }
    }

    /// The name without padding.
    pub fn name(&self) -> &str {
        let len = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        core::str::from_utf8(&self.name[..len]).unwrap_or("?")
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "case {} crc32 {:08x}", self.name(), self.crc32)
    }
}

/// Why a case failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A cache call failed (a configuration error as [`edgekv::Error::Config`]).
    Cache(edgekv::Error),
    /// Writing or restoring the snapshot image failed.
    Snapshot(edgekv::snapshot::SnapshotError),
    /// The work buffer is shorter than [`WORK_F32`].
    WorkTooSmall,
    /// A cache call succeeded with another result than the script expects (e.g. the prefix hit
    /// has another length).
    Unexpected(&'static str),
    /// [`Case::SnapshotRestored`] runs only through [`snapshot::decode_after_image`].
    NeedsImage,
}

impl From<edgekv::Error> for Error {
    fn from(e: edgekv::Error) -> Self {
        Error::Cache(e)
    }
}

impl From<edgekv::ConfigError> for Error {
    fn from(e: edgekv::ConfigError) -> Self {
        Error::Cache(e.into())
    }
}

impl From<edgekv::snapshot::SnapshotError> for Error {
    fn from(e: edgekv::snapshot::SnapshotError) -> Self {
        Error::Snapshot(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cache(e) => write!(f, "cache: {e}"),
            Error::Snapshot(e) => write!(f, "snapshot: {e}"),
            Error::WorkTooSmall => f.write_str("work buffer shorter than WORK_F32"),
            Error::Unexpected(what) => write!(f, "unexpected result: {what}"),
            Error::NeedsImage => f.write_str("this case needs a snapshot image"),
        }
    }
}

impl core::error::Error for Error {}
