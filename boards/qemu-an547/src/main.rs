//! SmolLM2-135M-Instruct on QEMU mps3-an547 (Cortex-M55) with its KV in edgekv pages: the
//! model is read in place from DDR (standing in for memory-mapped external flash), the system
//! prompt's KV restored from a snapshot image in QSPI flash that the host wrote with the same
//! forward pass, then the chat script's turns run with prefix reuse ([`edgekv_llm::chat`]). Every
//! step is logged through defmt over semihosting with its instruction count (QEMU `-icount`), so
//! the host can print the transcript and compare token ids and logit digests with its own run.
//! The stack's high-water mark is logged per kind of call (`edgekv-board-stack`).
//! Exits 0 when the chat ran and the cold and restored first tokens agree bit for bit, 1 on an
//! error, 3 on a HardFault.
#![no_std]
#![no_main]

mod boot;
mod memory;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::{ExceptionFrame, entry, exception};
use defmt::{Display2Format, println};
use defmt_semihosting as _;
use edgekv::snapshot::SliceFlash;
use edgekv::{ElementFormat, FreeList, KvCache, PageAllocator};
use edgekv_board_clock as clock;
use edgekv_board_stack::{self as stack, Marks, Painter};
use edgekv_llm::chat::{self, Buffers, Event, Start, Turn};
use edgekv_llm::{Engine, Gguf, Llama};

use memory::{CHUNK, CONFIG, KV_BYTES, MODEL, PLAN, SCRATCH};

/// Most turns a script may have.
const MAX_TURNS: usize = 16;
/// Decode steps whose costs are kept for the median.
const MAX_STEPS: usize = 512;

#[entry]
fn main() -> ! {
    println!("edgekv on mps3-an547 (Cortex-M55)");
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

/// Figures gathered from the chat's events (instructions).
struct Figures {
    cold: Option<(u64, u32, u32)>,
    restored: Option<(u64, u32)>,
    first: [Option<(Start, u64, u32, u32)>; MAX_TURNS],
    /// Decode steps' costs, the first [`MAX_STEPS`] of them.
    steps: heapless::Vec<u64, MAX_STEPS>,
}

fn run(per_m: u64) -> Result<(), ()> {
    let instr = |ticks: u64| ticks * 1_000_000 / per_m.max(1);
    let buffers = memory::take().ok_or(())?;
    // One decode step at 2,048 keys, counted, in the KV arena before the chat takes it (its
    // digest is compared with the host's too).
    let painter = Painter::paint();
    let step = edgekv_parity::decode_step(buffers.kv, buffers.scratch, &mut clock::now);
    let step_depth = painter.deepest();
    let step = step.map_err(|e| println!("decode step: {}", defmt::Debug2Format(&e)))?;
    println!(
        "decode_step keys {=u32} instructions {=u64} crc32 {=u32:08x}",
        edgekv_parity::STEP_KEYS,
        instr(step.ticks),
        step.crc32
    );
    let boot = boot::read().map_err(|e| println!("boot descriptor: {}", e))?;
    let gguf = Gguf::parse(boot.model).map_err(|e| println!("GGUF: {}", Display2Format(&e)))?;
    let model = Llama::new(&gguf).map_err(|e| println!("model: {}", Display2Format(&e)))?;
    let c = model.config();
    if c.shape().ok() != MODEL.shape().ok() || c.vocab != MODEL.vocab || c.embed != MODEL.embed {
        println!("model: not the SmolLM2-135M shape the buffers were planned for");
        return Err(());
    }
    println!(
        "model: llama, {=usize} blocks, embed {=usize}, {=usize} heads / {=usize} KV heads of {=usize}, vocab {=usize}; {=usize} B GGUF read in place from DDR",
        c.layers,
        c.embed,
        c.heads,
        c.kv_heads,
        c.head_dim,
        c.vocab,
        boot.model.len()
    );
    log_capacity();
    let mut cache: KvCache<'_, FreeList<'_>> = KvCache::new(
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
        "script: system prompt {=usize} tokens (restored from a {=usize} B image in QSPI flash), {=usize} turns",
        script.system.len(),
        boot.image.len(),
        script.turns.len()
    );

    let mut fig = Figures {
        cold: None,
        restored: None,
        first: [None; MAX_TURNS],
        steps: heapless::Vec::new(),
    };
    let mut clock = clock::now;
    let mut observe = |e: Event| match e {
        Event::Restored { tokens, cost } => {
            println!(
                "restored {=u32} tokens instructions {=u64}",
                tokens,
                instr(cost)
            );
            fig.restored = Some((instr(cost), tokens));
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
            if start == Start::Cold {
                fig.cold = Some((instr(cost), prefilled, crc));
            } else if let Some(f) = fig.first.get_mut(turn) {
                *f = Some((start, instr(cost), prefilled, crc));
            }
        }
        Event::Token {
            turn,
            token,
            crc,
            cost,
        } => {
            println!(
                "token turn {=usize} id {=u32} crc32 {=u32:08x} instructions {=u64}",
                turn,
                token,
                crc,
                instr(cost)
            );
            // Past MAX_STEPS the median is taken over the first ones.
            let _ = fig.steps.push(instr(cost));
        }
        Event::End {
            turn,
            generated,
            context,
        } => println!(
            "end turn {=usize} generated {=u32} context {=u32}",
            turn, generated, context
        ),
        // Reported by layer-grouped caches only; SmolLM2's has one group.
        Event::Pages { .. } => {}
    };
    let mut image = SliceFlash(boot.image);
    let mut marks = Marks::<8>::new();
    // Each chat event follows one kind of call: the stack is scanned and repainted at each.
    let (r, _) = stack::laps(&mut marks, |lap| {
        chat::run(
            &mut engine,
            &mut cache,
            &script,
            &mut image,
            Buffers {
                logits: buffers.logits,
                prompt: buffers.prompt,
            },
            &mut clock,
            &mut |e: Event| {
                let (kind, detail) = match e {
                    Event::Restored { .. } => ("snapshot restore", "system prompt, from flash"),
                    Event::First { start, .. } => ("forward pass, prefill", start.name()),
                    Event::Token { .. } => ("forward pass, decode", ""),
                    Event::End { .. } | Event::Pages { .. } => ("end of turn", ""),
                };
                observe(e);
                lap(kind, detail);
            },
        )
    });
    marks.record("attention decode step", "2,048 q8_0 keys", step_depth);
    marks.log();
    if let Err(e) = r {
        println!("chat: {}", Display2Format(&e));
        return Err(());
    }
    summary(&mut fig)
}

/// Tokens of context each KV format would fit in the KV arena (the planner's figures).
fn log_capacity() {
    let hd = CONFIG.shape.head_dim;
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
        ("q4_1", ElementFormat::Q4_1, ElementFormat::Q4_1),
        ("q4_0", q4, q4),
    ];
    for (name, k, v) in formats {
        let config = CONFIG.with_formats(k, v);
        match (
            config.geometry(),
            config.plan(KV_BYTES, FreeList::META_BITS_PER_PAGE),
        ) {
            (Ok(g), Ok(p)) => println!(
                "kv {=str}: {=usize} B/token, {=usize} tokens in {=usize} KiB of SRAM ({=usize} per MiB)",
                name,
                g.page_bytes / usize::from(CHUNK),
                p.token_capacity(),
                KV_BYTES / 1024,
                p.token_capacity() * 1024 * 1024 / KV_BYTES
            ),
            _ => println!("kv {=str}: does not fit", name),
        }
    }
    println!(
        "kv in use: q8_0 keys and values, {=u16} pages of {=u16} tokens = {=usize} tokens; metadata {=usize} B in DTCM; scratch {=usize} B + logits {=usize} B in SRAM",
        PLAN.num_pages,
        CHUNK,
        PLAN.token_capacity(),
        PLAN.meta.total,
        SCRATCH.scratch_bytes,
        SCRATCH.logits_per_row * 4
    );
}

