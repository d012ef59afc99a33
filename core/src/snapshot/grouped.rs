//! [`GroupedHeader`]: the header of a grouped image (layout [`VERSION`] 3) — the 64-byte header
//! of every image, then one 48-byte entry per layer group — and the one-group images of the
//! older layouts seen through it.

use core::ops::Range;

use super::header::{
    F_FINGERPRINT, F_HEAD_DIM, F_HEADER_BYTES, F_IMAGE, F_KV_HEADS, F_LAYERS, F_MAGIC,
    F_PAGE_TOKENS, F_PAGES, F_PAYLOAD, F_RESERVED, F_TOKENS, F_V_FORMAT, F_VERSION, FORMAT_BYTES,
    Field, decode_format, encode_format, get, get16, get32, put,
};
use super::{HEADER_BYTES, Header, MAGIC, SnapshotError, VERSION, VERSION_1, VERSION_2};
use crate::config::{CacheConfig, GroupWindow, LayerGroup, Layers, MAX_GROUPS};
use crate::error::ConfigError;
use crate::plan::PoolKind;
use crate::shape::Shape;

/// Bytes of one layer group's entry in a grouped header.
pub const GROUP_ENTRY_BYTES: usize = 48;
/// Most bytes a grouped header takes: the 64-byte header and [`MAX_GROUPS`] entries.
pub const MAX_HEADER_BYTES: usize = HEADER_BYTES + MAX_GROUPS * GROUP_ENTRY_BYTES;

// The version-3 fields of the 64-byte header where versions 1 and 2 hold the K and V formats
// (which are each group's in version 3); every other field is as in `header.rs`.
/// Layer groups (1 to `MAX_GROUPS`).
const F_GROUPS: Field = Field::after(F_PAGE_TOKENS, 2);
/// Zero.
const F_GROUPS_PAD: Field = Field::after(F_GROUPS, 2 * FORMAT_BYTES - 2);
const _: () = assert!(F_GROUPS_PAD.end() == F_V_FORMAT.end());

// A group entry, field after field.
/// Which layers: 0 the rest (group 0), 1 a run, 2 every `period`-th layer.
const G_KIND: Field = Field::first(1);
/// Zero.
const G_PAD: Field = Field::after(G_KIND, 1);
/// A run's first layer, or the period.
const G_A: Field = Field::after(G_PAD, 2);
/// A run's layer count, or the first layer of a periodic group.
const G_B: Field = Field::after(G_A, 2);
/// Layers the group holds.
const G_LAYERS: Field = Field::after(G_B, 2);
const G_K_FORMAT: Field = Field::after(G_LAYERS, FORMAT_BYTES);
const G_V_FORMAT: Field = Field::after(G_K_FORMAT, FORMAT_BYTES);
/// The window in positions (0: none, every position kept; then sinks and rollback are 0).
const G_WINDOW: Field = Field::after(G_V_FORMAT, 4);
const G_SINKS: Field = Field::after(G_WINDOW, 4);
const G_ROLLBACK: Field = Field::after(G_SINKS, 4);
/// First released position (a page boundary).
const G_RELEASED_FROM: Field = Field::after(G_ROLLBACK, 4);
/// First held position after the released ones (a page boundary; `G_RELEASED_FROM` when none).
const G_FIRST_HELD: Field = Field::after(G_RELEASED_FROM, 4);
/// Pages stored.
const G_PAGES: Field = Field::after(G_FIRST_HELD, 4);
const _: () = assert!(G_PAGES.end() == GROUP_ENTRY_BYTES);

/// One layer group of an image: which layers and how they are stored (as configured), and
/// which of the sequence's positions the image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupImage {
    /// The group as configured: layers ([`Layers::Rest`] for group 0), window, formats,
    /// rotations. In a version 1 or 2 image: every layer, no window.
    pub group: LayerGroup,
    /// Layers the group holds.
    pub layers: u16,
    /// First position the group's window had released when the image was written (a page
    /// boundary: the end of the sinks' pages).
    pub released_from: u32,
    /// First position held after the released ones (a page boundary; `released_from` when
    /// none was released). The image holds the pages of every other position: the sinks'
    /// before `released_from`, every one from `first_held` on.
    pub first_held: u32,
    /// Pages the image holds for this group.
    pub pages: u32,
}

