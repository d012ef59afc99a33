//! The operands of the page kernels: views of a page's rows, built by the page loop
//! (`attention::page::Layout`).

/// One head row of one token in a page: its value bytes and (int8) its scale bytes.
#[derive(Clone, Copy)]
pub(crate) struct Row<'p> {
    pub vals: &'p [u8],
    pub scales: &'p [u8],
}

/// One KV head's rows `0..n` of a page (row `r`'s value bytes at `vals[r·stride..]`, its scale
/// bytes at `scales[r·sstride..]`): what the ISAs' whole-page kernels take. Checked once, where
/// it is built ([`PageRows::new`]): `n ≥ 1` and every row's [`row_bytes`](Self::row_bytes)
/// value bytes and [`scale_bytes`](Self::scale_bytes) scale bytes lie within the slices, so a
/// kernel only compares the bytes its shape reads with those two.
#[cfg(not(feature = "small-code"))]
#[derive(Clone, Copy)]
pub(crate) struct PageRows<'p> {
    pub(crate) vals: &'p [u8],
    pub(crate) scales: &'p [u8],
    pub(crate) stride: usize,
    pub(crate) sstride: usize,
    pub(crate) n: usize,
    /// Value bytes of each row (within `vals`).
    // Read by the ISAs' page kernels only.
    #[cfg_attr(
        not(any(
            edgekv_x86_kernels,
            edgekv_aarch64_kernels,
            edgekv_arm_dsp,
            edgekv_arm_mve
        )),
        allow(dead_code)
    )]
    pub(crate) row_bytes: usize,
    /// Scale bytes of each row (within `scales`).
    #[cfg_attr(
        not(any(
            edgekv_x86_kernels,
            edgekv_aarch64_kernels,
            edgekv_arm_dsp,
            edgekv_arm_mve
        )),
        allow(dead_code)
    )]
    pub(crate) scale_bytes: usize,
    /// Only [`PageRows::new`] builds one.
    _checked: Checked,
}

/// The mark of a [`PageRows`] built by [`PageRows::new`] (a private field: no struct literal
/// elsewhere).
#[cfg(not(feature = "small-code"))]
#[derive(Clone, Copy)]
struct Checked;

#[cfg(not(feature = "small-code"))]
impl<'p> PageRows<'p> {
    /// `n` rows from the starts of `vals` and `scales`, `stride` and `sstride` bytes apart, of
    /// `row_bytes` value and `scale_bytes` scale bytes each; the slices cut to the last row's
    /// end. `None` if `n == 0` or a row would end past its slice.
    #[inline(always)]
    pub(crate) fn new(
        vals: &'p [u8],
        scales: &'p [u8],
        stride: usize,
        sstride: usize,
        n: usize,
        row_bytes: usize,
        scale_bytes: usize,
    ) -> Option<Self> {
        let last = n.checked_sub(1)?;
        let v_end = last.checked_mul(stride)?.checked_add(row_bytes)?;
        let s_end = last.checked_mul(sstride)?.checked_add(scale_bytes)?;
        Some(PageRows {
            vals: vals.get(..v_end)?,
            scales: scales.get(..s_end)?,
            stride,
            sstride,
            n,
            row_bytes,
            scale_bytes,
            _checked: Checked,
        })
    }

    /// Row `r < n`, `d` value bytes and its scale bytes.
    #[inline(always)]
    pub(crate) fn row(&self, r: usize, d: usize) -> Row<'p> {
        Row {
            vals: &self.vals[r * self.stride..][..d],
            scales: &self.scales[r * self.sstride..],
        }
    }
}
