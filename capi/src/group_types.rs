//! The C structs of layer groups (a grouped configuration, its plan) and their conversions to
//! the Rust types. Malformed groups are refused here with the precise group codes before the
//! planner sees them.

use edgekv::{CacheConfig, GroupWindow, GroupedPlan, LayerGroup, Layers, MAX_GROUPS};

use super::status::{EKV_ERR_INVALID_ARGUMENT, EKV_ERR_INVALID_GROUP, EKV_ERR_TOO_MANY_GROUPS};
use super::status::{Fail, Res};
use super::types::{AllocKind, EkvConfig, EkvFormat, EkvPlan};

/// Most layer groups a grouped cache has: the base group and up to `EKV_MAX_GROUPS - 1` listed
/// ones.
pub const EKV_MAX_GROUPS: usize = 4;
/// Listed layer groups a grouped configuration can hold (`EKV_MAX_GROUPS - 1`).
pub const EKV_MAX_LISTED_GROUPS: usize = 3;

const _: () = assert!(EKV_MAX_GROUPS == MAX_GROUPS && EKV_MAX_LISTED_GROUPS == MAX_GROUPS - 1);

/// `ekv_layer_group_t.layers`: `count` consecutive layers from `first`.
pub const EKV_LAYERS_RUN: u32 = 0;
/// `ekv_layer_group_t.layers`: every `count`-th layer from `first` (`first`, `first + count`,
/// ...): Gemma 3's global layers of 18 are `{EKV_LAYERS_EVERY, first 5, count 6}`.
pub const EKV_LAYERS_EVERY: u32 = 1;

/// A layer group's sliding window with attention sinks: query position `t` sees key `j <= t`
/// when `j < sinks` or `t - j < window`. Pages no later query can see are released as the
/// sequence grows, except the last `rollback` positions' worth (kept so the sequence can be
/// truncated back by that much). `enabled` 0: no window, every position kept (the other fields
/// must then be 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvWindow {
    /// 1: the group is windowed; 0: it keeps every position.
    pub enabled: u8,
    /// Must be 0.
    pub reserved: [u8; 3],
    /// Most recent positions a query sees, its own included (>= 1 when enabled, else
    /// `EKV_ERR_INVALID_GROUP`).
    pub window: u32,
    /// Leading positions every query sees.
    pub sinks: u32,
    /// Positions kept beyond what the window needs, for truncation back by up to that many.
    pub rollback: u32,
}

impl EkvWindow {
    /// The Rust window (`None` when disabled), or the code of a malformed one.
    fn to_rust(self) -> Res<Option<GroupWindow>> {
        if self.reserved != [0; 3] || self.enabled > 1 {
            return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
        }
        if self.enabled == 0 {
            if (self.window, self.sinks, self.rollback) != (0, 0, 0) {
                return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
            }
            return Ok(None);
        }
        if self.window == 0 {
            return Err(Fail(EKV_ERR_INVALID_GROUP));
        }
        Ok(Some(GroupWindow {
            window: self.window,
            sinks: self.sinks,
            rollback: self.rollback,
        }))
    }
}

/// One listed layer group: its layers, window and K / V formats (rotations in the formats'
/// `rotation` fields). Its layers leave the base group.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvLayerGroup {
    /// `EKV_LAYERS_RUN` or `EKV_LAYERS_EVERY`.
    pub layers: u32,
    /// First layer of the group.
    pub first: u16,
    /// `EKV_LAYERS_RUN`: layers in the run; `EKV_LAYERS_EVERY`: the period (>= 1, else
    /// `EKV_ERR_INVALID_GROUP`).
    pub count: u16,
    /// Its sliding window, or none.
    pub window: EkvWindow,
    /// Storage format (and rotation) of its key pages.
    pub k_format: EkvFormat,
    /// Storage format (and rotation) of its value pages.
    pub v_format: EkvFormat,
}

impl EkvLayerGroup {
    /// The Rust group, or the code of a malformed one.
    fn to_rust(self) -> Res<LayerGroup> {
        if self.count == 0 {
            return Err(Fail(EKV_ERR_INVALID_GROUP));
        }
        let layers = match self.layers {
            EKV_LAYERS_RUN => Layers::Run {
                first: self.first,
                count: self.count,
            },
            EKV_LAYERS_EVERY => Layers::Every {
                period: self.count,
                first: self.first,
            },
            _ => return Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
        };
        let mut g = LayerGroup::new(layers)
            .with_formats(self.k_format.to_rust()?, self.v_format.to_rust()?)
            .with_rotations(self.k_format.rotation()?, self.v_format.rotation()?);
        g.window = self.window.to_rust()?;
        Ok(g)
    }
}

