//! The chained page hash and namespaces.

use xxhash_rust::const_xxh3::xxh3_64_with_seed as const_xxh3;
#[cfg(any(test, not(feature = "small-code")))]
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A page hash: `h_i = hasher(h_{i-1}, tokens of page i)`, with `h_{-1}` the cache's namespace.
///
/// The default is [`page_hash`]. Another function can be set with
/// [`KvCache::set_page_hasher`](crate::KvCache::set_page_hasher) (tests use a deliberately weak
/// one to show that collisions never reuse wrong KV: every hit is verified token for token).
pub type PageHasher = fn(prev: u64, tokens: &[u32]) -> u64;

/// The default page hash: XXH3-64 of the page's token ids (little-endian `u32`s on every supported
/// target), seeded with the previous page's hash. (`small-code` builds compute the same bits in
/// rolled loops.)
pub fn page_hash(prev: u64, tokens: &[u32]) -> u64 {
    #[cfg(feature = "small-code")]
    return super::xxh3::xxh3_tokens(tokens, prev);
    #[cfg(not(feature = "small-code"))]
    xxh3_64_with_seed(bytemuck::cast_slice(tokens), prev)
}

/// A namespace for [`CacheConfig::with_namespace`](crate::CacheConfig::with_namespace): XXH3-64
/// chained over `parts` (model fingerprint, adapter, salt…), so KV computed under one model or
/// adapter is never found under another. `const`, so firmware can fix it at compile time.
///
/// ```
/// const NS: u64 = edgekv::prefix::namespace(&[b"SmolLM2-135M-Instruct.Q4_1", b"no-adapter"]);
/// assert_ne!(NS, edgekv::prefix::namespace(&[b"SmolLM2-135M-Instruct.Q4_1", b"lora-7"]));
/// ```
pub const fn namespace(parts: &[&[u8]]) -> u64 {
    let mut h = 0;
    let mut i = 0;
    while i < parts.len() {
        h = const_xxh3(parts[i], h);
        i += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_hash_depends_on_order_content_and_seed() {
        let a = page_hash(0, &[1, 2, 3, 4]);
        assert_ne!(a, page_hash(0, &[1, 2, 4, 3]));
        assert_ne!(a, page_hash(1, &[1, 2, 3, 4]));
        assert_eq!(a, page_hash(0, &[1, 2, 3, 4]));
        // Part boundaries matter.
        assert_ne!(namespace(&[b"ab", b"c"]), namespace(&[b"a", b"bc"]));
        assert_eq!(
            namespace(&[b"model"]),
            xxh3_64_with_seed(b"model", 0),
            "const and runtime XXH3 agree"
        );
    }
}
