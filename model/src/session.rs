//! A model's KV cache: prefill in chunks aligned to absolute positions, prefix reuse, greedy
//! generation and chat turns.
//!
//! The cache is a [`GroupedCache`]: one layer group for a model whose layers all attend to the
//! whole context (SmolLM2; the same pages and bits as a plain [`KvCache`](edgekv::KvCache)), and
//! for Gemma 3 its sliding-window layers in a group of their own, which holds only the pages
//! their window still sees (about 36 per sequence for a 512-token window) and releases the rest.

use std::time::{Duration, Instant};

use edgekv::prefix::plan_prefill;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupedCache, HeapArena, LayerGroups, Rotation, SeqId,
    SeqMode,
};

use crate::forward::ROWS_PER_PIECE;
use crate::{Error, Llama, Logits, Result};

/// Where a reused prefix may end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReuseAlign {
    /// At a multiple of the prefill chunk C: the reused positions are exactly those a cold
    /// prefill computes in whole chunks, so reuse is bit-exact even with kernels whose results
    /// depend on how rows are batched.
    Chunk,
    /// At a page boundary (finer, so more is reused). Bit-exact because this forward pass
    /// computes every row alone (the tests check chunked against unchunked logits bit for bit).
    Page,
}

/// How a [`Session`]'s cache is laid out and used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOptions {
    /// Key page format.
    pub k_format: ElementFormat,
    /// Value page format.
    pub v_format: ElementFormat,
    /// Rotation of key rows before they are stored.
    pub k_rotation: Rotation,
    /// Rotation of value rows before they are stored.
    pub v_rotation: Rotation,
    /// Tokens per page.
    pub page_tokens: u16,
    /// Prefill chunk C in tokens (a multiple of `page_tokens`): chunks start at absolute
    /// multiples of C.
    pub prefill_chunk: u16,
    /// Alignment of reused prefixes.
    pub reuse: ReuseAlign,
    /// Sequence slots.
    pub sequences: u16,
    /// Longest sequence in tokens.
    pub max_tokens: u32,
    /// Pages in the pool (each holds `page_tokens` positions of every layer). A windowed layer
    /// group (Gemma 3's sliding-window layers) gets no more than its window needs: per sequence
    /// [`GroupWindow::pages_per_sequence`](edgekv::GroupWindow::pages_per_sequence), for
    /// `sequences + 1` sequences (the one more keeps published prefixes for reuse).
    pub pages: u16,
    /// Positions a windowed layer group keeps beyond its window, so that a sequence can be
    /// truncated back by that many (a chat turn whose re-tokenized reply differs from the
    /// generated ids near its end). Models without windowed layers ignore it.
    pub rollback: u32,
}

impl Default for SessionOptions {
    /// int8 (Q8_0) K and V, 16-token pages, C = 64, page-aligned reuse, 4 sequences of up to
    /// 4096 tokens, 1024 pages (16,384 positions), a rollback of 64 positions.
    fn default() -> Self {
        SessionOptions {
            k_format: ElementFormat::Q8_0,
            v_format: ElementFormat::Q8_0,
            k_rotation: Rotation::None,
            v_rotation: Rotation::None,
            page_tokens: 16,
            prefill_chunk: 64,
            reuse: ReuseAlign::Page,
            sequences: 4,
            max_tokens: 4096,
            pages: 1024,
            rollback: 64,
        }
    }
}

impl SessionOptions {
    /// These options with `format` for both K and V.
    pub fn with_format(mut self, format: ElementFormat) -> Self {
        self.k_format = format;
        self.v_format = format;
        self
    }

    /// These options with the K and V formats and rotations of `kv`.
    pub fn with_kv(mut self, kv: KvStorage) -> Self {
        (self.k_format, self.v_format) = (kv.k, kv.v);
        (self.k_rotation, self.v_rotation) = (kv.k_rotation, kv.v_rotation);
        self
    }

