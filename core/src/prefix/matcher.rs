//! The common-prefix matcher.

/// Tokens compared per step of the fold: 16 `u32`s (64 bytes, one cache line), XORed and ORed
/// together, which compilers turn into vector compares, one branch per block, not per token.
const BLOCK: usize = 16;

/// Tokens per `memcmp` call on hosted targets (1 KiB).
const SPAN: usize = 256;

/// Whether whole spans go to `memcmp` first: on hosted targets the C library's `memcmp` is
/// vectorized for the CPU it runs on (AVX2 and wider on x86-64) and beats a fold built for the
/// baseline ISA; on bare metal `compiler-builtins` compares byte by byte, so the fold is faster.
const MEMCMP_SPANS: bool = cfg!(not(target_os = "none"));

/// The length of the longest common prefix of two token sequences.
///
/// Skips equal spans with slice equality (`memcmp`) on hosted targets, compares 16-token blocks
/// with a branch-free XOR/OR fold, then locates the mismatch inside the first unequal block.
/// Safe Rust, no allocation, O(prefix).
///
/// ```
/// use edgekv::prefix::common_prefix_len;
/// assert_eq!(common_prefix_len(&[1, 2, 3, 9], &[1, 2, 3, 4, 5]), 3);
/// assert_eq!(common_prefix_len(&[], &[1]), 0);
/// ```
pub fn common_prefix_len(a: &[u32], b: &[u32]) -> usize {
    prefix_len(a, b, MEMCMP_SPANS)
}

fn prefix_len(a: &[u32], b: &[u32], memcmp_spans: bool) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut equal = 0;
    if memcmp_spans {
        for (x, y) in a.chunks_exact(SPAN).zip(b.chunks_exact(SPAN)) {
            if x != y {
                break;
            }
            equal += SPAN;
        }
    }
    let (a, b) = (&a[equal..], &b[equal..]);
    for (x, y) in a.chunks_exact(BLOCK).zip(b.chunks_exact(BLOCK)) {
        let diff = x.iter().zip(y).fold(0, |acc, (p, q)| acc | (p ^ q));
        if diff != 0 {
            break;
        }
        equal += BLOCK;
    }
    let start = equal - (n - a.len());
    let rest = a[start..].iter().zip(&b[start..]);
    equal + rest.take_while(|(p, q)| p == q).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn edge_cases() {
        assert_eq!(common_prefix_len(&[], &[]), 0);
        assert_eq!(common_prefix_len(&[7], &[7]), 1);
        assert_eq!(common_prefix_len(&[7], &[8]), 0);
        assert_eq!(common_prefix_len(&[7], &[]), 0);
        let long: Vec<u32> = (0..100).collect();
        assert_eq!(common_prefix_len(&long, &long[..37]), 37);
        assert_eq!(common_prefix_len(&long[..37], &long), 37);
        assert_eq!(common_prefix_len(&long, &long), 100);
    }

    #[test]
    fn mismatch_at_every_position_of_a_300_token_pair() {
        let a: Vec<u32> = (0..300u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let step = if cfg!(miri) { 17 } else { 1 };
        for at in (0..300).step_by(step) {
            let mut b = a.clone();
            b[at] ^= 1 << (at % 32);
            for spans in [false, true] {
                assert_eq!(prefix_len(&a, &b, spans), at, "mismatch at {at}");
                assert_eq!(prefix_len(&b, &a, spans), at);
            }
            // Unequal lengths: the shorter one is a prefix.
            assert_eq!(common_prefix_len(&a[..at], &a), at);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 8 } else { 2000 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        #[test]
        fn agrees_with_the_naive_loop(
            a in proptest::collection::vec(0u32..4, 0..700),
            b in proptest::collection::vec(0u32..4, 0..700),
            shared in 0usize..700,
        ) {
            // Force long common prefixes by copying a prefix of `a` into `b`.
            let mut b = b;
            let k = shared.min(a.len()).min(b.len());
            b[..k].copy_from_slice(&a[..k]);
            prop_assert_eq!(prefix_len(&a, &b, false), naive(&a, &b));
            prop_assert_eq!(prefix_len(&a, &b, true), naive(&a, &b));
        }
    }
}
