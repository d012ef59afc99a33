//! The runner: each case's script over a cache, every attention output digested.

use super::*;

pub(crate) struct Runner<'r, F> {
    pub(crate) cache: KvCache<'r, FreeList<'r>>,
    pub(crate) q: &'r mut [f32],
    pub(crate) out: &'r mut [f32],
    pub(crate) k: &'r mut [f32],
    pub(crate) v: &'r mut [f32],
    pub(crate) scratch: &'r mut [f32],
    pub(crate) crc: OutputCrc,
    pub(crate) params: AttentionParams,
    /// Release pages outside the window after every block.
    pub(crate) slide: bool,
    pub(crate) sink: &'r mut F,
}

/// How a block of positions is processed.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    /// Write rows and attend their queries.
    WriteAttend,
    /// Write rows only.
    Write,
}

impl<F: FnMut(Event<'_>)> Runner<'_, F> {
    pub(crate) fn reserve(&mut self, seq: SeqId, positions: Range<u32>) -> Result<(), Error> {
        let first = self.cache.reserve(seq, positions.end - positions.start)?;
        if first != positions.start {
            return Err(Error::Unexpected("reserve position"));
        }
        Ok(())
    }

    /// Emits `Rows` for positions the cache holds already (attached), regenerating them.
    pub(crate) fn announce(&mut self, label: u8, layer: u16, positions: Range<u32>, src: Src) {
        for pos in positions {
            src.kv_rows(layer, pos, self.k, self.v);
            (self.sink)(Event::Rows {
                seq: label,
                layer,
                start: pos,
                k: self.k,
                v: self.v,
            });
        }
    }

    pub(crate) fn write(
        &mut self,
        seq: SeqId,
        label: u8,
        layer: u16,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        for pos in positions {
            src.kv_rows(layer, pos, self.k, self.v);
            self.cache.write_kv(seq, layer, pos, self.k, self.v)?;
            (self.sink)(Event::Rows {
                seq: label,
                layer,
                start: pos,
                k: self.k,
                v: self.v,
            });
        }
        Ok(())
    }

    pub(crate) fn attend(
        &mut self,
        seq: SeqId,
        label: u8,
        layer: u16,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        let n = (positions.end - positions.start) as usize;
        if n == 0 || n > MAX_ROWS {
            return Err(Error::Unexpected("attention block size"));
        }
        let q = &mut self.q[..n * Q_ROW];
        let out = &mut self.out[..n * Q_ROW];
        for (pos, row) in positions.clone().zip(q.chunks_exact_mut(Q_ROW)) {
            src.query_row(layer, pos, row);
        }
        self.cache.attention(
            seq,
            layer,
            positions.start,
            q,
            out,
            &self.params,
            self.scratch,
        )?;
        self.crc.update(out);
        (self.sink)(Event::Attention {
            seq: label,
            layer,
            start: positions.start,
            params: self.params,
            q,
            out,
        });
        Ok(())
    }

    /// Reserves a block, then per layer writes its rows and (unless `Write`) attends its queries.
    pub(crate) fn block(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
        mode: Mode,
    ) -> Result<(), Error> {
        self.reserve(seq, positions.clone())?;
        for layer in 0..SHAPE.layers {
            self.write(seq, label, layer, positions.clone(), src)?;
            if mode == Mode::WriteAttend {
                self.attend(seq, label, layer, positions.clone(), src)?;
            }
        }
        if let (true, Some(window)) = (self.slide, self.params.window) {
            let released = self.cache.slide(seq, &window, positions.end)?;
            (self.sink)(Event::Slide {
                seq: label,
                from: positions.end,
                released,
                pages_used: self.cache.stats().pages_used,
            });
        }
        Ok(())
    }

    /// Prefill of `[start, end)` in [`plan_prefill`] chunks.
    pub(crate) fn prefill(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
        mode: Mode,
    ) -> Result<(), Error> {
        for c in plan_prefill(positions.start, positions.end, CHUNK as u32) {
            self.block(seq, label, c, src, mode)?;
        }
        Ok(())
    }

    /// Decode steps: one position at a time.
    pub(crate) fn decode(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        for t in positions {
            self.block(seq, label, t..t + 1, src, Mode::WriteAttend)?;
        }
        Ok(())
    }

    pub(crate) fn new_seq(&mut self) -> Result<SeqId, Error> {
        Ok(self.cache.create_sequence(SeqMode::Paged)?)
    }

    pub(crate) fn script(&mut self, case: Case) -> Result<(), Error> {
        use Mode::{Write, WriteAttend};
        const PAGED: Src = Src::Stream(1);
        match case {
            Case::PagedF32
            | Case::PagedF16
            | Case::PagedBf16
            | Case::PagedQ8_0
            | Case::PagedInt8Head
            | Case::PagedFp8Tile
            | Case::PagedQ4_0
            | Case::PagedQ4_1
            | Case::PagedQ8KQ4V
            | Case::PagedQ4_0Rot
            | Case::PagedQ8KQ4VRot
            | Case::WindowSinks
            | Case::WindowSlide => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..144, PAGED, WriteAttend)?;
                self.decode(s, 0, 144..MAX_TOKENS, PAGED)?;
            }
            Case::PagedQ8_0Sharp => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..144, Src::Sharp(1), WriteAttend)?;
                self.decode(s, 0, 144..MAX_TOKENS, Src::Sharp(1))?;
            }
            Case::Chunked => {
                let src = Src::Stream(2);
                let s = self.new_seq()?;
                // Layer by layer, so the outputs come in the order of the one-pass case.
                for layer in 0..SHAPE.layers {
                    for c in plan_prefill(0, MAX_ROWS as u32, CHUNK as u32) {
                        if layer == 0 {
                            self.reserve(s, c.clone())?;
                        }
                        self.write(s, 0, layer, c.clone(), src)?;
                        self.attend(s, 0, layer, c, src)?;
                    }
                }
            }
            Case::OnePass => {
                let src = Src::Stream(2);
                let s = self.new_seq()?;
                let all = 0..MAX_ROWS as u32;
                self.reserve(s, all.clone())?;
                for layer in 0..SHAPE.layers {
                    self.write(s, 0, layer, all.clone(), src)?;
                    self.attend(s, 0, layer, all.clone(), src)?;
                }
            }
            Case::PrefixWarm => {
                let (src_a, src_b) = (Src::Tokens(&TOKENS_A), Src::Tokens(&TOKENS_B));
                let a = self.new_seq()?;
                self.prefill(a, 0, 0..TOKENS_A.len() as u32, src_a, Write)?;
                self.cache.commit_prompt(a, &TOKENS_A)?;
                let prompt = &TOKENS_B[..PROMPT_B];
                let b = self.new_seq()?;
                let hit = self.cache.lookup(prompt)?;
                if self.cache.attach(b, &hit, prompt)? != REUSED {
                    return Err(Error::Unexpected("prefix hit length"));
                }
                for layer in 0..SHAPE.layers {
                    self.announce(1, layer, 0..REUSED, src_b);
                }
                self.prefill(b, 1, REUSED..PROMPT_B as u32, src_b, WriteAttend)?;
                self.decode(b, 1, PROMPT_B as u32..TOKENS_B.len() as u32, src_b)?;
            }
            Case::PrefixCold => {
                let src_b = Src::Tokens(&TOKENS_B);
                let b = self.new_seq()?;
                for c in plan_prefill(0, PROMPT_B as u32, CHUNK as u32) {
                    // Outputs below the reuse point are not part of the comparison.
                    let mode = if c.start >= REUSED {
                        WriteAttend
                    } else {
                        Write
                    };
                    self.block(b, 0, c, src_b, mode)?;
                }
                self.decode(b, 0, PROMPT_B as u32..TOKENS_B.len() as u32, src_b)?;
            }
            Case::ForkDiverge => {
                let s0 = self.new_seq()?;
                self.prefill(s0, 0, 0..56, Src::Stream(30), WriteAttend)?;
                let s1 = self.cache.fork(s0)?;
                (self.sink)(Event::Fork {
                    parent: 0,
                    child: 1,
                });
                for t in 56..96 {
                    self.block(s0, 0, t..t + 1, Src::Stream(31), WriteAttend)?;
                    self.block(s1, 1, t..t + 1, Src::Stream(32), WriteAttend)?;
                }
            }
            Case::TruncateReappend => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..100, Src::Stream(40), WriteAttend)?;
                self.cache.truncate(s, 70)?;
                (self.sink)(Event::Truncate { seq: 0, len: 70 });
                self.prefill(s, 0, 70..130, Src::Stream(41), WriteAttend)?;
                self.decode(s, 0, 130..136, Src::Stream(41))?;
            }
            Case::SnapshotCold => {
                let src = Src::Tokens(&snapshot::SYSTEM_CHAT);
                let s = self.new_seq()?;
                let end = snapshot::SYSTEM_CHAT.len() as u32;
                self.prefill(s, 0, 0..snapshot::SYSTEM_TOKENS, src, Write)?;
                self.decode(s, 0, snapshot::SYSTEM_TOKENS..end, src)?;
            }
            Case::SnapshotRestored => return Err(Error::NeedsImage),
            Case::TinyF32
            | Case::TinyF16
            | Case::TinyBf16
            | Case::TinyQ8_0
            | Case::TinyInt8Head
            | Case::TinyFp8Tile
            | Case::TinyQ4_0
            | Case::TinyQ4_1
            | Case::TinyF32Rot
            | Case::TinyQ8KQ4VRot => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..40, Src::Tiny(3), WriteAttend)?;
                self.decode(s, 0, 40..44, Src::Tiny(3))?;
            }
        }
        Ok(())
    }
}