    /// The edgekv configuration for `model`: its layer groups
    /// ([`LlamaConfig::cache_config`](edgekv_llm::LlamaConfig::cache_config)) with these
    /// formats, rotations and, in windowed groups, rollback.
    pub fn cache_config(&self, model: &Llama) -> Result<CacheConfig> {
        let reuse_chunk = match self.reuse {
            ReuseAlign::Chunk => self.prefill_chunk,
            ReuseAlign::Page => 0,
        };
        if self.page_tokens == 0 || self.prefill_chunk % self.page_tokens != 0 {
            return Err(Error::Input(format!(
                "prefill chunk {} is not a multiple of the page size {}",
                self.prefill_chunk, self.page_tokens
            )));
        }
        let mut config = model
            .config()
            .cache_config(self.k_format, self.v_format)?
            .with_rotations(self.k_rotation, self.v_rotation)
            .with_page_tokens(self.page_tokens)
            .with_chunk_tokens(reuse_chunk)
            .with_sequences(self.sequences, self.max_tokens)
            .with_namespace(model.fingerprint());
        if let Some(w) = config.window.as_mut() {
            w.rollback = self.rollback;
        }
        let mut groups = LayerGroups::new();
        for g in config.groups.as_slice() {
            let mut g = g.with_rotations(self.k_rotation, self.v_rotation);
            if let Some(w) = g.window.as_mut() {
                w.rollback = self.rollback;
            }
            groups = groups.with(g);
        }
        config.groups = groups;
        config.check_groups()?;
        Ok(config)
    }

    /// Pages of each layer group of `config` (made by [`cache_config`](Self::cache_config)):
    /// [`pages`](Self::pages) for a group without a window, what `sequences + 1` sequences
    /// need at most for a windowed group (reservations of up to a prefill chunk or a forward
    /// call's piece), if that is fewer.
    pub fn group_pages(&self, config: &CacheConfig) -> Result<Vec<usize>> {
        let chunk = u32::from(self.prefill_chunk).max(ROWS_PER_PIECE as u32);
        let sequences = usize::from(self.sequences) + 1;
        (0..config.group_count())
            .map(|g| {
                let group = config
                    .group(g)
                    .ok_or_else(|| Error::Input(format!("no layer group {g}")))?;
                let window = group.window.and_then(|w| {
                    w.pages_per_sequence(u32::from(self.page_tokens), chunk)?
                        .checked_mul(sequences)
                });
                Ok(match (group.window, window) {
                    (None, _) => usize::from(self.pages),
                    (Some(_), Some(w)) => w.min(usize::from(self.pages)),
                    (Some(_), None) => {
                        return Err(Error::Input(format!(
                            "layer group {g}: its window's pages overflow"
                        )));
                    }
                })
            })
            .collect()
    }
}

/// How a session stores KV: the K and V page formats and rotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvStorage {
    /// Key page format.
    pub k: ElementFormat,
    /// Value page format.
    pub v: ElementFormat,
    /// Rotation of key rows.
    pub k_rotation: Rotation,
    /// Rotation of value rows.
    pub v_rotation: Rotation,
}

impl KvStorage {
    /// K in `k` pages, V in `v` pages, neither rotated.
    pub const fn new(k: ElementFormat, v: ElementFormat) -> Self {
        KvStorage {
            k,
            v,
            k_rotation: Rotation::None,
            v_rotation: Rotation::None,
        }
    }

    /// These formats with the K and V rows rotated by `k` and `v`.
    pub const fn rotated(mut self, k: Rotation, v: Rotation) -> Self {
        self.k_rotation = k;
        self.v_rotation = v;
        self
    }
}

impl From<ElementFormat> for KvStorage {
    /// `format` for K and V, unrotated.
    fn from(format: ElementFormat) -> Self {
        KvStorage::new(format, format)
    }
}

