//! A page id's byte geometry ([`PageGeometry`]: row bytes and pool strides) and the four pools
//! of a layer ([`PoolKind`]), as the planner derives them from a [`CacheConfig`].

#[cfg(doc)]
use super::CacheConfig;
use crate::shape::Kv;

/// Byte geometry of one page id, derived from a [`CacheConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageGeometry {
    /// Tokens per page.
    pub page_tokens: u16,
    /// Data-arena alignment.
    pub align: usize,
    /// Layers.
    pub layers: u16,
    /// Bytes of one token row in a K value page.
    pub k_row_bytes: usize,
    /// Bytes of one token row in a V value page.
    pub v_row_bytes: usize,
    /// Bytes of one token row in a K scale page (0 without scales).
    pub k_scale_row_bytes: usize,
    /// Bytes of one token row in a V scale page (0 without scales).
    pub v_scale_row_bytes: usize,
    /// Stride of the K value pool.
    pub k_stride: usize,
    /// Stride of the K scale pool (0 without scales).
    pub k_scale_stride: usize,
    /// Stride of the V value pool.
    pub v_stride: usize,
    /// Stride of the V scale pool (0 without scales).
    pub v_scale_stride: usize,
    /// Sum of the four strides: one page id's bytes in one layer.
    pub layer_stride: usize,
    /// One page id's bytes across all layers, K and V, values and scales.
    pub page_bytes: usize,
    /// Every pool's page size is a multiple of the alignment: runs of pages are linear tensors.
    pub natural: bool,
    /// Pages of the longest sequence (`ceil(max_seq_tokens / page_tokens)`).
    pub table_len: usize,
}

/// The four pools of one layer, in arena order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PoolKind {
    /// K values.
    KValues,
    /// K scales (empty for full-precision formats).
    KScales,
    /// V values.
    VValues,
    /// V scales (empty for full-precision formats).
    VScales,
}

/// The former name of [`PoolKind`] (kept so that existing code compiles).
#[deprecated(note = "renamed: `PoolKind`")]
pub type Pool = PoolKind;

impl PoolKind {
    /// All pools in arena order.
    pub const ALL: [PoolKind; 4] = [
        PoolKind::KValues,
        PoolKind::KScales,
        PoolKind::VValues,
        PoolKind::VScales,
    ];

    /// The value pool of K or V.
    pub const fn values(kv: Kv) -> PoolKind {
        match kv {
            Kv::K => PoolKind::KValues,
            Kv::V => PoolKind::VValues,
        }
    }

    /// The scale pool of K or V.
    pub const fn scales(kv: Kv) -> PoolKind {
        match kv {
            Kv::K => PoolKind::KScales,
            Kv::V => PoolKind::VScales,
        }
    }
}

impl PageGeometry {
    /// Stride of any pool.
    pub const fn pool_stride(&self, pool: PoolKind) -> usize {
        match pool {
            PoolKind::KValues => self.k_stride,
            PoolKind::KScales => self.k_scale_stride,
            PoolKind::VValues => self.v_stride,
            PoolKind::VScales => self.v_scale_stride,
        }
    }

    /// Row bytes of the K or V value pool.
    pub const fn row_bytes(&self, kv: Kv) -> usize {
        match kv {
            Kv::K => self.k_row_bytes,
            Kv::V => self.v_row_bytes,
        }
    }

    /// Bytes one token takes in `pool` (0 for the scale pool of a full-precision format).
    pub const fn pool_row_bytes(&self, pool: PoolKind) -> usize {
        match pool {
            PoolKind::KValues => self.k_row_bytes,
            PoolKind::KScales => self.k_scale_row_bytes,
            PoolKind::VValues => self.v_row_bytes,
            PoolKind::VScales => self.v_scale_row_bytes,
        }
    }

    /// Row bytes of the K or V scale pool (0 without scales).
    pub const fn scale_row_bytes(&self, kv: Kv) -> usize {
        match kv {
            Kv::K => self.k_scale_row_bytes,
            Kv::V => self.v_scale_row_bytes,
        }
    }

    /// Stride of the K or V value pool.
    pub const fn stride(&self, kv: Kv) -> usize {
        match kv {
            Kv::K => self.k_stride,
            Kv::V => self.v_stride,
        }
    }
}
