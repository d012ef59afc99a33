//! The KV cache the forward pass and [`Engine`](crate::Engine) work over: [`KvStore`], one
//! trait over edgekv's [`KvCache`] (every layer alike) and [`GroupedCache`] (layer groups, e.g.
//! Gemma 3's sliding-window layers beside its global ones). Each method is the cache's own,
//! with the same arguments, errors and all-or-nothing promise.

use edgekv::attention::AttentionParams;
use edgekv::prefix::PrefixHit;
use edgekv::{GroupedCache, GroupedPrefixHit, KvCache, PageAllocator, Result, SeqId, SeqMode};

/// What the forward pass needs of a KV cache: positions, K/V rows per layer, attention per
/// layer, sequences and prefix reuse. Implemented by [`KvCache`] and [`GroupedCache`]; a
/// grouped cache sends each per-layer call to the layer's group, whose configured window
/// applies when `params` give none.
pub trait KvStore {
    /// A prefix hit of [`lookup`](Self::lookup), taken back by [`attach`](Self::attach).
    type Hit;

    /// Token positions per page (every group has the same).
    fn page_tokens(&self) -> u16;

    /// Reserved positions of `seq` ([`KvCache::seq_len`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::seq_len`].
    fn seq_len(&self, seq: SeqId) -> Result<u32>;

    /// Reserves `n` more positions ([`KvCache::reserve`]); returns the first.
    ///
    /// # Errors
    ///
    /// As [`KvCache::reserve`].
    fn reserve(&mut self, seq: SeqId, n: u32) -> Result<u32>;

    /// Truncates `seq` to `len` positions ([`KvCache::truncate`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::truncate`].
    fn truncate(&mut self, seq: SeqId, len: u32) -> Result<()>;

    /// Writes K and V rows of `layer` at positions from `start` ([`KvCache::write_kv`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::write_kv`].
    fn write_kv(&mut self, seq: SeqId, layer: u16, start: u32, k: &[f32], v: &[f32]) -> Result<()>;

    /// Causal attention of the query rows at positions from `start` over `layer`
    /// ([`KvCache::attention`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::attention`].
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        scratch: &mut [f32],
    ) -> Result<()>;

    /// [`attention`](Self::attention) on `workers` ([`KvCache::attention_workers`]: a prefill's
    /// query rows, or a long decode row's key segments, shared between the team's threads), with
    /// the same bits.
    ///
    /// # Errors
    ///
    /// As [`KvCache::attention_workers`].
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    fn attention_workers(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        workers: &mut edgekv::Workers,
    ) -> Result<()>;

    /// A new sequence ([`KvCache::create_sequence`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::create_sequence`].
    fn create_sequence(&mut self, mode: SeqMode) -> Result<SeqId>;

    /// Frees a sequence ([`KvCache::free_sequence`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::free_sequence`].
    fn free_sequence(&mut self, seq: SeqId) -> Result<()>;

    /// The longest published prefix of `prompt` ([`KvCache::lookup`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::lookup`].
    fn lookup(&self, prompt: &[u32]) -> Result<Self::Hit>;

    /// Attaches a hit to an empty sequence ([`KvCache::attach`]); returns the positions attached.
    ///
    /// # Errors
    ///
    /// As [`KvCache::attach`].
    fn attach(&mut self, seq: SeqId, hit: &Self::Hit, prompt: &[u32]) -> Result<u32>;

    /// Publishes the prompt's whole chunks ([`KvCache::commit_prompt`]).
    ///
    /// # Errors
    ///
    /// As [`KvCache::commit_prompt`].
    fn commit_prompt(&mut self, seq: SeqId, prompt: &[u32]) -> Result<u16>;
}

/// Forwards every [`KvStore`] method to the inherent method of the same name.
macro_rules! forward_store {
    ($hit:ty) => {
        type Hit = $hit;

        fn page_tokens(&self) -> u16 {
            self.config().page_tokens
        }

        fn seq_len(&self, seq: SeqId) -> Result<u32> {
            Self::seq_len(self, seq)
        }

        fn reserve(&mut self, seq: SeqId, n: u32) -> Result<u32> {
            Self::reserve(self, seq, n)
        }

        fn truncate(&mut self, seq: SeqId, len: u32) -> Result<()> {
            Self::truncate(self, seq, len)
        }

        fn write_kv(
            &mut self,
            seq: SeqId,
            layer: u16,
            start: u32,
            k: &[f32],
            v: &[f32],
        ) -> Result<()> {
            Self::write_kv(self, seq, layer, start, k, v)
        }

        fn attention(
            &self,
            seq: SeqId,
            layer: u16,
            start: u32,
            q: &[f32],
            out: &mut [f32],
            params: &AttentionParams,
            scratch: &mut [f32],
        ) -> Result<()> {
            Self::attention(self, seq, layer, start, q, out, params, scratch)
        }

        #[cfg(feature = "std")]
        fn attention_workers(
            &self,
            seq: SeqId,
            layer: u16,
            start: u32,
            q: &[f32],
            out: &mut [f32],
            params: &AttentionParams,
            workers: &mut edgekv::Workers,
        ) -> Result<()> {
            Self::attention_workers(self, seq, layer, start, q, out, params, workers)
        }

        fn create_sequence(&mut self, mode: SeqMode) -> Result<SeqId> {
            Self::create_sequence(self, mode)
        }

        fn free_sequence(&mut self, seq: SeqId) -> Result<()> {
            Self::free_sequence(self, seq)
        }

        fn lookup(&self, prompt: &[u32]) -> Result<$hit> {
            Self::lookup(self, prompt)
        }

        fn attach(&mut self, seq: SeqId, hit: &$hit, prompt: &[u32]) -> Result<u32> {
            Self::attach(self, seq, hit, prompt)
        }

        fn commit_prompt(&mut self, seq: SeqId, prompt: &[u32]) -> Result<u16> {
            Self::commit_prompt(self, seq, prompt)
        }
    };
}

// `Sync` (both of edgekv's allocators are): the team's threads read the pages together.
impl<'c, A: PageAllocator<'c> + Sync> KvStore for KvCache<'c, A> {
    forward_store!(PrefixHit);
}

impl<'c, A: PageAllocator<'c> + Sync> KvStore for GroupedCache<'c, A> {
    forward_store!(GroupedPrefixHit);
}