/// Heap memory for a session's cache (the data and metadata arenas edgekv plans).
pub struct SessionArenas {
    config: CacheConfig,
    pages: Vec<usize>,
    data_bytes: usize,
    data: HeapArena,
    meta: HeapArena,
}

impl std::fmt::Debug for SessionArenas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionArenas")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SessionArenas {
    /// Allocates arenas for `model`'s cache with the pages of
    /// [`SessionOptions::group_pages`].
    pub fn new(model: &Llama, options: &SessionOptions) -> Result<Self> {
        let config = options.cache_config(model)?;
        let pages = options.group_pages(&config)?;
        let plan = GroupedCache::<FreeList>::plan_pages(&config, &pages)?;
        Ok(SessionArenas {
            config,
            pages,
            data_bytes: plan.data_bytes,
            data: HeapArena::new(plan.data_bytes, config.align)?,
            meta: HeapArena::new(plan.meta_bytes, edgekv::META_ALIGN)?,
        })
    }

    /// Bytes of the KV data arena (every group's pages).
    pub fn data_bytes(&self) -> usize {
        self.data_bytes
    }

    /// Pages of each layer group.
    pub fn group_pages(&self) -> &[usize] {
        &self.pages
    }
}

/// What one chat turn did.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// Prompt tokens (the whole conversation so far).
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V came from the prefix cache.
    pub reused_tokens: u32,
    /// Prompt in, first token's logits out.
    pub time_to_first_token: Duration,
    /// Generated token ids (the stop token excluded).
    pub generated: Vec<u32>,
    /// Generation after the first token.
    pub decode_time: Duration,
    /// Pages held by sequences after the turn.
    pub pages_used: u16,
    /// Unreferenced pages kept for reuse after the turn.
    pub pages_cached: u16,
}

/// A model with its paged KV cache.
pub struct Session<'a, 'm> {
    model: &'m Llama,
    cache: GroupedCache<'a, FreeList<'a>>,
    options: SessionOptions,
}

