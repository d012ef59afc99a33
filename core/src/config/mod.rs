//! [`CacheConfig`]: everything a cache is configured with, and its builder methods; its layer
//! groups are in `groups.rs`. What a configuration plans to (geometry, arena sizes) is the
//! planner's (`crate::plan`).

mod groups;

pub use groups::{GroupWindow, LayerGroup, LayerGroups, Layers, MAX_GROUPS};

use crate::error::ConfigError;
use crate::format::{ElementFormat, Rotation};
use crate::shape::Shape;

/// Smallest data-arena alignment: no two pages may share a cache line on any supported core.
pub const MIN_ALIGN: usize = 64;

/// Everything a cache is configured with.
///
/// Layers fall in layer groups, each with its own page tables, pages, window, formats and
/// rotations: group 0, the base group, holds every layer no listed group ([`groups`](Self::groups))
/// holds, with the formats, rotations and window of the fields below; a configuration without
/// listed groups is one group of every layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CacheConfig {
    /// The model's attention shape.
    pub shape: Shape,
    /// Tokens per page (P): a power of two, 16 by default.
    pub page_tokens: u16,
    /// Storage format of the base group's key pages.
    pub k_format: ElementFormat,
    /// Storage format of the base group's value pages.
    pub v_format: ElementFormat,
    /// Rotation of key rows before they are stored (queries are rotated alike in attention).
    pub k_rotation: Rotation,
    /// Rotation of value rows before they are stored (attention rotates its output back).
    pub v_rotation: Rotation,
    /// Data-arena alignment and pool-stride granule: a power of two ≥ [`MIN_ALIGN`] and ≥ the
    /// target's data-cache line.
    pub align: usize,
    /// Sequence slots.
    pub max_seqs: u16,
    /// Longest sequence in tokens (sizes each page table).
    pub max_seq_tokens: u32,
    /// Prefill chunk size C in tokens: a multiple of `page_tokens`; 0 (the default) means one
    /// page. Prompts are prefilled in chunks aligned to absolute multiples of C, and prefix reuse
    /// is aligned down to C, so a reused prefix is bit-identical to a cold prefill.
    pub chunk_tokens: u16,
    /// Keep a prefix index (per page: a chained hash, the page's token ids and chain links, about
    /// `28 + 4 × page_tokens` bytes of metadata). Without it prefix lookups fail with
    /// [`Error::NoPrefixIndex`](crate::Error::NoPrefixIndex); the single-conversation path still works.
    pub prefix_index: bool,
    /// Seed of the prefix hash chain and identity of every first page: a fingerprint of everything
    /// besides the tokens that KV depends on (model, adapter, salt); see
    /// [`crate::prefix::namespace`]. First pages are linked to its low 63 bits and hashed with all
    /// 64: two namespaces that differ only in bit 63 share links but not hashes, so lookups keep
    /// them apart while `commit_prompt` treats them as one (no wrong data is reused either way).
    /// Use distinct low 63 bits.
    pub namespace: u64,
    /// The base group's sliding window (see [`GroupWindow`]), or none: every position kept.
    pub window: Option<GroupWindow>,
    /// The listed layer groups (groups 1, 2, …), each holding the layers it names; none by
    /// default.
    pub groups: LayerGroups,
}

impl CacheConfig {
    /// Defaults for `shape`: 16-token f32 pages, 64-byte alignment, 8 sequences of up to 8192
    /// tokens.
    pub const fn new(shape: Shape) -> Self {
        CacheConfig {
            shape,
            page_tokens: 16,
            k_format: ElementFormat::F32,
            v_format: ElementFormat::F32,
            k_rotation: Rotation::None,
            v_rotation: Rotation::None,
            align: MIN_ALIGN,
            max_seqs: 8,
            max_seq_tokens: 8192,
            chunk_tokens: 0,
            prefix_index: true,
            namespace: 0,
            window: None,
            groups: LayerGroups::new(),
        }
    }