/// What an image's header says, for images of every layout version: a version 3 image's
/// layer groups, or the one group of a version 1 or 2 image (see the `snapshot` module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupedHeader {
    /// The model / namespace fingerprint given when the image was written.
    pub fingerprint: u64,
    /// The model's shape (every layer of every group).
    pub shape: Shape,
    /// Tokens per page.
    pub page_tokens: u16,
    /// Token count.
    pub tokens: u32,
    /// Pages stored, summed over the groups.
    pub pages: u32,
    /// Payload bytes.
    pub payload: u32,
    /// Image bytes, CRC included.
    pub image: u32,
    version: u16,
    group_count: u8,
    groups: [GroupImage; MAX_GROUPS],
}

/// An unused group slot (never compared: only the first `group_count` are read).
const NO_GROUP: GroupImage = GroupImage {
    group: LayerGroup::new(Layers::Rest),
    layers: 0,
    released_from: 0,
    first_held: 0,
    pages: 0,
};

impl GroupedHeader {
    /// The version-3 header of an image of `tokens` tokens of a cache configured as `config`
    /// whose group `g` had released the positions `released[g]` (an empty range for a group
    /// that released none; missing entries are empty).
    ///
    /// # Errors
    ///
    /// [`Cache`](SnapshotError::Cache) with the configuration's error (it does not plan) or
    /// [`Overflow`](ConfigError::Overflow) (an image past 4 GiB);
    /// [`CorruptGroupEntry`](SnapshotError::CorruptGroupEntry) when `released[g]` is not a
    /// range of whole pages group `g`'s window releases (past its sinks' pages, before every
    /// position a query at `tokens` sees; none without a window).
    pub fn new(
        config: &CacheConfig,
        tokens: u32,
        fingerprint: u64,
        released: &[Range<u32>],
    ) -> Result<GroupedHeader, SnapshotError> {
        config.check_groups()?;
        let count = config.group_count();
        let p = config.page_tokens as u64;
        let all_pages = (tokens as u64).div_ceil(p.max(1));
        let mut groups = [NO_GROUP; MAX_GROUPS];
        let (mut pages, mut payload) = (0u64, 0u64);
        for (g, slot) in groups.iter_mut().enumerate().take(count) {
            let group = config.group(g).ok_or(ConfigError::EmptyGroup)?;
            let geometry = config.group_geometry(g)?;
            let layers = config.group_layers(g);
            let released = released.get(g).cloned().unwrap_or(0..0);
            let kept = released_pages(&group, config.page_tokens, tokens, &released)
                .and_then(|r| all_pages.checked_sub(r))
                .ok_or(SnapshotError::CorruptGroupEntry)?;
            let mut per_page = 0u64;
            for pool in PoolKind::ALL {
                let bytes = (layers as u64)
                    .checked_mul(p)
                    .and_then(|v| v.checked_mul(geometry.pool_row_bytes(pool) as u64))
                    .ok_or(ConfigError::Overflow)?;
                per_page = per_page.checked_add(bytes).ok_or(ConfigError::Overflow)?;
            }
            payload = kept
                .checked_mul(per_page)
                .and_then(|b| b.checked_add(payload))
                .ok_or(ConfigError::Overflow)?;
            pages += kept;
            *slot = GroupImage {
                group,
                layers,
                released_from: released.start,
                first_held: released.end,
                pages: fits(kept)?,
            };
        }
        let header = (HEADER_BYTES + count * GROUP_ENTRY_BYTES) as u64;
        let image = (header + 4 * tokens as u64 + 4)
            .checked_add(payload)
            .ok_or(ConfigError::Overflow)?;
        Ok(GroupedHeader {
            fingerprint,
            shape: config.shape,
            page_tokens: config.page_tokens,
            tokens,
            pages: fits(pages)?,
            payload: fits(payload)?,
            image: fits(image)?,
            version: VERSION,
            group_count: count as u8,
            groups,
        })
    }

    /// A version 1 or 2 image's header, as one group of every layer holding every position.
    pub fn from_single(h: &Header) -> GroupedHeader {
        let mut groups = [NO_GROUP; MAX_GROUPS];
        groups[0] = GroupImage {
            group: LayerGroup::new(Layers::Rest)
                .with_formats(h.k_format, h.v_format)
                .with_rotations(h.k_rotation, h.v_rotation),
            layers: h.shape.layers,
            released_from: 0,
            first_held: 0,
            pages: h.pages,
        };
        GroupedHeader {
            fingerprint: h.fingerprint,
            shape: h.shape,
            page_tokens: h.page_tokens,
            tokens: h.tokens,
            pages: h.pages,
            payload: h.payload,
            image: h.image,
            version: h.version(),
            group_count: 1,
            groups,
        }
    }

    /// The image's layout version: [`VERSION`] for a grouped image, [`VERSION_2`] or
    /// [`VERSION_1`] for the older one-group layouts.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Layer groups.
    pub fn group_count(&self) -> usize {
        self.group_count as usize
    }