/// A configuration of layer groups: `base` configures the cache (shape, page size, sequences,
/// prefix index...) and group 0, the base group, which holds every layer no listed group holds
/// (with `base`'s formats and `window`); `groups[0..group_count]` are groups 1, 2, ... Grouped
/// caches use the free-list allocator (`base.allocator` must be `EKV_ALLOC_FREE_LIST`) and paged
/// sequences.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvGroupedConfig {
    /// The cache's configuration and the base group's formats.
    pub base: EkvConfig,
    /// The base group's sliding window, or none.
    pub window: EkvWindow,
    /// Listed groups in `groups` (at most `EKV_MAX_LISTED_GROUPS`, else
    /// `EKV_ERR_TOO_MANY_GROUPS`).
    pub group_count: u32,
    /// The listed groups; entries past `group_count` must be zero.
    pub groups: [EkvLayerGroup; EKV_MAX_LISTED_GROUPS],
}

impl EkvGroupedConfig {
    /// The defaults of `ekv_config_init`, no window, no listed group.
    pub(crate) fn defaults(layers: u16, kv_heads: u16, head_dim: u16) -> Self {
        EkvGroupedConfig {
            base: EkvConfig::defaults(layers, kv_heads, head_dim),
            ..EkvGroupedConfig::default()
        }
    }

    /// The Rust configuration, or the code of what is malformed (the planner checks the rest:
    /// overlapping groups, layers out of range, an empty base group).
    pub(crate) fn to_rust(self) -> Res<CacheConfig> {
        let (mut config, alloc) = self.base.to_rust()?;
        if alloc != AllocKind::FreeList {
            return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
        }
        let count = self.group_count as usize;
        if count > EKV_MAX_LISTED_GROUPS {
            return Err(Fail(EKV_ERR_TOO_MANY_GROUPS));
        }
        if self.groups[count..]
            .iter()
            .any(|g| *g != EkvLayerGroup::default())
        {
            return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
        }
        config.window = self.window.to_rust()?;
        for g in &self.groups[..count] {
            config = config.with_group(g.to_rust()?);
        }
        Ok(config)
    }
}

/// The plan of a grouped configuration: each group's pages and arena layout, and the context the
/// data arena then holds.
///
/// Groups follow each other in the data arena in group order, group `g`'s pools from
/// `data_offset[g]`, each laid out as `ekv_plan_t` describes for a cache of that group's layers
/// (numbered in model order inside the group). The metadata arena holds the cache object
/// first, then each group's bookkeeping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvGroupedPlan {
    /// Layer groups (1 ..= `EKV_MAX_GROUPS`).
    pub group_count: u32,
    /// The longest sequence the data arena holds when it is the only one (tokens of context).
    pub context_tokens: u32,
    /// Bytes the data arena must have (aligned to `data_align`).
    pub data_bytes: usize,
    /// Bytes the metadata arena must have (aligned to `meta_align`): the cache object and every
    /// group's bookkeeping.
    pub meta_bytes: usize,
    /// Alignment the data arena needs.
    pub data_align: usize,
    /// Alignment the metadata arena needs.
    pub meta_align: usize,
    /// Byte offset of each group's pools in the data arena (0 past `group_count`).
    pub data_offset: [usize; EKV_MAX_GROUPS],
    /// Each group's plan (zero past `group_count`): `num_pages`, `page_bytes` (one page id of
    /// the group's layers), `data_bytes` (the group's part of the data arena)...
    /// `split_bytes` is 0 (grouped caches take two arenas).
    pub groups: [EkvPlan; EKV_MAX_GROUPS],
}

impl EkvGroupedPlan {
    /// The C view of a grouped plan, with `object` bytes of metadata before the groups'.
    pub(crate) fn from_rust(p: &GroupedPlan, object: usize) -> Res<Self> {
        let mut out = EkvGroupedPlan {
            group_count: p.group_count() as u32,
            context_tokens: p.context_tokens,
            data_bytes: p.data_bytes,
            meta_bytes: p
                .meta_bytes
                .checked_add(object)
                .ok_or(Fail(super::status::EKV_ERR_OVERFLOW))?,
            data_align: 0,
            meta_align: edgekv::META_ALIGN,
            ..EkvGroupedPlan::default()
        };
        for g in 0..p.group_count() {
            let (Some(plan), Some(offset)) = (p.group(g), p.data_offset(g)) else {
                break;
            };
            out.data_align = plan.geometry.align;
            out.data_offset[g] = offset;
            out.groups[g] = EkvPlan {
                split_bytes: 0,
                ..EkvPlan::from_rust(plan)
            };
        }
        Ok(out)
    }
}