/// Runs `case` in a fresh cache over `arenas`, feeding every step to `sink`, and returns the
/// digest of its attention outputs.
///
/// # Errors
///
/// [`Error::Cache`] with [`ArenaTooSmall`](edgekv::ConfigError::ArenaTooSmall) when `data` or
/// `meta` is shorter than [`DATA_BYTES`] / [`META_BYTES`]; [`Error::WorkTooSmall`];
/// [`Error::NeedsImage`] for [`Case::SnapshotRestored`]; any other error means the cache
/// misbehaved.
pub fn run<F: FnMut(Event<'_>)>(
    case: Case,
    arenas: &mut Arenas<'_>,
    sink: &mut F,
) -> Result<Digest, Error> {
    run_with(case, arenas, sink, |r| r.script(case))
}

/// The CRC-32 of a case's stored pages: its data arena's bytes after its last step (for the
/// [`TINY_CASES`]: an encoder that flushed a subnormal to zero may write other codes that still
/// decode to the same values, which the case's digest of outputs does not see). Boards print it
/// as `pages <case> crc32 <hex>`.
///
/// # Errors
///
/// As [`run`].
pub fn stored_pages(case: Case, arenas: &mut Arenas<'_>) -> Result<u32, Error> {
    let d = run_with(case, arenas, &mut |_| {}, |r| {
        r.script(case)?;
        r.crc = OutputCrc::new();
        r.crc.update_bytes(r.cache.arena_bytes());
        Ok(())
    })?;
    Ok(d.crc32)
}

