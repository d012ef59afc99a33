//! A scripted chat over a page cache, the same code on the host and on a board, so their
//! transcripts can be compared token for token and logit digest for digest.
//!
//! The system prompt's KV comes from a snapshot image ([`write_system_image`] writes it on the
//! host; [`run`] restores it on the board). Each [`Turn`] either continues the conversation (its
//! KV stays in the cache) or starts a new one that reuses the system prompt's published pages
//! through the prefix index. Optionally a cold prefill of the system prompt and the first turn
//! runs first, so the time to the first token can be compared: cold, restored, reused. Every
//! step is reported as an [`Event`] with the cost a caller-supplied clock measured (instructions
//! on a board under QEMU's `-icount`, nanoseconds on the host, or nothing).
//!
//! The cache is any [`ChatStore`]: an `edgekv::KvCache` (every layer alike, e.g. SmolLM2) or an
//! `edgekv::GroupedCache` (e.g. Gemma 3's sliding-window layers in their own group, releasing
//! pages as positions leave the window); over more than one group each turn's end also reports
//! every group's pages ([`Event::Pages`]).

use crc::{CRC_32_ISO_HDLC, Crc};
use edgekv::{SeqId, SeqMode};
use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

use crate::error::{Error, Result};
use crate::forward::Logits;
use crate::sample::argmax;
use crate::session::Engine;

mod store;
pub mod wire;

pub use store::{ChatStore, GroupPages};

const CRC: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// CRC-32 (ISO-HDLC) of `logits` as little-endian bytes: the digest host and board compare.
pub fn logits_crc(logits: &[f32]) -> u32 {
    let mut d = CRC.digest();
    for x in logits {
        d.update(&x.to_le_bytes());
    }
    d.finalize()
}

/// One user turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Turn<'t> {
    /// The turn's token ids, chat markup included. A continuing turn starts by closing the
    /// previous answer (e.g. `<|im_end|>\n`); a new conversation's holds only the user's part
    /// (the system prompt is put in front of it).
    pub prompt: &'t [u32],
    /// Tokens to generate at most (the first included).
    pub max_new: u32,
    /// Starts a new conversation that reuses the system prompt's pages, instead of continuing.
    pub new_conversation: bool,
}

/// A chat: the system prompt, whether to measure a cold start first, the turns and the ids that
/// end an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script<'s> {
    /// The system prompt's token ids (the restored image must hold exactly these).
    pub system: &'s [u32],
    /// Prefill the system prompt and the first turn cold before restoring (to compare).
    pub cold: bool,
    /// The turns; the first continues the restored system prompt.
    pub turns: &'s [Turn<'s>],
    /// Ids that end an answer (returned, never appended to the cache).
    pub stop: &'s [u32],
}

/// How a turn's first token was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The system prompt and the turn prefilled from nothing.
    Cold,
    /// The system prompt restored from the snapshot image; the turn prefilled after it.
    Restored,
    /// The conversation's KV kept; the turn prefilled after it.
    Continued,
    /// A new conversation: the system prompt's published pages attached, the rest prefilled.
    Reused,
}

impl Start {
    /// A lowercase name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Start::Cold => "cold",
            Start::Restored => "restored",
            Start::Continued => "continued",
            Start::Reused => "reused",
        }
    }
}

