//! Gemma 3 270M (the pretrained Q4_K_M GGUF) on QEMU mps3-an547 (Cortex-M55) with its KV in a
//! layer-grouped edgekv cache: the 15 sliding-window layers in their own group (window 512,
//! pages released as positions leave it), the 3 global layers in another. The GGUF is read in
//! place from DDR; a shared document's KV is restored from a grouped snapshot image in QSPI
//! flash that the host wrote with the same forward pass; then the script's requests run
//! ([`edgekv_llm::chat`] over the `GroupedCache`): the first continues the document past
//! position 512, a second starts anew and reuses the document's pages through the prefix
//! index. Every step is logged through defmt over semihosting with its instruction count (QEMU
//! `-icount`) and logit digest, and each group's pages at the end of each request, so the host
//! can print the transcript and compare with its own run.
//! Exits 0 when the script ran (and, with a cold start, the cold and restored first tokens
//! agree bit for bit), 1 on an error, 3 on a HardFault.
#![no_std]
#![no_main]

#[path = "../../boot.rs"]
mod boot;
mod memory;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::{ExceptionFrame, entry, exception};
use defmt::{Display2Format, println};
use defmt_semihosting as _;
use edgekv::snapshot::SliceFlash;
use edgekv::{CacheConfig, ElementFormat, FreeList, GroupedCache, PageAllocator};
use edgekv_board_clock as clock;
use edgekv_llm::chat::{self, Buffers, Event, Start, Turn};
use edgekv_llm::{Engine, Gguf, Llama};

use memory::{CHUNK, CONFIG, KV_BYTES, MODEL, PLAN, SCRATCH};

/// Most requests a script may have.
const MAX_TURNS: usize = 8;

#[entry]
fn main() -> ! {
    println!("edgekv on mps3-an547 (Cortex-M55): Gemma 3 270M");
    let Some(cp) = cortex_m::Peripherals::take() else {
        exit(1)
    };
    clock::start(cp.SYST);
    let per_m = clock::calibrate(5_000_000);
    println!(
        "clock: {=u64} SysTick ticks per million instructions (QEMU -icount)",
        per_m
    );
    match run(per_m) {
        Ok(()) => exit(0),
        Err(()) => exit(1),
    }
}

