//! Planning a configuration of several layer groups: each group's pages, its pools' place in
//! the data arena, and the tokens of context the arena then holds.
//!
//! Groups follow each other in the data arena in group order, each laid out as a cache of one
//! group is (see the module docs of `planner`), from an offset that is a multiple of the
//! alignment. Groups that keep every position get the same page count N, as many as fit; a
//! windowed group gets `min(N, max_seqs × pages_per_sequence)` (see
//! [`GroupWindow::pages_per_sequence`](crate::GroupWindow::pages_per_sequence)), since it never
//! holds more. When every group is windowed, every group gets N.

use super::{MAX_PAGES, PageGeometry, Plan};
use crate::config::{CacheConfig, MAX_GROUPS};
use crate::error::ConfigError;

/// A checked plan of every layer group of a configuration: one [`Plan`] per group (its pools'
/// offsets are relative to the group's start in the data arena, [`data_offset`](Self::data_offset)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupedPlan {
    plans: [Plan; MAX_GROUPS],
    offsets: [usize; MAX_GROUPS],
    count: u8,
    /// Bytes of the data arena all groups use.
    pub data_bytes: usize,
    /// Bytes of metadata the groups' plans add up to.
    pub meta_bytes: usize,
    /// The longest sequence the arena holds when it is the only one: the context.
    pub context_tokens: u32,
}

impl GroupedPlan {
    /// Groups.
    pub const fn group_count(&self) -> usize {
        self.count as usize
    }

    /// The plan of group `g`, or `None` past the last group.
    pub const fn group(&self, g: usize) -> Option<&Plan> {
        if g < self.count as usize {
            Some(&self.plans[g])
        } else {
            None
        }
    }

    /// Byte offset of group `g`'s pools in the data arena, or `None` past the last group.
    pub const fn data_offset(&self, g: usize) -> Option<usize> {
        if g < self.count as usize {
            Some(self.offsets[g])
        } else {
            None
        }
    }
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Err(e),
        }
    };
}

