//! Layer groups: layers that share page tables and pages, each group with its own sliding
//! window, K and V formats and rotations (e.g. Gemma 3's five windowed layers of every six in
//! one group, its global layers in another).

use crate::format::{ElementFormat, Rotation};

/// Most layer groups a configuration has: the base group and up to `MAX_GROUPS − 1` listed ones.
pub const MAX_GROUPS: usize = 4;

/// Which layers a listed [`LayerGroup`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Layers {
    /// `count` consecutive layers from `first`.
    Run {
        /// First layer.
        first: u16,
        /// Layers in the run (≥ 1).
        count: u16,
    },
    /// Every `period`-th layer from `first`: `first`, `first + period`, … (Gemma 3's global
    /// layers of 18 are `Every { period: 6, first: 5 }`).
    Every {
        /// Distance between two listed layers (≥ 1).
        period: u16,
        /// First layer listed.
        first: u16,
    },
    /// The layers no listed group holds: the base group's (group 0), as
    /// [`CacheConfig::group`](crate::CacheConfig::group) reports it. Not valid in a listed group
    /// ([`InvalidGroup`](crate::ConfigError::InvalidGroup)).
    Rest,
}

impl Layers {
    /// Whether `layer` is listed (never for [`Rest`](Layers::Rest), which the configuration
    /// resolves).
    pub const fn contains(&self, layer: u16) -> bool {
        match *self {
            Layers::Run { first, count } => {
                layer >= first && ((layer - first) as u32) < count as u32
            }
            Layers::Every { period, first } => {
                period != 0 && layer >= first && (layer - first) % period == 0
            }
            Layers::Rest => false,
        }
    }
}

/// A group's sliding window with attention sinks: query position `t` sees key `j ≤ t` when
/// `j < sinks` or `t − j < window`. Pages no later query can see are released as the sequence
/// grows, except the last `rollback` positions' worth, kept so that the sequence can be
/// truncated back by that much (speculative decoding, an edited turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupWindow {
    /// Most recent positions a query sees, its own included (≥ 1).
    pub window: u32,
    /// Leading positions every query sees (attention sinks).
    pub sinks: u32,
    /// Positions kept beyond what the window needs, so that a truncation back by up to this
    /// many positions from the length reached is possible.
    pub rollback: u32,
}

impl GroupWindow {
    /// A window of `window` positions with `sinks` sinks and no rollback.
    pub const fn new(window: u32, sinks: u32) -> Self {
        GroupWindow {
            window,
            sinks,
            rollback: 0,
        }
    }

    /// Pages one sequence holds at most in a group with this window, when positions are
    /// reserved at most `chunk` at a time (`chunk ≥ 1`): the sinks' pages, then
    /// `⌈(window + rollback + chunk − 2) / page_tokens⌉ + 1` pages of recent positions; `None`
    /// on overflow or zero sizes.
    pub const fn pages_per_sequence(&self, page_tokens: u32, chunk: u32) -> Option<usize> {
        if page_tokens == 0 || chunk == 0 || self.window == 0 {
            return None;
        }
        let p = page_tokens as u64;
        let span = self.window as u64 + self.rollback as u64 + chunk as u64 - 2;
        let pages = span.div_ceil(p) + 1 + (self.sinks as u64).div_ceil(p);
        if pages > usize::MAX as u64 {
            None
        } else {
            Some(pages as usize)
        }
    }
}

/// One listed layer group: its layers, window, formats and rotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LayerGroup {
    /// The layers it holds.
    pub layers: Layers,
    /// Its sliding window, or none (every position kept).
    pub window: Option<GroupWindow>,
    /// Storage format of its key pages.
    pub k_format: ElementFormat,
    /// Storage format of its value pages.
    pub v_format: ElementFormat,
    /// Rotation of its key rows.
    pub k_rotation: Rotation,
    /// Rotation of its value rows.
    pub v_rotation: Rotation,
}

impl LayerGroup {
    /// A group of `layers` with f32 pages, no rotation and no window.
    pub const fn new(layers: Layers) -> Self {
        LayerGroup {
            layers,
            window: None,
            k_format: ElementFormat::F32,
            v_format: ElementFormat::F32,
            k_rotation: Rotation::None,
            v_rotation: Rotation::None,
        }
    }

    /// Sets the sliding window (see [`GroupWindow`]).
    pub const fn with_window(mut self, window: GroupWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// Sets the K and V page formats.
    pub const fn with_formats(mut self, k: ElementFormat, v: ElementFormat) -> Self {
        self.k_format = k;
        self.v_format = v;
        self
    }

    /// Sets the K and V rotations.
    pub const fn with_rotations(mut self, k: Rotation, v: Rotation) -> Self {
        self.k_rotation = k;
        self.v_rotation = v;
        self
    }
}

/// The listed groups of a configuration, in order (group `i + 1` of the cache is listed group
/// `i`; group 0 is the base group: every layer no listed group holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LayerGroups {
    groups: [LayerGroup; MAX_GROUPS - 1],
    len: u8,
    /// More groups were pushed than fit (refused by the planner).
    overflow: bool,
}

/// The value of unused slots (never read, so that equal lists compare equal).
const UNUSED: LayerGroup = LayerGroup::new(Layers::Run { first: 0, count: 0 });

impl LayerGroups {
    /// No listed group: every layer is in the base group.
    pub const fn new() -> Self {
        LayerGroups {
            groups: [UNUSED; MAX_GROUPS - 1],
            len: 0,
            overflow: false,
        }
    }

    /// Appends a group; past `MAX_GROUPS − 1` listed groups the configuration no longer plans
    /// ([`TooManyGroups`](crate::ConfigError::TooManyGroups)).
    pub const fn with(mut self, group: LayerGroup) -> Self {
        if (self.len as usize) < self.groups.len() {
            self.groups[self.len as usize] = group;
            self.len += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// Listed groups.
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no group is listed.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether more groups were pushed than fit.
    pub const fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Listed group `i`, if any.
    pub const fn get(&self, i: usize) -> Option<&LayerGroup> {
        if i < self.len as usize {
            Some(&self.groups[i])
        } else {
            None
        }
    }

    /// The listed groups.
    pub fn as_slice(&self) -> &[LayerGroup] {
        &self.groups[..self.len as usize]
    }
}

impl Default for LayerGroups {
    fn default() -> Self {
        Self::new()
    }
}
