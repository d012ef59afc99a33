//! The session the firmware runs, kept free of logging and peripherals (the clock and the cache
//! maintenance come in as arguments) so the same file also runs on a host.
//!
//! A two-turn chat over a SmolLM2-shaped int8 (Q8_0) cache with synthetic K/V/Q rows:
//!
//! 1. turn 1: a 104-token prompt, prefilled cold in 32-token chunks, 8 decode steps, the
//!    prompt's whole chunks published; before a device would read the pages they are cleaned out
//!    of the D-cache ([`hand_to_device`]); the sequence is freed (its published pages stay
//!    cached);
//! 2. turn 2: the conversation so far plus a new message; `lookup`/`attach` reuse turn 1's
//!    published chunks, only the rest is prefilled, then 32 decode steps under a sliding window
//!    with sinks, `slide` releasing pages no later query can see.
//!
//! Every attention output goes into a CRC-32 (ISO-HDLC, little-endian f32 bytes).

use edgekv::attention::{AttentionParams, Window};
use edgekv::prefix::plan_prefill;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, Kv, KvCache, PageAllocator, Plan, PlannedConfig, SeqId,
    SeqMode, Shape, Stats,
};
use edgekv_hal::{CacheMaintenance, HalError, IdentityMap, Segment, read_view};

/// SmolLM2-135M's KV heads and head_dim, two layers.
pub const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 3,
    head_dim: 64,
};
/// Query heads (three per KV head).
pub const Q_HEADS: u16 = 9;
const PAGE_TOKENS: u16 = 16;
const CHUNK: u16 = 32;
/// The cache: Q8_0 K and V pages, two sequences of up to [`MAX_TOKENS`].
pub const CFG: CacheConfig = CacheConfig::new(SHAPE)
    .with_page_tokens(PAGE_TOKENS)
    .with_chunk_tokens(CHUNK)
    .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
    .with_sequences(2, MAX_TOKENS)
    .with_namespace(edgekv::prefix::namespace(&[
        b"synthetic-smollm2-2l",
        b"stm32h7",
    ]));
/// Longest sequence in tokens.
pub const MAX_TOKENS: u32 = 480;
/// Bytes of the KV data arena (AXI SRAM).
pub const DATA_BYTES: usize = 384 * 1024;
const BITS: usize = <FreeList<'static> as PageAllocator<'static>>::META_BITS_PER_PAGE;
/// The cache's configuration, checked and planned over [`DATA_BYTES`] at compile time: the
/// firmware builds its cache with [`KvCache::from_planned`] and links none of the checks.
pub const PLANNED: PlannedConfig = match PlannedConfig::new(CFG, DATA_BYTES, BITS) {
    Ok(p) => p,
    Err(_) => panic!("plan"),
};
/// The plan of the cache over [`DATA_BYTES`].
pub const PLAN: Plan = *PLANNED.plan();
/// Bytes of the metadata arena (DTCM).
pub const META_BYTES: usize = PLAN.meta.total;

const Q_ROW: usize = Q_HEADS as usize * SHAPE.head_dim as usize;
const KV_ROW: usize = SHAPE.kv_heads as usize * SHAPE.head_dim as usize;
/// Query rows per attention call (results do not depend on it).
const ROWS: usize = 4;
const SCRATCH: usize = CFG.scratch_len(Q_HEADS, 1);
/// f32s of the work buffer: queries and outputs of [`ROWS`] rows, a K and a V row, scratch.
pub const WORK_F32: usize = 2 * ROWS * Q_ROW + 2 * KV_ROW + SCRATCH;

/// Turn 2's window: 4 sinks and the 64 most recent positions.
pub const WINDOW: Window = Window {
    sinks: 4,
    window: 64,
};

/// What one turn did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    /// Prompt tokens.
    pub prompt: u32,
    /// Prompt tokens reused from the prefix cache.
    pub reused: u32,
    /// Decode steps.
    pub decoded: u32,
    /// Clock ticks of the prefill (write + attention).
    pub prefill_ticks: u32,
    /// Clock ticks of the decode steps.
    pub decode_ticks: u32,
}

/// What the session did.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// Turn 1 (cold).
    pub turn1: Turn,
    /// Turn 2 (warm, windowed decode).
    pub turn2: Turn,
    /// Segments (values and scales) cleaned for the device after turn 1.
    pub handed_segments: u32,
    /// Bytes cleaned for the device after turn 1.
    pub handed_bytes: usize,
    /// Pages `slide` released during turn 2.
    pub released: u32,
    /// Occupancy at the end.
    pub stats: Stats,
    /// CRC-32 of every attention output.
    pub crc: u32,
}