    /// Group `g`'s entry, or `None` past the last group.
    pub fn group(&self, g: usize) -> Option<&GroupImage> {
        self.groups[..self.group_count()].get(g)
    }

    /// Bytes of the header: 64, and [`GROUP_ENTRY_BYTES`] per group in a version-3 image.
    pub fn header_bytes(&self) -> usize {
        if self.version == VERSION {
            HEADER_BYTES + self.group_count() * GROUP_ENTRY_BYTES
        } else {
            HEADER_BYTES
        }
    }

    /// The version 1 or 2 header this header stands for, if it is one.
    pub fn single(&self) -> Option<Header> {
        if self.version == VERSION {
            return None;
        }
        let g = &self.groups[0].group;
        Some(Header {
            fingerprint: self.fingerprint,
            shape: self.shape,
            page_tokens: self.page_tokens,
            k_format: g.k_format,
            v_format: g.v_format,
            k_rotation: g.k_rotation,
            v_rotation: g.v_rotation,
            tokens: self.tokens,
            pages: self.pages,
            payload: self.payload,
            image: self.image,
        })
    }

    /// The header's bytes, written to the start of `out`; returns them
    /// ([`header_bytes`](Self::header_bytes) long).
    pub fn encode<'o>(&self, out: &'o mut [u8; MAX_HEADER_BYTES]) -> &'o [u8] {
        out.fill(0);
        if let Some(h) = self.single() {
            out[..HEADER_BYTES].copy_from_slice(&h.encode());
            return &out[..HEADER_BYTES];
        }
        let b = &mut out[..HEADER_BYTES];
        put(b, F_MAGIC, &MAGIC);
        put(b, F_VERSION, &VERSION.to_le_bytes());
        put(
            b,
            F_HEADER_BYTES,
            &(self.header_bytes() as u16).to_le_bytes(),
        );
        put(b, F_FINGERPRINT, &self.fingerprint.to_le_bytes());
        put(b, F_LAYERS, &self.shape.layers.to_le_bytes());
        put(b, F_KV_HEADS, &self.shape.kv_heads.to_le_bytes());
        put(b, F_HEAD_DIM, &self.shape.head_dim.to_le_bytes());
        put(b, F_PAGE_TOKENS, &self.page_tokens.to_le_bytes());
        put(b, F_GROUPS, &u16::from(self.group_count).to_le_bytes());
        put(b, F_TOKENS, &self.tokens.to_le_bytes());
        put(b, F_PAGES, &self.pages.to_le_bytes());
        put(b, F_PAYLOAD, &self.payload.to_le_bytes());
        put(b, F_IMAGE, &self.image.to_le_bytes());
        for (g, entry) in self.groups[..self.group_count()].iter().enumerate() {
            let at = HEADER_BYTES + g * GROUP_ENTRY_BYTES;
            encode_entry(entry, &mut out[at..at + GROUP_ENTRY_BYTES]);
        }
        &out[..self.header_bytes()]
    }

    /// How many header bytes an image starting with `first` has: 64 for versions 1 and 2, 64
    /// and one entry per group for version 3 (read them, then [`decode`](Self::decode)).
    ///
    /// # Errors
    ///
    /// [`BadMagic`](SnapshotError::BadMagic),
    /// [`UnsupportedVersion`](SnapshotError::UnsupportedVersion),
    /// [`CorruptSnapshot`](SnapshotError::CorruptSnapshot) for a group count of 0 or past
    /// [`MAX_GROUPS`], or a header size that does not follow from it.
    pub fn header_len(first: &[u8; HEADER_BYTES]) -> Result<usize, SnapshotError> {
        if get::<4>(first, F_MAGIC) != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        match get16(first, F_VERSION) {
            VERSION_1 | VERSION_2 => Ok(HEADER_BYTES),
            VERSION => {
                let groups = get16(first, F_GROUPS) as usize;
                let bytes = HEADER_BYTES + groups * GROUP_ENTRY_BYTES;
                if groups == 0
                    || groups > MAX_GROUPS
                    || get16(first, F_HEADER_BYTES) as usize != bytes
                {
                    return Err(SnapshotError::CorruptSnapshot);
                }
                Ok(bytes)
            }
            _ => Err(SnapshotError::UnsupportedVersion),
        }
    }

    /// Parses and checks a header of any version ([`header_len`](Self::header_len) bytes):
    /// that every size follows from the others and every group entry from the configuration
    /// its fields describe.
    ///
    /// # Errors
    ///
    /// Those of [`header_len`](Self::header_len) and [`Header::decode`];
    /// [`CorruptSnapshot`](SnapshotError::CorruptSnapshot) for damage outside the group entries
    /// (or `bytes` not [`header_len`](Self::header_len) long),
    /// [`CorruptGroupEntry`](SnapshotError::CorruptGroupEntry) for a group entry that
    /// contradicts the rest.
    pub fn decode(bytes: &[u8]) -> Result<GroupedHeader, SnapshotError> {
        let first: &[u8; HEADER_BYTES] = bytes
            .get(..HEADER_BYTES)
            .and_then(|b| b.try_into().ok())
            .ok_or(SnapshotError::Truncated)?;
        let len = Self::header_len(first)?;
        if bytes.len() != len {
            return Err(SnapshotError::CorruptSnapshot);
        }
        if len == HEADER_BYTES {
            return Header::decode(first).map(|h| Self::from_single(&h));
        }
        if get::<8>(first, F_RESERVED) != [0; 8] || get::<14>(first, F_GROUPS_PAD) != [0; 14] {
            return Err(SnapshotError::CorruptSnapshot);
        }
        let shape = Shape {
            layers: get16(first, F_LAYERS),
            kv_heads: get16(first, F_KV_HEADS),
            head_dim: get16(first, F_HEAD_DIM),
        };
        let mut config = CacheConfig::new(shape).with_page_tokens(get16(first, F_PAGE_TOKENS));
        let mut released: [Range<u32>; MAX_GROUPS] = core::array::from_fn(|_| 0..0);
        let entries = bytes[HEADER_BYTES..].chunks_exact(GROUP_ENTRY_BYTES);
        for (g, e) in entries.enumerate() {
            let group = decode_entry(e, g == 0)?;
            released[g] = get32(e, G_RELEASED_FROM)..get32(e, G_FIRST_HELD);
            if g == 0 {
                config = config
                    .with_formats(group.k_format, group.v_format)
                    .with_rotations(group.k_rotation, group.v_rotation);
                config.window = group.window;
            } else {
                config = config.with_group(group);
            }
        }
        let groups = len.saturating_sub(HEADER_BYTES) / GROUP_ENTRY_BYTES;
        let tokens = get32(first, F_TOKENS);
        let fingerprint = u64::from_le_bytes(get(first, F_FINGERPRINT));
        // Groups that overlap, leave the base group empty, name layers past the shape...
        if config.check_groups().is_err() {
            return Err(SnapshotError::CorruptGroupEntry);
        }
        let expected = match Self::new(&config, tokens, fingerprint, &released[..groups]) {
            Ok(h) => h,
            Err(SnapshotError::CorruptGroupEntry) => return Err(SnapshotError::CorruptGroupEntry),
            // A shape or format that does not plan, an image past 4 GiB.
            Err(_) => return Err(SnapshotError::CorruptSnapshot),
        };
        let mut again = [0u8; MAX_HEADER_BYTES];
        let again = expected.encode(&mut again);
        if again[HEADER_BYTES..] != bytes[HEADER_BYTES..] {
            return Err(SnapshotError::CorruptGroupEntry);
        }
        if again[..HEADER_BYTES] != bytes[..HEADER_BYTES] {
            return Err(SnapshotError::CorruptSnapshot);
        }
        Ok(expected)
    }

    /// Checks that a cache configured as `config` holds this image's groups as they are: the
    /// same shape and page size, the same number of groups, each with the same layers,
    /// formats, rotations and (in a version-3 image) window.
    ///
    /// # Errors
    ///
    /// [`ConfigMismatch`](SnapshotError::ConfigMismatch) for another shape or page size (and, as
    /// [`Header::matches`] says, other formats of a version 1 or 2 image in a cache of one
    /// group), [`GroupCountMismatch`](SnapshotError::GroupCountMismatch),
    /// [`GroupLayersMismatch`](SnapshotError::GroupLayersMismatch),
    /// [`GroupFormatMismatch`](SnapshotError::GroupFormatMismatch),
    /// [`GroupWindowMismatch`](SnapshotError::GroupWindowMismatch).
    pub fn check_matches(&self, config: &CacheConfig) -> Result<(), SnapshotError> {
        if self.shape != config.shape || self.page_tokens != config.page_tokens {
            return Err(SnapshotError::ConfigMismatch);
        }
        if self.group_count() != config.group_count() {
            return Err(SnapshotError::GroupCountMismatch);
        }
        if let Some(h) = self.single() {
            // The older layouts carry no window: a one-group cache holds them under any.
            return if h.matches(config) {
                Ok(())
            } else {
                Err(SnapshotError::ConfigMismatch)
            };
        }
        for (g, image) in self.groups[..self.group_count()].iter().enumerate() {
            let Some(ours) = config.group(g) else {
                return Err(SnapshotError::GroupCountMismatch);
            };
            let (theirs, layers) = (&image.group, config.group_layers(g));
            if theirs.layers != ours.layers || image.layers != layers {
                return Err(SnapshotError::GroupLayersMismatch);
            }
            if (
                theirs.k_format,
                theirs.v_format,
                theirs.k_rotation,
                theirs.v_rotation,
            ) != (
                ours.k_format,
                ours.v_format,
                ours.k_rotation,
                ours.v_rotation,
            ) {
                return Err(SnapshotError::GroupFormatMismatch);
            }
            if theirs.window != ours.window {
                return Err(SnapshotError::GroupWindowMismatch);
            }
        }
        Ok(())
    }
}

