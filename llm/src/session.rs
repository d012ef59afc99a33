//! Prompts over a page cache: prefill in chunks aligned to absolute positions, prefix reuse
//! through the cache's verified index, decoding and generation.

use edgekv::prefix::plan_prefill;
use edgekv::{SeqId, SeqMode};

use crate::error::{Error, Result};
use crate::forward::Logits;
use crate::kv::KvStore;
use crate::model::Llama;
use crate::sample::Sampling;

/// A model with its scratch buffer and prefill chunk size C: the calls a board or host makes
/// over a [`KvStore`] (an `edgekv::KvCache` or a layer-grouped `edgekv::GroupedCache`).
#[derive(Debug)]
pub struct Engine<'m, 'a, 's> {
    model: &'m Llama<'a>,
    scratch: &'s mut [f32],
    chunk: u32,
}

impl<'m, 'a, 's> Engine<'m, 'a, 's> {
    /// An engine prefilling in chunks of `chunk` tokens (a multiple of the cache's page size,
    /// as the cache's chunk setting; `scratch` must hold that many rows).
    ///
    /// # Errors
    ///
    /// [`Unsupported`](Error::Unsupported) for a zero `chunk`.
    pub fn new(model: &'m Llama<'a>, scratch: &'s mut [f32], chunk: u32) -> Result<Self> {
        if chunk == 0 {
            return Err(Error::Unsupported("zero prefill chunk"));
        }
        Ok(Engine {
            model,
            scratch,
            chunk,
        })
    }

    /// The model.
    pub fn model(&self) -> &'m Llama<'a> {
        self.model
    }

    /// Appends `tokens` to `seq` in chunks that start at absolute multiples of C (the first may
    /// be shorter when the sequence does not end on the grid) and writes the requested logits:
    /// the last token's row, or every row (`out` holds `rows × vocab`). All or nothing.
    ///
    /// # Errors
    ///
    /// [`Empty`](Error::Empty) for no tokens, [`BufferTooSmall`](Error::BufferTooSmall) when `out` is
    /// short, [`ContextFull`](Error::ContextFull), [`Kv`](Error::Kv) for an unknown `seq`, and
    /// [`Llama::forward`](crate::Llama::forward)'s errors; the sequence is then as before.
    pub fn prefill<C: KvStore + ?Sized>(
        &mut self,
        cache: &mut C,
        seq: SeqId,
        tokens: &[u32],
        logits: Logits,
        out: &mut [f32],
    ) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::Empty);
        }
        let vocab = self.model.config().vocab;
        let need = logits.rows(tokens.len()) * vocab;
        if out.len() < need {
            return Err(Error::BufferTooSmall { needed: need });
        }
        let start = cache.seq_len(seq)?;
        let end = u32::try_from(tokens.len())
            .ok()
            .and_then(|n| start.checked_add(n))
            .ok_or(Error::ContextFull)?;
        for chunk in plan_prefill(start, end, self.chunk) {
            let rows = &tokens[(chunk.start - start) as usize..(chunk.end - start) as usize];
            let (want, at) = match logits {
                Logits::Last if chunk.end == end => (Logits::Last, 0),
                Logits::All => (Logits::All, (chunk.start - start) as usize * vocab),
                _ => (Logits::None, 0),
            };
            let r = self
                .model
                .forward(cache, seq, rows, self.scratch, want, &mut out[at..]);
            if let Err(e) = r {
                let _ = cache.truncate(seq, start);
                return Err(e);
            }
        }
        Ok(())
    }

    /// A new paged sequence for `prompt`: attaches the longest verified published prefix
    /// (aligned to the cache's chunk, never the whole prompt), prefills the rest, publishes the
    /// prompt's whole chunks for later reuse ([`KvStore::commit_prompt`]) and writes the last
    /// token's logits into `out`. Returns the sequence and the tokens reused. All or nothing.
    ///
    /// # Errors
    ///
    /// [`Empty`](Error::Empty) for an empty prompt, [`Kv`](Error::Kv) (no free sequence, lookup,
    /// attach or commit), and [`prefill`](Self::prefill)'s; the new sequence is then freed.
    pub fn start<C: KvStore + ?Sized>(
        &mut self,
        cache: &mut C,
        prompt: &[u32],
        out: &mut [f32],
    ) -> Result<(SeqId, u32)> {
        if prompt.is_empty() {
            return Err(Error::Empty);
        }
        let seq = cache.create_sequence(SeqMode::Paged)?;
        let r = (|| {
            let hit = cache.lookup(prompt)?;
            let reused = cache.attach(seq, &hit, prompt)?;
            self.prefill(cache, seq, &prompt[reused as usize..], Logits::Last, out)?;
            cache.commit_prompt(seq, prompt)?;
            Ok(reused)
        })();
        match r {
            Ok(reused) => Ok((seq, reused)),
            Err(e) => {
                let _ = cache.free_sequence(seq);
                Err(e)
            }
        }
    }

    /// Appends one token to `seq` and writes its logits into `out`.
    ///
    /// # Errors
    ///
    /// As [`Llama::forward`](crate::Llama::forward) (all or nothing).
    pub fn decode<C: KvStore + ?Sized>(
        &mut self,
        cache: &mut C,
        seq: SeqId,
        token: u32,
        out: &mut [f32],
    ) -> Result<()> {
        self.model
            .forward(cache, seq, &[token], self.scratch, Logits::Last, out)
    }

    /// Generates from `logits` (the last position's, in `logits`, which is overwritten) into
    /// `tokens`, up to its length, stopping after a token in `stop` (returned but not appended
    /// to the sequence); returns how many tokens were written.
    ///
    /// # Errors
    ///
    /// [`BufferTooSmall`](Error::BufferTooSmall) when `logits` is shorter than the vocabulary;
    /// [`decode`](Self::decode)'s errors (the tokens already appended stay in the sequence).
    pub fn generate<C: KvStore + ?Sized>(
        &mut self,
        cache: &mut C,
        seq: SeqId,
        logits: &mut [f32],
        sampling: &mut Sampling,
        stop: &[u32],
        tokens: &mut [u32],
    ) -> Result<usize> {
        let vocab = self.model.config().vocab;
        let logits = logits
            .get_mut(..vocab)
            .ok_or(Error::BufferTooSmall { needed: vocab })?;
        let mut written = 0;
        while written < tokens.len() {
            let next = sampling.pick(logits);
            tokens[written] = next;
            written += 1;
            if stop.contains(&next) || written == tokens.len() {
                break;
            }
            self.decode(cache, seq, next, logits)?;
        }
        Ok(written)
    }
}