    /// Sets the base group's sliding window, sinks and rollback (see [`GroupWindow`]).
    pub const fn with_window(mut self, window: GroupWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// Lists one more layer group (at most [`MAX_GROUPS`] − 1): its layers leave the base group.
    pub const fn with_group(mut self, group: LayerGroup) -> Self {
        self.groups = self.groups.with(group);
        self
    }

    /// The same configuration with every group's window removed: every layer keeps every
    /// position (what the planner compares a windowed layout with).
    pub const fn without_windows(mut self) -> Self {
        self.window = None;
        let mut groups = LayerGroups::new();
        let mut i = 0;
        while let Some(g) = self.groups.get(i) {
            let mut g = *g;
            g.window = None;
            groups = groups.with(g);
            i += 1;
        }
        self.groups = groups;
        self
    }

    /// Layer groups: the base group and the listed ones.
    pub const fn group_count(&self) -> usize {
        1 + self.groups.len()
    }

    /// Group `g` (0 is the base group, with [`Layers::Rest`]), or `None` past the last.
    pub const fn group(&self, g: usize) -> Option<LayerGroup> {
        if g == 0 {
            Some(LayerGroup {
                layers: Layers::Rest,
                window: self.window,
                k_format: self.k_format,
                v_format: self.v_format,
                k_rotation: self.k_rotation,
                v_rotation: self.v_rotation,
            })
        } else {
            match self.groups.get(g - 1) {
                Some(l) => Some(*l),
                None => None,
            }
        }
    }

    /// The configuration of group `g` alone, as a cache of one group: the shape's layers are
    /// the group's ([`group_layers`](Self::group_layers)), its formats, rotations and window
    /// those of the group, no listed group; every other field as here. `None` past the last
    /// group.
    pub const fn group_config(&self, g: usize) -> Option<CacheConfig> {
        let group = match self.group(g) {
            Some(group) => group,
            None => return None,
        };
        let mut c = *self;
        c.shape.layers = self.group_layers(g);
        c.k_format = group.k_format;
        c.v_format = group.v_format;
        c.k_rotation = group.k_rotation;
        c.v_rotation = group.v_rotation;
        c.window = group.window;
        c.groups = LayerGroups::new();
        Some(c)
    }

    /// The group holding `layer` and the layer's index in it (layers of a group are numbered in
    /// model order), or `None` for a layer past the shape's. The first listed group naming it
    /// wins; [`check_groups`](Self::check_groups) refuses configurations where two do.
    pub const fn layer_group(&self, layer: u16) -> Option<(usize, u16)> {
        if layer >= self.shape.layers {
            return None;
        }
        if self.groups.is_empty() {
            return Some((0, layer));
        }
        let g = self.group_of(layer);
        let mut index = 0;
        let mut l = 0;
        while l < layer {
            if self.group_of(l) == g {
                index += 1;
            }
            l += 1;
        }
        Some((g, index))
    }

    /// Layers group `g` holds (0 past the last group).
    pub const fn group_layers(&self, g: usize) -> u16 {
        if g >= self.group_count() {
            return 0;
        }
        let mut n = 0;
        let mut l = 0;
        while l < self.shape.layers {
            if self.group_of(l) == g {
                n += 1;
            }
            l += 1;
        }
        n
    }

    /// The group of an in-range `layer`: the first listed group naming it, else the base group.
    const fn group_of(&self, layer: u16) -> usize {
        let mut i = 0;
        while let Some(g) = self.groups.get(i) {
            if g.layers.contains(layer) {
                return i + 1;
            }
            i += 1;
        }
        0
    }

    /// Checks the layer groups: each listed group names at least one layer, all of them below
    /// the shape's layer count and none named by another listed group; the base group keeps at
    /// least one layer; windows are at least one position.
    ///
    /// # Errors
    ///
    /// [`TooManyGroups`](ConfigError::TooManyGroups) past [`MAX_GROUPS`],
    /// [`InvalidGroup`](ConfigError::InvalidGroup) for a listed group of [`Layers::Rest`],
    /// [`ZeroSize`](ConfigError::ZeroSize) for a run of 0 layers, a period of 0 or a window of 0,
    /// [`GroupLayerOutOfRange`](ConfigError::GroupLayerOutOfRange),
    /// [`LayerInTwoGroups`](ConfigError::LayerInTwoGroups),
    /// [`EmptyGroup`](ConfigError::EmptyGroup) when listed groups take every layer.
    pub const fn check_groups(&self) -> Result<(), ConfigError> {
        if self.groups.overflowed() {
            return Err(ConfigError::TooManyGroups);
        }
        if let Some(w) = self.window {
            if w.window == 0 {
                return Err(ConfigError::ZeroSize);
            }
        }
        let layers = self.shape.layers;
        let mut i = 0;
        while let Some(g) = self.groups.get(i) {
            if let Some(w) = g.window {
                if w.window == 0 {
                    return Err(ConfigError::ZeroSize);
                }
            }
            match g.layers {
                Layers::Rest => return Err(ConfigError::InvalidGroup),
                Layers::Run { first, count } => {
                    if count == 0 {
                        return Err(ConfigError::ZeroSize);
                    }
                    if first as u32 + count as u32 > layers as u32 {
                        return Err(ConfigError::GroupLayerOutOfRange);
                    }
                }
                Layers::Every { period, first } => {
                    if period == 0 {
                        return Err(ConfigError::ZeroSize);
                    }
                    if first >= layers {
                        return Err(ConfigError::GroupLayerOutOfRange);
                    }
                }
            }
            // No layer named by an earlier listed group.
            let mut l = 0;
            while l < layers {
                if g.layers.contains(l) {
                    let mut j = 0;
                    while j < i {
                        if let Some(e) = self.groups.get(j) {
                            if e.layers.contains(l) {
                                return Err(ConfigError::LayerInTwoGroups);
                            }
                        }
                        j += 1;
                    }
                }
                l += 1;
            }
            i += 1;
        }
        if self.group_layers(0) == 0 && layers > 0 {
            return Err(ConfigError::EmptyGroup);
        }
        Ok(())
    }

    /// Sets the prefill chunk size C (a multiple of `page_tokens`; 0 means one page).
    pub const fn with_chunk_tokens(mut self, chunk_tokens: u16) -> Self {
        self.chunk_tokens = chunk_tokens;
        self
    }

    /// Keeps a prefix index, or not.
    pub const fn with_prefix_index(mut self, on: bool) -> Self {
        self.prefix_index = on;
        self
    }

    /// Sets the prefix namespace (see [`crate::prefix::namespace`]).
    pub const fn with_namespace(mut self, namespace: u64) -> Self {
        self.namespace = namespace;
        self
    }

    /// The effective prefill chunk size in tokens: `chunk_tokens`, or `page_tokens` when 0.
    pub const fn chunk(&self) -> u32 {
        if self.chunk_tokens == 0 {
            self.page_tokens as u32
        } else {
            self.chunk_tokens as u32
        }
    }

    /// Sets tokens per page.
    pub const fn with_page_tokens(mut self, page_tokens: u16) -> Self {
        self.page_tokens = page_tokens;
        self
    }

    /// Sets the K and V page formats.
    pub const fn with_formats(mut self, k: ElementFormat, v: ElementFormat) -> Self {
        self.k_format = k;
        self.v_format = v;
        self
    }

    /// Sets the K and V rotations (see [`Rotation`]; head_dim must be a power of two up to
    /// [`MAX_ROTATED_DIM`](crate::MAX_ROTATED_DIM) for either to be on). Rows are stored
    /// rotated and read back rotated back; attention gives what it gives over unrotated rows,
    /// up to the format's rounding.
    pub const fn with_rotations(mut self, k: Rotation, v: Rotation) -> Self {
        self.k_rotation = k;
        self.v_rotation = v;
        self
    }

    /// Sets the data-arena alignment.
    pub const fn with_align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// Sets the number of sequence slots and the longest sequence.
    pub const fn with_sequences(mut self, max_seqs: u16, max_seq_tokens: u32) -> Self {
        self.max_seqs = max_seqs;
        self.max_seq_tokens = max_seq_tokens;
        self
    }
}