/// Pages of `released` in a group configured as `group` holding a sequence of `tokens`
/// positions, or `None` when its window could not have released them: whole pages, after the
/// sinks' pages, before every key a query at `tokens` sees (what `KvCache::truncate` keeps);
/// none without a window.
fn released_pages(
    group: &LayerGroup,
    page_tokens: u16,
    tokens: u32,
    released: &Range<u32>,
) -> Option<u64> {
    let p = page_tokens as u32;
    if p == 0 || released.start % p != 0 || released.end % p != 0 || released.start > released.end {
        return None;
    }
    if released.is_empty() {
        return Some(0);
    }
    let w = group.window?;
    let sink_end = w.sinks.div_ceil(p).checked_mul(p)?;
    // The first key a query at `tokens` sees (besides sinks), as `window_keeps` reads it.
    let lo = (tokens.checked_add(1)?)
        .saturating_sub(w.window)
        .min(tokens.checked_sub(1)?);
    if released.start != sink_end || released.end / p > lo / p {
        return None;
    }
    Some(((released.end - released.start) / p) as u64)
}

fn fits(v: u64) -> Result<u32, SnapshotError> {
    u32::try_from(v).map_err(|_| ConfigError::Overflow.into())
}

fn encode_entry(e: &GroupImage, out: &mut [u8]) {
    let (kind, a, b) = match e.group.layers {
        Layers::Rest => (0u8, 0u16, 0u16),
        Layers::Run { first, count } => (1, first, count),
        Layers::Every { period, first } => (2, period, first),
    };
    let g = &e.group;
    let w = g.window.unwrap_or(GroupWindow {
        window: 0,
        sinks: 0,
        rollback: 0,
    });
    put(out, G_KIND, &[kind]);
    put(out, G_A, &a.to_le_bytes());
    put(out, G_B, &b.to_le_bytes());
    put(out, G_LAYERS, &e.layers.to_le_bytes());
    put(out, G_K_FORMAT, &encode_format(g.k_format, g.k_rotation));
    put(out, G_V_FORMAT, &encode_format(g.v_format, g.v_rotation));
    put(out, G_WINDOW, &w.window.to_le_bytes());
    put(out, G_SINKS, &w.sinks.to_le_bytes());
    put(out, G_ROLLBACK, &w.rollback.to_le_bytes());
    put(out, G_RELEASED_FROM, &e.released_from.to_le_bytes());
    put(out, G_FIRST_HELD, &e.first_held.to_le_bytes());
    put(out, G_PAGES, &e.pages.to_le_bytes());
}