/// Runs the session over `cache` (fresh, configured with [`CFG`]); `work` holds at least
/// [`WORK_F32`] f32s, `dcache` cleans pages before a device reads them, `clock` counts ticks.
pub fn run(
    cache: &mut KvCache<'_>,
    work: &mut [f32],
    dcache: &mut impl CacheMaintenance,
    clock: &dyn Fn() -> u32,
) -> Result<Report, HalError> {
    let work = work
        .get_mut(..WORK_F32)
        .ok_or(HalError::Cache(edgekv::Error::LengthMismatch))?;
    let mut s = Session {
        work,
        crc: Crc32::new(),
        clock,
    };
    let params = AttentionParams::new(SHAPE, Q_HEADS);

    // Turn 1: 64 system tokens + 40 user tokens, cold.
    let mut chat = [0u32; 256];
    for (i, t) in chat.iter_mut().enumerate() {
        *t = 1 + i as u32 * 7 % 49_152;
    }
    let p1 = 104;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    let mut turn1 = s.prefill(cache, seq, &chat[..p1], &params)?;
    turn1.decoded = 8;
    let t0 = clock();
    for i in 0..turn1.decoded as usize {
        chat[p1 + i] = s.next_token(p1 + i);
        s.decode(cache, seq, chat[p1 + i], &params, None)?;
    }
    turn1.decode_ticks = clock().wrapping_sub(t0);
    cache.commit_prompt(seq, &chat[..p1])?;
    let (handed_segments, handed_bytes) = hand_to_device(cache, seq, dcache)?;
    cache.free_sequence(seq)?;

    // Turn 2: everything so far (decoded tokens included) + a 40-token message; reuse, then
    // decode under a sliding window.
    let p2 = p1 + turn1.decoded as usize + 40;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    let mut turn2 = s.prefill(cache, seq, &chat[..p2], &params)?;
    let windowed = params.with_window(WINDOW.sinks, WINDOW.window);
    turn2.decoded = 32;
    let mut released = 0;
    let t0 = clock();
    for i in 0..turn2.decoded as usize {
        chat[p2 + i] = s.next_token(p2 + i);
        released += s.decode(cache, seq, chat[p2 + i], &windowed, Some(&WINDOW))?;
    }
    turn2.decode_ticks = clock().wrapping_sub(t0);
    cache.commit_prompt(seq, &chat[..p2])?;

    Ok(Report {
        turn1,
        turn2,
        handed_segments,
        handed_bytes,
        released: u32::from(released),
        stats: cache.stats(),
        crc: s.crc.finish(),
    })
}

/// Hands every page of `seq` (values and scales, all layers, K and V) to a device through
/// edgekv-hal's [`read_view`]: coalesced segment lists (CPU address, device address, length), each
/// segment cleaned out of the D-cache — the point where a DMA descriptor list or an NPU job would
/// be built and submitted. On a core without a D-cache (or under QEMU) the clean is a no-op; on
/// the Cortex-M7 it is what makes the device see the CPU's writes. Rows a device writes come
/// back through `edgekv_hal::ingest`, which invalidates before the CPU reads them. Returns the
/// segments and bytes handed over.
pub fn hand_to_device(
    cache: &KvCache<'_>,
    seq: SeqId,
    dcache: &mut impl CacheMaintenance,
) -> Result<(u32, usize), HalError> {
    let (mut segments, mut bytes) = (0u32, 0usize);
    let (mut values, mut scales) = ([Segment::default(); 16], [Segment::default(); 16]);
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let view = read_view(
                cache,
                &IdentityMap,
                dcache,
                seq,
                layer,
                kv,
                &mut values,
                &mut scales,
            )?;
            for s in values[..view.values].iter().chain(&scales[..view.scales]) {
                // NPU/DMA hook: one descriptor per segment (`s.dev`, `s.len`).
                segments += 1;
                bytes += s.len;
            }
        }
    }
    Ok((segments, bytes))
}

struct Session<'w, 'c> {
    work: &'w mut [f32],
    crc: Crc32,
    clock: &'c dyn Fn() -> u32,
}