impl std::fmt::Debug for Session<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Index of the largest logit (the first one on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl<'a, 'm> Session<'a, 'm> {
    /// A session over `arenas` (made for the same model and options).
    pub fn new(
        model: &'m Llama,
        arenas: &'a mut SessionArenas,
        options: SessionOptions,
    ) -> Result<Self> {
        let config = options.cache_config(model)?;
        if config != arenas.config || options.group_pages(&config)? != arenas.pages {
            return Err(Error::Input(
                "arenas were made for other options or another model".into(),
            ));
        }
        let cache = GroupedCache::with_pages(
            config,
            &arenas.pages,
            arenas.data.as_uninit_mut(),
            arenas.meta.as_uninit_mut(),
        )?;
        Ok(Session {
            model,
            cache,
            options,
        })
    }

    /// The model.
    pub fn model(&self) -> &'m Llama {
        self.model
    }

    /// The options.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The KV cache (each layer group's own: [`GroupedCache::group`]).
    pub fn cache(&self) -> &GroupedCache<'a, FreeList<'a>> {
        &self.cache
    }

    /// The KV cache, mutable (fork, truncate, free, …).
    pub fn cache_mut(&mut self) -> &mut GroupedCache<'a, FreeList<'a>> {
        &mut self.cache
    }

    /// Bytes of K and V one token occupies over all layers (scales included), windowed layers
    /// too (they hold a token's rows only while their window sees it).
    pub fn bytes_per_token(&self) -> usize {
        (0..self.cache.group_count())
            .filter_map(|g| self.cache.group(g))
            .map(|c| {
                let g = &c.arena_plan().geometry;
                g.layers as usize
                    * (g.k_row_bytes + g.k_scale_row_bytes + g.v_row_bytes + g.v_scale_row_bytes)
            })
            .sum()
    }

    /// Appends `tokens` to `seq` in chunks that start at absolute multiples of the prefill chunk
    /// C (the first may be shorter when the sequence does not end on the grid), and returns the
    /// requested logits: the last token's row, or every row.
    pub fn prefill(&mut self, seq: SeqId, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::Input("no tokens".into()));
        }
        let start = self.cache.seq_len(seq)?;
        let end = u32::try_from(tokens.len())
            .ok()
            .and_then(|n| start.checked_add(n))
            .ok_or_else(|| Error::Input("too many tokens".into()))?;
        let mut out = Vec::new();
        for chunk in plan_prefill(start, end, self.options.prefill_chunk as u32) {
            let rows = &tokens[(chunk.start - start) as usize..(chunk.end - start) as usize];
            let want = match logits {
                Logits::Last if chunk.end == end => Logits::Last,
                Logits::All => Logits::All,
                _ => Logits::None,
            };
            match self.model.forward(&mut self.cache, seq, rows, want) {
                Ok(l) => out.extend_from_slice(&l),
                Err(e) => {
                    let _ = self.cache.truncate(seq, start);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// A new sequence for `prompt`: attaches the longest verified published prefix (aligned as
    /// the options say, never the whole prompt), prefills the rest, publishes the prompt's
    /// whole chunks for later reuse, and returns the sequence, the tokens reused and the last
    /// token's logits. All or nothing.
    pub fn start(&mut self, prompt: &[u32]) -> Result<(SeqId, u32, Vec<f32>)> {
        if prompt.is_empty() {
            return Err(Error::Input("empty prompt".into()));
        }
        let seq = self.cache.create_sequence(SeqMode::Paged)?;
        match self.start_in(seq, prompt) {
            Ok((reused, logits)) => Ok((seq, reused, logits)),
            Err(e) => {
                let _ = self.cache.free_sequence(seq);
                Err(e)
            }
        }
    }

    fn start_in(&mut self, seq: SeqId, prompt: &[u32]) -> Result<(u32, Vec<f32>)> {
        let hit = self.cache.lookup(prompt)?;
        let reused = self.cache.attach(seq, &hit, prompt)?;
        let logits = self.prefill(seq, &prompt[reused as usize..], Logits::Last)?;
        self.cache.commit_prompt(seq, prompt)?;
        Ok((reused, logits))
    }

    /// Appends one token and returns its logits.
    pub fn decode(&mut self, seq: SeqId, token: u32) -> Result<Vec<f32>> {
        self.model
            .forward(&mut self.cache, seq, &[token], Logits::Last)
    }

    /// Greedy generation from `logits` (the last position's): up to `max_new` tokens, stopping
    /// after a token in `stop` (which is returned but not appended to the sequence).
    pub fn generate(
        &mut self,
        seq: SeqId,
        logits: &[f32],
        max_new: usize,
        stop: &[u32],
    ) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(max_new);
        let mut next = argmax(logits);
        while out.len() < max_new {
            out.push(next);
            if stop.contains(&next) || out.len() == max_new {
                break;
            }
            next = argmax(&self.decode(seq, next)?);
        }
        Ok(out)
    }

    /// The single-conversation path at token granularity (as llama.cpp keeps one sequence):
    /// `seq` holds `held` (the token ids at its positions; prompt and generated tokens alike),
    /// `prompt` is the next prompt. Keeps the longest common prefix of the two, capped below
    /// `prompt.len()`, truncates `seq` there, prefills the rest, and returns the tokens kept and
    /// the last token's logits. Bit-exact with a cold prefill at any cut, because every row of
    /// this forward pass is computed alone (`tests/reuse.rs` checks cuts on and off the grids).
    /// Nothing is published; on an error `seq` is left truncated at the common prefix.
    pub fn continue_prompt(
        &mut self,
        seq: SeqId,
        held: &[u32],
        prompt: &[u32],
    ) -> Result<(u32, Vec<f32>)> {
        if prompt.is_empty() {
            return Err(Error::Input("empty prompt".into()));
        }
        let len = self.cache.seq_len(seq)? as usize;
        if held.len() > len {
            return Err(Error::Input(format!(
                "{} held tokens but the sequence has {len} positions",
                held.len()
            )));
        }
        let keep = edgekv::prefix::common_prefix_len(held, prompt).min(prompt.len() - 1);
        self.cache.truncate(seq, keep as u32)?;
        let logits = self.prefill(seq, &prompt[keep..], Logits::Last)?;
        Ok((keep as u32, logits))
    }

    /// One chat turn over the whole conversation's token ids: reuses what `chat` holds (see
    /// [`continue_prompt`](Self::continue_prompt)) or starts a sequence through the prefix
    /// index ([`start`](Self::start)), then generates greedily up to `max_new` tokens, stopping
    /// at the model's end token. The sequence stays with `chat` for the next turn.
    pub fn chat_turn(
        &mut self,
        chat: &mut Chat,
        conversation: &[u32],
        max_new: usize,
    ) -> Result<TurnReport> {
        let eos = self.model.config().eos;
        self.chat_turn_until(chat, conversation, max_new, &[eos])
    }

    /// [`chat_turn`](Self::chat_turn), stopping at any id of `stop` (e.g. the model's end token
    /// and its chat template's end of turn).
    ///
    /// When the conversation departs from what `chat` holds further back than a windowed
    /// layer group can go ([`SessionOptions::rollback`]), the turn starts a new sequence through
    /// the prefix index instead (and reports what that reused).
    pub fn chat_turn_until(
        &mut self,
        chat: &mut Chat,
        conversation: &[u32],
        max_new: usize,
        stop: &[u32],
    ) -> Result<TurnReport> {
        let t0 = Instant::now();
        let (seq, reused, logits) = match chat.seq {
            Some(seq) => match self.continue_prompt(seq, &chat.held, conversation) {
                Ok((kept, logits)) => (seq, kept, logits),
                Err(e) => {
                    // Its positions no longer match `held`: start over.
                    let _ = self.cache.free_sequence(seq);
                    *chat = Chat::new();
                    match e {
                        Error::Cache(edgekv::Error::TruncateBeyondWindow) => {
                            self.start(conversation)?
                        }
                        e => return Err(e),
                    }
                }
            },
            None => self.start(conversation)?,
        };
        chat.seq = Some(seq);
        chat.held.clear();
        chat.held.extend_from_slice(conversation);
        let time_to_first_token = t0.elapsed();
        let t1 = Instant::now();
        let mut generated = match self.generate(seq, &logits, max_new, stop) {
            Ok(g) => g,
            Err(e) => {
                let _ = self.cache.free_sequence(seq);
                *chat = Chat::new();
                return Err(e);
            }
        };
        let decode_time = t1.elapsed();
        // All generated tokens but the last were fed back into the sequence.
        chat.held
            .extend_from_slice(&generated[..generated.len().saturating_sub(1)]);
        if generated.last().is_some_and(|t| stop.contains(t)) {
            generated.pop();
        }
        let stats = self.cache.stats();
        Ok(TurnReport {
            prompt_tokens: conversation.len(),
            reused_tokens: reused,
            time_to_first_token,
            generated,
            decode_time,
            pages_used: stats.pages_used,
            pages_cached: stats.pages_cached,
        })
    }
}

/// A conversation's sequence and the token ids at its positions, kept between chat turns.
#[derive(Debug, Clone, Default)]
pub struct Chat {
    seq: Option<SeqId>,
    held: Vec<u32>,
}

impl Chat {
    /// A conversation with nothing cached yet.
    pub fn new() -> Self {
        Chat::default()
    }

    /// Its sequence, once a turn has run.
    pub fn sequence(&self) -> Option<SeqId> {
        self.seq
    }

    /// The token ids its sequence holds.
    pub fn held(&self) -> &[u32] {
        &self.held
    }
}