/// The per-turn figures and the bit-exactness check of the cold and restored first tokens.
fn summary(fig: &mut Figures) -> Result<(), ()> {
    let steps = &mut fig.steps;
    steps.sort_unstable();
    let median = steps.get(steps.len() / 2).copied().unwrap_or(0);
    println!(
        "figure decode: {=u64} instructions per token (median of {=usize} steps)",
        median,
        steps.len()
    );
    let restore = fig.restored.map_or(0, |r| r.0);
    let restored_first = fig.first[0].filter(|f| f.0 == Start::Restored);
    if let Some((_, cost, n, _)) = restored_first {
        println!(
            "figure first token, system prompt restored: {=u64} instructions (restore {=u64} + prefill {=u32} tokens {=u64})",
            restore + cost,
            restore,
            n,
            cost
        );
    }
    for (_, cost, n, _) in fig.first.iter().flatten().filter(|f| f.0 == Start::Reused) {
        println!(
            "figure first token, system prompt reused from the prefix index: {=u64} instructions (prefill {=u32} tokens)",
            cost, n
        );
    }
    let Some((cold, n, cold_crc)) = fig.cold else {
        return Ok(());
    };
    println!(
        "figure first token, cold: {=u64} instructions (prefill {=u32} tokens, {=u64} per token)",
        cold,
        n,
        cold / u64::from(n.max(1))
    );
    let Some((_, cost, _, crc)) = restored_first else {
        return Ok(());
    };
    println!(
        "figure restored vs cold: {=u64}.{=u64}x faster to the first token",
        cold / (restore + cost).max(1),
        cold * 10 / (restore + cost).max(1) % 10
    );
    if crc != cold_crc {
        println!(
            "MISMATCH: restored first-token logits {=u32:08x}, cold {=u32:08x}",
            crc, cold_crc
        );
        return Err(());
    }
    println!("restored and cold first-token logits are bit-identical");
    Ok(())
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
