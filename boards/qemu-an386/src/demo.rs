//! A multi-turn chat session with a synthetic transformer-shaped workload: each turn's prompt
//! extends the conversation, the cache reuses the published prefix, prefills the rest in
//! chunk-aligned steps into int8 pages, decodes an answer with windowed attention (sinks +
//! window, releasing pages behind it) and checks every decode step against f32 attention over
//! the unquantized rows.

use core::mem::MaybeUninit;

use edgekv::attention::AttentionParams;
use edgekv::prefix::{namespace, plan_prefill};
use edgekv::{CacheConfig, ElementFormat, FreeList, KvCache, PageAllocator, SeqId, SeqMode, Shape};
use static_cell::ConstStaticCell;

const SHAPE: Shape = Shape {
    layers: 4,
    kv_heads: 3,
    head_dim: 64,
};
const Q_HEADS: u16 = 9;
const HD: usize = SHAPE.head_dim as usize;
const KV_ROW: usize = SHAPE.kv_heads as usize * HD;
const Q_ROW: usize = Q_HEADS as usize * HD;
const PAGE: u16 = 16;
const CHUNK: u16 = 32;
const MAX_TOKENS: usize = 512;
const PAGES: usize = 64;
const TURNS: usize = 8;
const ANSWER: usize = 10;
const SINKS: u32 = 4;
const WINDOW: u32 = 192;

const CONFIG: CacheConfig = CacheConfig::new(SHAPE)
    .with_page_tokens(PAGE)
    .with_chunk_tokens(CHUNK)
    .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
    .with_sequences(2, MAX_TOKENS as u32)
    .with_namespace(namespace(&[b"edgekv-demo-synthetic-model"]));
const PLAN: edgekv::Plan = match CONFIG.plan_pages(PAGES, FreeList::META_BITS_PER_PAGE) {
    Ok(p) => p,
    Err(_) => panic!("demo plan"),
};

/// The conversation: tokens, the running context hash of every position, and layer 0's
/// unquantized K and V rows (the f32 reference).
struct Conversation {
    tokens: [u32; MAX_TOKENS],
    context: [u64; MAX_TOKENS],
    k: [f32; MAX_TOKENS * KV_ROW],
    v: [f32; MAX_TOKENS * KV_ROW],
    len: usize,
}

static CONVERSATION: ConstStaticCell<Conversation> = ConstStaticCell::new(Conversation {
    tokens: [0; MAX_TOKENS],
    context: [0; MAX_TOKENS],
    k: [0.0; MAX_TOKENS * KV_ROW],
    v: [0.0; MAX_TOKENS * KV_ROW],
    len: 0,
});
static META: ConstStaticCell<[MaybeUninit<u8>; PLAN.meta.total + 8]> =
    ConstStaticCell::new([MaybeUninit::uninit(); PLAN.meta.total + 8]);
static ROWS: ConstStaticCell<[f32; 2 * CHUNK as usize * KV_ROW]> =
    ConstStaticCell::new([0.0; 2 * CHUNK as usize * KV_ROW]);
static SCORES: ConstStaticCell<[f32; MAX_TOKENS]> = ConstStaticCell::new([0.0; MAX_TOKENS]);

/// xorshift64* values in [-1, 1), seeded by `seed`, into `out`; channel 11 is an outlier.
fn fill(seed: u64, out: &mut [f32]) {
    let mut x = seed | 1;
    for (i, o) in out.iter_mut().enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        *o = if i % HD == 11 { 4.0 * v } else { v };
    }
}

fn mix(h: u64, token: u32) -> u64 {
    (h ^ token as u64)
        .wrapping_mul(0x0100_0000_01b3)
        .rotate_left(17)
}

impl Conversation {
    fn push(&mut self, token: u32) {
        let t = self.len;
        let prev = if t == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.context[t - 1]
        };
        self.tokens[t] = token;
        self.context[t] = mix(prev, token);
        let (k, v) = (
            &mut self.k[t * KV_ROW..][..KV_ROW],
            &mut self.v[t * KV_ROW..][..KV_ROW],
        );
        fill(self.context[t] ^ 1, k);
        fill(self.context[t] ^ 2, v);
        self.len += 1;
    }
}

/// Writes positions `[start, end)` (reserved) of every layer: layer 0 from the reference rows,
/// the others from the same context hash.
fn write_rows(
    cache: &mut KvCache<'_>,
    seq: SeqId,
    conv: &Conversation,
    rows: &mut [f32],
    start: usize,
    end: usize,
) -> Result<(), edgekv::Error> {
    let n = (end - start) * KV_ROW;
    let (k, v) = rows.split_at_mut(rows.len() / 2);
    for layer in 0..SHAPE.layers {
        for t in start..end {
            let r = (t - start) * KV_ROW..(t - start + 1) * KV_ROW;
            if layer == 0 {
                k[r.clone()].copy_from_slice(&conv.k[t * KV_ROW..][..KV_ROW]);
                v[r].copy_from_slice(&conv.v[t * KV_ROW..][..KV_ROW]);
            } else {
                fill(conv.context[t] ^ (layer as u64) << 8 ^ 1, &mut k[r.clone()]);
                fill(conv.context[t] ^ (layer as u64) << 8 ^ 2, &mut v[r]);
            }
        }
        cache.write_kv(seq, layer, start as u32, &k[..n], &v[..n])?;
    }
    Ok(())
}