impl CacheConfig {
    /// Plans every layer group over a data arena of `data_bytes` (see the module docs for how
    /// pages are shared out); for a configuration of one group, the group's plan is
    /// [`plan`](Self::plan)'s.
    ///
    /// # Errors
    ///
    /// As [`group_geometry`](Self::group_geometry) for each group;
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) when not one page of every group fits,
    /// [`Overflow`](ConfigError::Overflow).
    pub const fn plan_groups(
        &self,
        data_bytes: usize,
        alloc_bits_per_page: usize,
    ) -> Result<GroupedPlan, ConfigError> {
        let n = self.group_count();
        let mut geos = [tri!(self.group_geometry(0)); MAX_GROUPS];
        let mut caps = [usize::MAX; MAX_GROUPS];
        let mut per_seq = [usize::MAX; MAX_GROUPS];
        let mut any_global = false;
        let mut g = 0;
        while g < n {
            geos[g] = tri!(self.group_geometry(g));
            per_seq[g] = tri!(self.per_sequence(g));
            if per_seq[g] == usize::MAX {
                any_global = true;
            } else {
                caps[g] = per_seq[g].saturating_mul(self.max_seqs as usize);
            }
            g += 1;
        }
        if !any_global {
            caps = [usize::MAX; MAX_GROUPS];
        }
        // The largest N whose pages fit.
        let mut lo = 0usize;
        let mut hi = MAX_PAGES;
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let fits = match bytes_at(&geos, &caps, n, mid) {
                Some(b) => b <= data_bytes,
                None => false,
            };
            if fits {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            return Err(ConfigError::ArenaTooSmall);
        }
        let mut pages = [0usize; MAX_GROUPS];
        let mut g = 0;
        while g < n {
            pages[g] = pages_at(caps[g], lo);
            g += 1;
        }
        self.assemble(&geos, &per_seq, &pages, alloc_bits_per_page)
    }

    /// Plans every layer group with exactly `pages[g]` pages in group `g` (one count per group,
    /// in group order): the arenas' sizes follow. For callers that size each group themselves
    /// (and tests that exhaust one group's pool).
    ///
    /// # Errors
    ///
    /// As [`group_geometry`](Self::group_geometry) for each group;
    /// [`InvalidGroup`](ConfigError::InvalidGroup) when `pages` does not hold one count per
    /// group; [`ZeroSize`](ConfigError::ZeroSize) for a count of 0,
    /// [`Overflow`](ConfigError::Overflow) past [`MAX_PAGES`](super::MAX_PAGES) or `usize`.
    pub const fn plan_group_pages(
        &self,
        pages: &[usize],
        alloc_bits_per_page: usize,
    ) -> Result<GroupedPlan, ConfigError> {
        let n = self.group_count();
        let mut geos = [tri!(self.group_geometry(0)); MAX_GROUPS];
        let mut per_seq = [usize::MAX; MAX_GROUPS];
        if pages.len() != n {
            return Err(ConfigError::InvalidGroup);
        }
        let mut counts = [0usize; MAX_GROUPS];
        let mut g = 0;
        while g < n {
            geos[g] = tri!(self.group_geometry(g));
            per_seq[g] = tri!(self.per_sequence(g));
            counts[g] = pages[g];
            g += 1;
        }
        self.assemble(&geos, &per_seq, &counts, alloc_bits_per_page)
    }

    /// Plans every layer group for `seqs` sequences of `tokens_per_seq` positions each, without
    /// sharing: a group that keeps every position gets `⌈tokens_per_seq / page_tokens⌉` pages per
    /// sequence, a windowed group at most its per-sequence bound
    /// ([`GroupWindow::pages_per_sequence`](crate::GroupWindow::pages_per_sequence)). The
    /// arenas' sizes follow ([`data_bytes`](GroupedPlan::data_bytes),
    /// [`meta_bytes`](GroupedPlan::meta_bytes)): the bytes a grouped context needs.
    ///
    /// # Errors
    ///
    /// [`ZeroSize`](ConfigError::ZeroSize) for zero tokens or sequences;
    /// [`Overflow`](ConfigError::Overflow) past `max_seqs` sequences or `max_seq_tokens`
    /// positions (the cache could not hold them) or past `usize`; as
    /// [`plan_group_pages`](Self::plan_group_pages) otherwise.
    pub const fn plan_groups_for(
        &self,
        tokens_per_seq: u32,
        seqs: u16,
        alloc_bits_per_page: usize,
    ) -> Result<GroupedPlan, ConfigError> {
        if tokens_per_seq == 0 || seqs == 0 || self.page_tokens == 0 {
            return Err(ConfigError::ZeroSize);
        }
        if seqs > self.max_seqs || tokens_per_seq > self.max_seq_tokens {
            return Err(ConfigError::Overflow);
        }
        let n = self.group_count();
        let mut geos = [tri!(self.group_geometry(0)); MAX_GROUPS];
        let mut per_seq = [usize::MAX; MAX_GROUPS];
        let mut pages = [0usize; MAX_GROUPS];
        let full = (tokens_per_seq as usize).div_ceil(self.page_tokens as usize);
        let mut g = 0;
        while g < n {
            geos[g] = tri!(self.group_geometry(g));
            per_seq[g] = tri!(self.per_sequence(g));
            let one = if per_seq[g] < full { per_seq[g] } else { full };
            pages[g] = match one.checked_mul(seqs as usize) {
                Some(p) => p,
                None => return Err(ConfigError::Overflow),
            };
            g += 1;
        }
        self.assemble(&geos, &per_seq, &pages, alloc_bits_per_page)
    }

    /// Pages one sequence holds at most in windowed group `g` (`usize::MAX` for a group that
    /// keeps every position).
    const fn per_sequence(&self, g: usize) -> Result<usize, ConfigError> {
        let window = match self.group(g) {
            Some(group) => group.window,
            None => None,
        };
        match window {
            Some(w) => match w.pages_per_sequence(self.page_tokens as u32, self.chunk()) {
                Some(p) => Ok(p),
                None => Err(ConfigError::Overflow),
            },
            None => Ok(usize::MAX),
        }
    }

    /// The plan of `pages[g]` pages of geometry `geos[g]` for every group, laid out in group
    /// order.
    const fn assemble(
        &self,
        geos: &[PageGeometry; MAX_GROUPS],
        per_seq: &[usize; MAX_GROUPS],
        pages: &[usize; MAX_GROUPS],
        alloc_bits_per_page: usize,
    ) -> Result<GroupedPlan, ConfigError> {
        let n = self.group_count();
        let first = tri!(self.plan_geometry(
            geos[0],
            per_seq[0] != usize::MAX,
            pages[0],
            alloc_bits_per_page
        ));
        let mut plans = [first; MAX_GROUPS];
        let mut offsets = [0usize; MAX_GROUPS];
        let mut offset = 0usize;
        let mut meta = 0usize;
        let mut context = self.max_seq_tokens as u64;
        let mut g = 0;
        while g < n {
            let windowed = per_seq[g] != usize::MAX;
            let plan = tri!(self.plan_geometry(geos[g], windowed, pages[g], alloc_bits_per_page));
            plans[g] = plan;
            offsets[g] = offset;
            offset = match offset.checked_add(plan.data_bytes) {
                Some(v) => v,
                None => return Err(ConfigError::Overflow),
            };
            meta = match meta.checked_add(plan.meta.total) {
                Some(v) => v,
                None => return Err(ConfigError::Overflow),
            };
            // A windowed group holding its per-sequence bound never limits the length.
            let limit = if pages[g] >= per_seq[g] {
                u64::MAX
            } else {
                pages[g] as u64 * self.page_tokens as u64
            };
            if limit < context {
                context = limit;
            }
            g += 1;
        }
        Ok(GroupedPlan {
            plans,
            offsets,
            count: n as u8,
            data_bytes: offset,
            meta_bytes: meta,
            context_tokens: context as u32,
        })
    }
}

/// Pages of a group with cap `cap` when global groups get `n`.
const fn pages_at(cap: usize, n: usize) -> usize {
    if cap < n { cap } else { n }
}

/// Data bytes of the first `count` groups when global groups get `n` pages.
const fn bytes_at(
    geos: &[PageGeometry; MAX_GROUPS],
    caps: &[usize; MAX_GROUPS],
    count: usize,
    n: usize,
) -> Option<usize> {
    let mut total = 0usize;
    let mut g = 0;
    while g < count {
        let bytes = match geos[g].page_bytes.checked_mul(pages_at(caps[g], n)) {
            Some(b) => b,
            None => return None,
        };
        total = match total.checked_add(bytes) {
            Some(t) => t,
            None => return None,
        };
        g += 1;
    }
    Some(total)
}
