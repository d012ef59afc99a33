//! Model shape and the K/V selector.

/// The attention shape a cache serves: one page table per sequence covers every layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Shape {
    /// Transformer layers (each has its own K and V pools).
    pub layers: u16,
    /// Key/value heads per layer (grouped-query attention shares them among query heads).
    pub kv_heads: u16,
    /// Elements per head vector.
    pub head_dim: u16,
}

impl Shape {
    /// SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64.
    pub const SMOLLM2_135M: Shape = Shape {
        layers: 30,
        kv_heads: 3,
        head_dim: 64,
    };

    /// Elements in one token's row for one layer and one of K or V: `kv_heads * head_dim`.
    pub const fn row_elems(&self) -> usize {
        self.kv_heads as usize * self.head_dim as usize
    }
}

/// Selects the key or the value half of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Kv {
    /// Keys.
    K,
    /// Values.
    V,
}