/// A step of [`run`], with its cost on the caller's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The system prompt restored from the image (`tokens` positions).
    Restored {
        /// Positions restored.
        tokens: u32,
        /// Clock ticks the restore took.
        cost: u64,
    },
    /// A turn's prompt prefilled and its first token picked.
    First {
        /// Turn index (the cold start reports turn 0).
        turn: usize,
        /// How the turn started.
        start: Start,
        /// Tokens prefilled by this step.
        prefilled: u32,
        /// Tokens reused from published pages (a new conversation), else 0.
        reused: u32,
        /// The token picked (greedy).
        token: u32,
        /// [`logits_crc`] of the logits it was picked from.
        crc: u32,
        /// Clock ticks from the start of the step to the logits.
        cost: u64,
    },
    /// One decode step: the previous token appended, the next one picked.
    Token {
        /// Turn index.
        turn: usize,
        /// The token picked.
        token: u32,
        /// [`logits_crc`] of its logits.
        crc: u32,
        /// Clock ticks of the decode step.
        cost: u64,
    },
    /// A turn's answer ended (a stop id or `max_new`).
    End {
        /// Turn index.
        turn: usize,
        /// Tokens generated, stop id included.
        generated: u32,
        /// Positions in the turn's sequence (the last token not yet appended).
        context: u32,
    },
    /// A layer group's pages at the end of a turn (after [`Event::End`]; reported only by a
    /// cache of more than one group).
    Pages {
        /// Turn index.
        turn: usize,
        /// Layer group.
        group: usize,
        /// The group's pages.
        pages: GroupPages,
    },
}

/// Caller memory [`run`] works in.
#[derive(Debug)]
pub struct Buffers<'b> {
    /// One row of logits (the vocabulary).
    pub logits: &'b mut [f32],
    /// Token ids of a new conversation's prompt: the system prompt plus its longest turn.
    pub prompt: &'b mut [u32],
}

/// Prefills `system` into a fresh sequence of `cache`, writes its snapshot image to `flash` at
/// `offset` (fingerprinted with the model's identity) and frees the sequence.
///
/// # Errors
///
/// The prefill's and [`ChatStore::snapshot_to`]'s; the cache is left as it was.
pub fn write_system_image<C: ChatStore, F: NorFlash>(
    engine: &mut Engine<'_, '_, '_>,
    cache: &mut C,
    system: &[u32],
    logits: &mut [f32],
    flash: &mut F,
    offset: u32,
) -> Result<C::Header> {
    let seq = cache.create_sequence(SeqMode::Paged)?;
    let r = engine
        .prefill(cache, seq, system, Logits::None, logits)
        .and_then(|()| {
            let fingerprint = engine.model().fingerprint();
            cache.snapshot_to(seq, system, fingerprint, flash, offset)
        });
    let freed = cache.free_sequence(seq);
    let header = r?;
    freed?;
    Ok(header)
}

/// Runs `script` over `cache` (empty on entry): the optional cold start, the system prompt
/// restored from `image` at offset 0, then every turn, greedy. `clock` is read around each
/// step; `observe` gets every [`Event`] as it happens. The cache holds the last conversation
/// on return.
///
/// # Errors
///
/// [`Error::BufferTooSmall`] (logits or prompt buffer), [`Error::Empty`] (no system
/// prompt, a turn without tokens), [`Error::Mismatch`] (the image holds other tokens than
/// `script.system`), and the cache's and forward pass's errors. On an error the sequence in use
/// is freed, so the cache holds no sequence (pages the restore or a new conversation published
/// stay cached in the prefix index, reusable and evictable).
pub fn run<C: ChatStore, F: ReadNorFlash>(
    engine: &mut Engine<'_, '_, '_>,
    cache: &mut C,
    script: &Script<'_>,
    image: &mut F,
    buffers: Buffers<'_>,
    clock: &mut dyn FnMut() -> u64,
    observe: &mut dyn FnMut(Event),
) -> Result<()> {
    let mut live = None;
    let r = run_turns(
        engine, cache, script, image, buffers, clock, observe, &mut live,
    );
    if r.is_err() {
        if let Some(seq) = live {
            let _ = cache.free_sequence(seq);
        }
    }
    r
}