/// Sets up a fresh cache and runner for `case` over `arenas`, runs `script` and digests its
/// attention outputs.
pub(crate) fn run_with<F: FnMut(Event<'_>)>(
    case: Case,
    arenas: &mut Arenas<'_>,
    sink: &mut F,
    script: impl FnOnce(&mut Runner<'_, F>) -> Result<(), Error>,
) -> Result<Digest, Error> {
    let too_small = Error::from(edgekv::ConfigError::ArenaTooSmall);
    let data_range = aligned_range(arenas.data, DATA_ALIGN, DATA_USED).ok_or(too_small)?;
    let plan = case.config().plan(DATA_USED, BITS)?;
    let meta_range = aligned_range(arenas.meta, META_ALIGN, plan.meta.total).ok_or(too_small)?;
    if arenas.work.len() < WORK_F32 {
        return Err(Error::WorkTooSmall);
    }
    let (q, rest) = arenas.work.split_at_mut(MAX_ROWS * Q_ROW);
    let (out, rest) = rest.split_at_mut(MAX_ROWS * Q_ROW);
    let (k, rest) = rest.split_at_mut(KV_ROW);
    let (v, rest) = rest.split_at_mut(KV_ROW);
    let scratch = &mut rest[..SCRATCH_F32];
    let cache = KvCache::new(
        case.config(),
        &mut arenas.data[data_range],
        &mut arenas.meta[meta_range],
    )?;
    let mut runner = Runner {
        cache,
        q,
        out,
        k,
        v,
        scratch,
        crc: OutputCrc::new(),
        params: case.params(),
        slide: case == Case::WindowSlide,
        sink,
    };
    script(&mut runner)?;
    let outputs = runner.crc.values();
    Ok(Digest::new(case, runner.crc.finish(), outputs))
}