/// The configured group an entry describes (its sizes are checked by re-encoding).
fn decode_entry(e: &[u8], base: bool) -> Result<LayerGroup, SnapshotError> {
    let bad = SnapshotError::CorruptGroupEntry;
    let (a, b) = (get16(e, G_A), get16(e, G_B));
    let layers = match get(e, G_KIND) {
        [0] if base && a == 0 && b == 0 => Layers::Rest,
        [1] if !base => Layers::Run { first: a, count: b },
        [2] if !base => Layers::Every {
            period: a,
            first: b,
        },
        _ => return Err(bad),
    };
    if get::<1>(e, G_PAD) != [0] {
        return Err(bad);
    }
    let (k, k_rot) = decode_format(&e[G_K_FORMAT.range()]).map_err(|_| bad)?;
    let (v, v_rot) = decode_format(&e[G_V_FORMAT.range()]).map_err(|_| bad)?;
    let mut group = LayerGroup::new(layers)
        .with_formats(k, v)
        .with_rotations(k_rot, v_rot);
    let window = get32(e, G_WINDOW);
    if window != 0 {
        group.window = Some(GroupWindow {
            window,
            sinks: get32(e, G_SINKS),
            rollback: get32(e, G_ROLLBACK),
        });
    }
    Ok(group)
}
