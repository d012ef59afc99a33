//! The chunk planner and the reuse boundary.

use core::ops::Range;

/// The chunks of a prefill of positions `[start, end)`, aligned to absolute multiples of `chunk`:
/// the first runs from `start` to the next multiple of `chunk` (a whole chunk when `start` is on
/// the grid), then whole chunks, the last one cut at `end`. So after reusing `r` tokens (`r` a
/// multiple of `chunk`) the remaining chunks are exactly those a cold prefill computes past `r`.
/// An empty range or `chunk == 0` yields nothing.
///
/// ```
/// use edgekv::prefix::plan_prefill;
/// let chunks: Vec<_> = plan_prefill(40, 150, 64).collect();
/// assert_eq!(chunks, [40..64, 64..128, 128..150]);
/// ```
pub fn plan_prefill(start: u32, end: u32, chunk: u32) -> PrefillChunks {
    PrefillChunks {
        next: start,
        end: if chunk == 0 { start } else { end },
        chunk,
    }
}

/// Iterator of [`plan_prefill`].
#[derive(Debug, Clone)]
pub struct PrefillChunks {
    next: u32,
    end: u32,
    chunk: u32,
}

impl Iterator for PrefillChunks {
    type Item = Range<u32>;

    fn next(&mut self) -> Option<Range<u32>> {
        if self.next >= self.end {
            return None;
        }
        let start = self.next;
        let grid = (start / self.chunk)
            .saturating_add(1)
            .saturating_mul(self.chunk);
        let stop = grid.min(self.end);
        self.next = stop;
        Some(start..stop)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.next >= self.end {
            return (0, Some(0));
        }
        let first = self.next / self.chunk;
        let last = (self.end - 1) / self.chunk;
        let n = (last - first) as usize + 1;
        (n, Some(n))
    }
}

impl ExactSizeIterator for PrefillChunks {}
impl core::iter::FusedIterator for PrefillChunks {}

/// How many tokens of a `prompt_len`-token prompt may be reused when `matched` leading tokens
/// match KV computed as prompt: aligned down to `chunk` and capped at `prompt_len − 1` (the last
/// prompt token is always recomputed, its logits are needed). 0 for an empty prompt or chunk.
///
/// ```
/// use edgekv::prefix::reuse_boundary;
/// assert_eq!(reuse_boundary(200, 150, 64), 128);
/// assert_eq!(reuse_boundary(128, 128, 64), 64); // never the whole prompt
/// ```
pub const fn reuse_boundary(matched: u32, prompt_len: u32, chunk: u32) -> u32 {
    if chunk == 0 || prompt_len == 0 {
        return 0;
    }
    let cap = if matched < prompt_len - 1 {
        matched
    } else {
        prompt_len - 1
    };
    cap / chunk * chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn chunks_are_on_the_absolute_grid() {
        assert_eq!(plan_prefill(0, 0, 64).count(), 0);
        assert_eq!(plan_prefill(5, 3, 64).count(), 0);
        assert_eq!(plan_prefill(0, 10, 0).count(), 0);
        assert!(plan_prefill(0, 64, 64).eq(core::iter::once(0..64)));
        assert_eq!(
            plan_prefill(63, 65, 64).collect::<Vec<_>>(),
            [63..64, 64..65]
        );
        let near_max = plan_prefill(u32::MAX - 3, u32::MAX, 64);
        assert!(near_max.eq(core::iter::once(u32::MAX - 3..u32::MAX)));
        for (s, e, c) in [(0, 1000, 64), (17, 300, 16), (128, 129, 64), (3, 200, 7)] {
            let v: Vec<_> = plan_prefill(s, e, c).collect();
            assert_eq!(plan_prefill(s, e, c).len(), v.len());
            assert_eq!(v.first().map(|r| r.start), Some(s));
            assert_eq!(v.last().map(|r| r.end), Some(e));
            for w in v.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_eq!(w[0].end % c, 0, "inner boundaries on the grid");
            }
        }
    }

    #[test]
    fn chunks_after_reuse_equal_the_cold_chunks_past_the_reuse_point() {
        for end in [1u32, 63, 64, 65, 200, 1000] {
            for c in [16u32, 64, 128] {
                let cold: Vec<_> = plan_prefill(0, end, c).collect();
                let mut r = 0;
                while r < end {
                    let warm: Vec<_> = plan_prefill(r, end, c).collect();
                    let past: Vec<_> = cold.iter().filter(|k| k.start >= r).cloned().collect();
                    assert_eq!(warm, past, "end {end} chunk {c} reuse {r}");
                    r += c;
                }
            }
        }
    }

    #[test]
    fn boundary_alignment_and_cap() {
        assert_eq!(reuse_boundary(0, 10, 4), 0);
        assert_eq!(reuse_boundary(10, 0, 4), 0);
        assert_eq!(reuse_boundary(10, 10, 0), 0);
        assert_eq!(reuse_boundary(1000, 65, 64), 64);
        assert_eq!(reuse_boundary(1000, 64, 64), 0);
        assert_eq!(reuse_boundary(63, 1000, 64), 0);
        assert_eq!(
            reuse_boundary(u32::MAX, u32::MAX, 64),
            (u32::MAX - 1) / 64 * 64
        );
    }
}