/// [`run`], with the sequence in use kept in `live`.
#[allow(clippy::too_many_arguments)]
fn run_turns<C: ChatStore, F: ReadNorFlash>(
    engine: &mut Engine<'_, '_, '_>,
    cache: &mut C,
    script: &Script<'_>,
    image: &mut F,
    buffers: Buffers<'_>,
    clock: &mut dyn FnMut() -> u64,
    observe: &mut dyn FnMut(Event),
    live: &mut Option<SeqId>,
) -> Result<()> {
    let vocab = engine.model().config().vocab;
    let logits = buffers
        .logits
        .get_mut(..vocab)
        .ok_or(Error::BufferTooSmall { needed: vocab })?;
    let Some(first) = script.turns.first() else {
        return Ok(());
    };
    if script.system.is_empty() || script.turns.iter().any(|t| t.prompt.is_empty()) {
        return Err(Error::Empty);
    }
    let longest = script
        .turns
        .iter()
        .map(|t| t.prompt.len())
        .max()
        .unwrap_or(0);
    let need = script.system.len() + longest;
    if buffers.prompt.len() < need {
        return Err(Error::BufferTooSmall { needed: need });
    }

    if script.cold {
        let seq = cache.create_sequence(SeqMode::Paged)?;
        let t0 = clock();
        let r = engine
            .prefill(cache, seq, script.system, Logits::None, logits)
            .and_then(|()| engine.prefill(cache, seq, first.prompt, Logits::Last, logits));
        let cost = clock().wrapping_sub(t0);
        let freed = cache.free_sequence(seq);
        r?;
        freed?;
        observe(Event::First {
            turn: 0,
            start: Start::Cold,
            prefilled: (script.system.len() + first.prompt.len()) as u32,
            reused: 0,
            token: argmax(logits),
            crc: logits_crc(logits),
            cost,
        });
    }

    let t0 = clock();
    let system = &mut buffers.prompt[..script.system.len()];
    let (mut seq, header) = cache.restore_from(image, 0, engine.model().fingerprint(), system)?;
    *live = Some(seq);
    let cost = clock().wrapping_sub(t0);
    let tokens = C::header_tokens(&header);
    if tokens as usize != script.system.len() || system != script.system {
        return Err(Error::Mismatch("restored system prompt"));
    }
    observe(Event::Restored { tokens, cost });

    // The last answer's final token: picked, not yet in the cache.
    let mut pending: Option<u32> = None;
    for (i, turn) in script.turns.iter().enumerate() {
        let t0 = clock();
        let (start, prefilled, reused) = if turn.new_conversation {
            cache.free_sequence(seq)?;
            *live = None;
            let n = script.system.len();
            buffers.prompt[..n].copy_from_slice(script.system);
            buffers.prompt[n..n + turn.prompt.len()].copy_from_slice(turn.prompt);
            let prompt = &buffers.prompt[..n + turn.prompt.len()];
            let (s, reused) = engine.start(cache, prompt, logits)?;
            seq = s;
            *live = Some(s);
            (Start::Reused, prompt.len() as u32 - reused, reused)
        } else {
            let mut n = turn.prompt.len() as u32;
            if let Some(p) = pending.filter(|p| !script.stop.contains(p)) {
                engine.prefill(cache, seq, &[p], Logits::None, logits)?;
                n += 1;
            }
            engine.prefill(cache, seq, turn.prompt, Logits::Last, logits)?;
            let start = if i == 0 {
                Start::Restored
            } else {
                Start::Continued
            };
            (start, n, 0)
        };
        let cost = clock().wrapping_sub(t0);
        let mut token = argmax(logits);
        observe(Event::First {
            turn: i,
            start,
            prefilled,
            reused,
            token,
            crc: logits_crc(logits),
            cost,
        });
        let mut generated = 1;
        while generated < turn.max_new && !script.stop.contains(&token) {
            let t0 = clock();
            engine.decode(cache, seq, token, logits)?;
            let cost = clock().wrapping_sub(t0);
            token = argmax(logits);
            generated += 1;
            observe(Event::Token {
                turn: i,
                token,
                crc: logits_crc(logits),
                cost,
            });
        }
        pending = Some(token);
        observe(Event::End {
            turn: i,
            generated,
            context: cache.seq_len(seq)?,
        });
        if cache.groups() > 1 {
            for group in 0..cache.groups() {
                if let Some(pages) = cache.group_pages(group, seq)? {
                    observe(Event::Pages {
                        turn: i,
                        group,
                        pages,
                    });
                }
            }
        }
    }
    Ok(())
}
