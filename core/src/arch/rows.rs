//! The operands of the page kernels: views of a page's rows, built by the page loop
//! (`attention::page::Layout`).

/// One head row of one token in a page: its value bytes and (int8) its scale bytes.
#[derive(Clone, Copy)]
pub(crate) struct Row<'p> {
    pub vals: &'p [u8],
    pub scales: &'p [u8],
}

/// One KV head's rows `0..n` of a page (row `r`'s value bytes at `vals[r·stride..]`, its scale
/// bytes at `scales[r·sstride..]`): what the ISAs' whole-page kernels take.
#[cfg(not(feature = "small-code"))]
#[derive(Clone, Copy)]
pub(crate) struct PageRows<'p> {
    pub(crate) vals: &'p [u8],
    pub(crate) scales: &'p [u8],
    pub(crate) stride: usize,
    pub(crate) sstride: usize,
    pub(crate) n: usize,
}

#[cfg(not(feature = "small-code"))]
impl<'p> PageRows<'p> {
    /// Row `r < n`, `d` value bytes and its scale bytes.
    #[inline(always)]
    pub(crate) fn row(&self, r: usize, d: usize) -> Row<'p> {
        Row {
            vals: &self.vals[r * self.stride..][..d],
            scales: &self.scales[r * self.sstride..],
        }
    }
}