fn run(per_m: u64) -> Result<(), ()> {
    let instr = |ticks: u64| ticks * 1_000_000 / per_m.max(1);
    let buffers = memory::take().ok_or(())?;
    let boot = boot::read().map_err(|e| println!("boot descriptor: {}", e))?;
    let gguf = Gguf::parse(boot.model).map_err(|e| println!("GGUF: {}", Display2Format(&e)))?;
    let model = Llama::new(&gguf).map_err(|e| println!("model: {}", Display2Format(&e)))?;
    let c = model.config();
    let q8 = ElementFormat::Q8_0;
    // The model's own layer groups (LlamaConfig::cache_config) must be the planned ones.
    let groups = c
        .cache_config(q8, q8)
        .map(|g| {
            g.with_page_tokens(CHUNK)
                .with_chunk_tokens(CHUNK)
                .with_sequences(CONFIG.max_seqs, CONFIG.max_seq_tokens)
        })
        .ok();
    if c.shape().ok() != MODEL.shape().ok()
        || c.vocab != MODEL.vocab
        || c.embed != MODEL.embed
        || c.ffn != MODEL.ffn
        || c.arch != MODEL.arch
        || groups != Some(CONFIG)
    {
        println!("model: not the Gemma 3 270M shape the buffers were planned for");
        return Err(());
    }
    println!(
        "model: gemma3, {=usize} blocks, embed {=usize}, {=usize} heads / {=usize} KV heads of {=usize}, vocab {=usize}; {=usize} B GGUF read in place from DDR",
        c.layers,
        c.embed,
        c.heads,
        c.kv_heads,
        c.head_dim,
        c.vocab,
        boot.model.len()
    );
    log_capacity();
    let mut cache: GroupedCache<'_, FreeList<'_>> = GroupedCache::new(
        CONFIG.with_namespace(model.fingerprint()),
        buffers.kv,
        buffers.meta,
    )
    .map_err(|e| println!("cache: {}", e))?;
    let mut engine = Engine::new(&model, buffers.scratch, u32::from(CHUNK))
        .map_err(|e| println!("engine: {}", Display2Format(&e)))?;
    let mut turns = [Turn::default(); MAX_TURNS];
    let script = chat::wire::decode(boot.script, &mut turns)
        .map_err(|e| println!("script: {}", Display2Format(&e)))?;
    println!(
        "script: shared document {=usize} tokens (restored from a {=usize} B grouped image in QSPI flash), {=usize} requests",
        script.system.len(),
        boot.image.len(),
        script.turns.len()
    );

    let mut restore = 0u64;
    let mut cold: Option<u32> = None;
    let mut restored: Option<u32> = None;
    let mut clock = clock::now;
    let mut image = SliceFlash(boot.image);
    let r = chat::run(
        &mut engine,
        &mut cache,
        &script,
        &mut image,
        Buffers {
            logits: buffers.logits,
            prompt: buffers.prompt,
        },
        &mut clock,
        &mut |e: Event| match e {
            Event::Restored { tokens, cost } => {
                restore = instr(cost);
                println!(
                    "restored {=u32} tokens instructions {=u64}",
                    tokens,
                    instr(cost)
                );
            }
            Event::First {
                turn,
                start,
                prefilled,
                reused,
                token,
                crc,
                cost,
            } => {
                println!(
                    "first {=str} turn {=usize} prefilled {=u32} reused {=u32} token {=u32} crc32 {=u32:08x} instructions {=u64}",
                    start.name(),
                    turn,
                    prefilled,
                    reused,
                    token,
                    crc,
                    instr(cost)
                );
                match start {
                    Start::Cold => cold = Some(crc),
                    Start::Restored => restored = Some(crc),
                    _ => {}
                }
                if start == Start::Restored {
                    println!(
                        "figure first token, document restored: {=u64} instructions (restore {=u64} + prefill {=u32} tokens {=u64})",
                        restore + instr(cost),
                        restore,
                        prefilled,
                        instr(cost)
                    );
                }
            }
            Event::Token {
                turn,
                token,
                crc,
                cost,
            } => println!(
                "token turn {=usize} id {=u32} crc32 {=u32:08x} instructions {=u64}",
                turn,
                token,
                crc,
                instr(cost)
            ),
            Event::End {
                turn,
                generated,
                context,
            } => println!(
                "end turn {=usize} generated {=u32} context {=u32}",
                turn, generated, context
            ),
            Event::Pages { turn, group, pages } => println!(
                "pages turn {=usize} group {=usize} held {=u16} released {=u16} cached {=u16} free {=u16}",
                turn, group, pages.held, pages.released, pages.cached, pages.free
            ),
        },
    );
    if let Err(e) = r {
        println!("chat: {}", Display2Format(&e));
        return Err(());
    }
    match (cold, restored) {
        (Some(a), Some(b)) if a != b => {
            println!(
                "MISMATCH: restored first-token logits {=u32:08x}, cold {=u32:08x}",
                b, a
            );
            Err(())
        }
        (Some(_), Some(_)) => {
            println!("restored and cold first-token logits are bit-identical");
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Tokens of context one sequence can reach in the KV arena for each page format: the layer
/// groups (sliding-window layers holding their window only) against every layer global.
fn log_capacity() {
    let hd = MODEL.head_dim as u16;
    let fp8 = ElementFormat::Fp8Tile {
        dv: hd,
        tile: 32,
        bf16: false,
    };
    let (q8, q4) = (ElementFormat::Q8_0, ElementFormat::Q4_0);
    let formats = [
        ("f32", ElementFormat::F32, ElementFormat::F32),
        ("f16", ElementFormat::F16, ElementFormat::F16),
        ("fp8", fp8, fp8),
        ("q8_0", q8, q8),
        ("q8_0 K + q4_0 V", q8, q4),
        ("q4_0", q4, q4),
    ];
    let bits = FreeList::META_BITS_PER_PAGE;
    for (name, k, v) in formats {
        // One sequence, no cap on its length: the context the arena holds.
        let grouped = memory::grouped(k, v).with_sequences(1, 1 << 20);
        let global = CacheConfig::new(grouped.shape)
            .with_formats(k, v)
            .with_page_tokens(CHUNK)
            .with_sequences(1, 1 << 20);
        match (
            grouped.plan_groups(KV_BYTES, bits),
            global.plan(KV_BYTES, bits),
        ) {
            (Ok(w), Ok(g)) => {
                let (w, g) = (w.context_tokens as usize, g.token_capacity());
                println!(
                    "kv {=str}: {=usize} tokens of context in {=usize} MiB windowed, {=usize} all-global ({=usize}.{=usize}x)",
                    name,
                    w,
                    KV_BYTES >> 20,
                    g,
                    w / g.max(1),
                    w * 10 / g.max(1) % 10
                );
            }
            _ => println!("kv {=str}: does not fit", name),
        }
    }
    let pages = |g: usize| PLAN.group(g).map_or(0, |p| p.num_pages);
    println!(
        "kv in use: q8_0 keys and values, {=u16} pages of {=u16} tokens for the 15 sliding-window layers (window {=u32}), {=u16} for the 3 global layers; metadata {=usize} B in DTCM; scratch {=usize} B + logits {=usize} B in SRAM",
        pages(0),
        CHUNK,
        memory::WINDOW,
        pages(1),
        PLAN.meta_bytes,
        SCRATCH.scratch_bytes,
        SCRATCH.logits_per_row * 4
    );
}

/// Ends the QEMU run with `code`.
fn exit(code: i32) -> ! {
    semihosting::process::exit(code)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    println!("HardFault at pc {=u32:08x}", frame.pc());
    exit(3)
}