impl Session<'_, '_> {
    /// Looks the prompt up, attaches the hit and prefills the rest in chunks aligned to C: per
    /// chunk, K/V rows of every layer, then attention of its queries in every layer.
    fn prefill(
        &mut self,
        cache: &mut KvCache<'_>,
        seq: SeqId,
        prompt: &[u32],
        params: &AttentionParams,
    ) -> Result<Turn, HalError> {
        let t0 = (self.clock)();
        let hit = cache.lookup(prompt)?;
        let from = cache.attach(seq, &hit, prompt)?;
        for chunk in plan_prefill(from, prompt.len() as u32, CFG.chunk()) {
            let first = cache.reserve(seq, chunk.end - chunk.start)?;
            for pos in first..chunk.end {
                self.write_rows(cache, seq, prompt[pos as usize], pos)?;
            }
            for layer in 0..SHAPE.layers {
                let mut start = first;
                while start < chunk.end {
                    let n = (chunk.end - start).min(ROWS as u32);
                    self.attend(cache, seq, layer, start, n as usize, params)?;
                    start += n;
                }
            }
        }
        Ok(Turn {
            prompt: prompt.len() as u32,
            reused: from,
            prefill_ticks: (self.clock)().wrapping_sub(t0),
            ..Turn::default()
        })
    }

    /// One decode step: reserve a position, write its rows, attend in every layer, then (with a
    /// window) release the pages no later query sees. Returns the pages released.
    fn decode(
        &mut self,
        cache: &mut KvCache<'_>,
        seq: SeqId,
        token: u32,
        params: &AttentionParams,
        window: Option<&Window>,
    ) -> Result<u16, HalError> {
        let pos = cache.reserve(seq, 1)?;
        self.write_rows(cache, seq, token, pos)?;
        for layer in 0..SHAPE.layers {
            self.attend(cache, seq, layer, pos, 1, params)?;
        }
        Ok(match window {
            Some(w) => cache.slide(seq, w, pos + 1)?,
            None => 0,
        })
    }

    fn write_rows(
        &mut self,
        cache: &mut KvCache<'_>,
        seq: SeqId,
        token: u32,
        pos: u32,
    ) -> Result<(), HalError> {
        let (_, rest) = self.work.split_at_mut(2 * ROWS * Q_ROW);
        let (k, rest) = rest.split_at_mut(KV_ROW);
        let v = &mut rest[..KV_ROW];
        for layer in 0..SHAPE.layers {
            // A stand-in for a model: rows depend on the token, its position and the layer.
            let seed = mix(token) ^ pos << 12 ^ u32::from(layer) << 28;
            fill(k, seed);
            fill(v, !seed);
            cache.write_kv(seq, layer, pos, k, v)?;
        }
        Ok(())
    }

    fn attend(
        &mut self,
        cache: &KvCache<'_>,
        seq: SeqId,
        layer: u16,
        start: u32,
        n: usize,
        params: &AttentionParams,
    ) -> Result<(), HalError> {
        let (q, rest) = self.work.split_at_mut(ROWS * Q_ROW);
        let (out, rest) = rest.split_at_mut(ROWS * Q_ROW);
        let scratch = &mut rest[2 * KV_ROW..];
        let (q, out) = (&mut q[..n * Q_ROW], &mut out[..n * Q_ROW]);
        fill(q, 0x5100_0000 ^ start << 8 ^ u32::from(layer));
        cache.attention(seq, layer, start, q, out, params, scratch)?;
        self.crc.update_f32(out);
        Ok(())
    }

    /// The "sampled" token at `pos`, derived from the outputs so far.
    fn next_token(&self, pos: usize) -> u32 {
        1 + (mix(self.crc.state() ^ pos as u32) % 49_152)
    }
}

/// A 32-bit integer hash (lowbias32).
fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// Fills `xs` with values in [-2, 2) in steps of 1/64 (exact in f32) derived from `seed`.
fn fill(xs: &mut [f32], seed: u32) {
    for (i, x) in xs.iter_mut().enumerate() {
        *x = ((mix(seed ^ i as u32) & 0xff) as i32 - 128) as f32 / 64.0;
    }
}

/// CRC-32/ISO-HDLC (zlib's), the `crc` crate's table-less variant: no table in flash.
static CRC32: crc::Crc<u32, crc::NoTable> =
    crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);

/// A running CRC-32 of little-endian f32 bytes.
#[derive(Clone)]
struct Crc32(crc::Digest<'static, u32, crc::NoTable>);

impl Crc32 {
    fn new() -> Self {
        Crc32(CRC32.digest())
    }

    fn update_f32(&mut self, xs: &[f32]) {
        for x in xs {
            self.0.update(&x.to_le_bytes());
        }
    }

    fn finish(&self) -> u32 {
        self.0.clone().finalize()
    }

    /// The register before the final inversion (what the bitwise loop kept), as a seed.
    fn state(&self) -> u32 {
        !self.finish()
    }
}