/// f32 attention over the reference rows of layer 0 for query position `t`, same window.
fn reference(conv: &Conversation, q: &[f32], t: usize, scores: &mut [f32], out: &mut [f32]) {
    let group = (Q_HEADS / SHAPE.kv_heads) as usize;
    let scale = 1.0 / libm::sqrtf(HD as f32);
    let seen = |j: usize| j < SINKS as usize || t - j < WINDOW as usize;
    for h in 0..Q_HEADS as usize {
        let kh = h / group;
        let qh = &q[h * HD..][..HD];
        let mut max = f32::NEG_INFINITY;
        for j in (0..=t).filter(|&j| seen(j)) {
            let kr = &conv.k[j * KV_ROW + kh * HD..][..HD];
            let s = qh.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>() * scale;
            scores[j] = s;
            max = max.max(s);
        }
        let oh = &mut out[h * HD..][..HD];
        oh.fill(0.0);
        let mut sum = 0.0;
        for j in (0..=t).filter(|&j| seen(j)) {
            let w = libm::expf(scores[j] - max);
            sum += w;
            let vr = &conv.v[j * KV_ROW + kh * HD..][..HD];
            for (o, x) in oh.iter_mut().zip(vr) {
                *o += w * x;
            }
        }
        for o in oh.iter_mut() {
            *o /= sum;
        }
    }
}

/// Runs the session over `data` (the PSRAM left after the parity arena).
pub fn run(data: &mut [MaybeUninit<u8>]) -> Result<(), edgekv::Error> {
    let conv = CONVERSATION.take();
    let rows = ROWS.take();
    let scores = SCORES.take();
    let skip = data.as_ptr().align_offset(CONFIG.align);
    let data = data
        .get_mut(skip..skip + PLAN.data_bytes)
        .ok_or(edgekv::ConfigError::ArenaTooSmall)?;
    let meta = META.take();
    let skip = meta.as_ptr().align_offset(edgekv::META_ALIGN);
    let mut cache: KvCache = KvCache::new(CONFIG, data, &mut meta[skip..])?;
    let params = AttentionParams::new(SHAPE, Q_HEADS).with_window(SINKS, WINDOW);
    let window = params.window.unwrap_or(edgekv::attention::Window {
        sinks: 0,
        window: 1,
    });
    let mut q = [0f32; Q_ROW];
    let mut out = [0f32; Q_ROW];
    let mut want = [0f32; Q_ROW];
    let mut scratch = [0f32; CONFIG.scratch_len(Q_HEADS, 1)];
    let stats = cache.stats();
    defmt::println!(
        "demo: {=u16} layers, {=u16} kv heads x {=u16}, int8 (Q8_0) K and V, {=u16} pages of {=u16} tokens, chunk {=u16}, window {=u32} + {=u32} sinks",
        SHAPE.layers,
        SHAPE.kv_heads,
        SHAPE.head_dim,
        stats.pages_total,
        PAGE,
        CHUNK,
        WINDOW,
        SINKS
    );
    let f32_bytes_per_token = 2 * SHAPE.layers as usize * KV_ROW * 4;
    let mut worst = 0f32;
    for turn in 0..TURNS {
        // The user's message extends the conversation.
        let user = 24 + (turn * 7) % 19;
        for i in 0..user {
            conv.push(1000 + (turn * 97 + i * 13) as u32 % 30000);
        }
        let prompt_len = conv.len;
        let prompt = &conv.tokens[..prompt_len];
        let seq = cache.create_sequence(SeqMode::Paged)?;
        let hit = cache.lookup(prompt)?;
        let reused = cache.attach(seq, &hit, prompt)?;
        for chunk in plan_prefill(reused, prompt_len as u32, CHUNK as u32) {
            cache.reserve(seq, chunk.end - chunk.start)?;
            write_rows(
                &mut cache,
                seq,
                conv,
                rows,
                chunk.start as usize,
                chunk.end as usize,
            )?;
        }
        let published = cache.commit_prompt(seq, &conv.tokens[..prompt_len])?;
        // Decode the answer, one token at a time, sliding the window.
        let mut turn_err = 0f32;
        for step in 0..ANSWER {
            let t = conv.len;
            conv.push(40000 + (turn * 31 + step) as u32);
            cache.reserve(seq, 1)?;
            write_rows(&mut cache, seq, conv, rows, t, t + 1)?;
            fill(conv.context[t] ^ 3, &mut q);
            cache.attention(seq, 0, t as u32, &q, &mut out, &params, &mut scratch)?;
            reference(conv, &q, t, scores, &mut want);
            let peak = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = out
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
                / peak;
            turn_err = turn_err.max(err);
            cache.slide(seq, &window, t as u32 + 1)?;
        }
        worst = worst.max(turn_err);
        let s = cache.stats();
        defmt::println!(
            "turn {=usize}: prompt {=usize} tokens, reused {=u32}, prefilled {=u32}, published {=u16} pages; pages used {=u16} free {=u16} cached {=u16}; {=usize} B/token (f32: {=usize}); attention error vs f32 {=f32}",
            turn,
            prompt_len,
            reused,
            prompt_len as u32 - reused,
            published,
            s.pages_used,
            s.pages_free,
            s.pages_cached,
            s.bytes_per_token,
            f32_bytes_per_token,
            turn_err
        );
        cache.free_sequence(seq)?;
    }
    let mut check = [0u16; PAGES];
    if cache.check_invariants(&mut check).is_err() {
        return Err(edgekv::Error::InvalidPage);
    }
    defmt::println!(
        "demo ok: worst attention error vs f32 {=f32}, evictions {=u64}",
        worst,
        cache.stats().evictions
    );
    if worst > 0.05 {
        return Err(edgekv::Error::LengthMismatch);
    }
    Ok(())
}
