//! The Gemma 3 firmware's static memory, sized at compile time from the model's shape: the KV
//! data arena (a layer-grouped cache: the 15 sliding-window layers in group 0, window 512, the 3
//! global layers in group 1) in DDR (`.gemmakv`, standing in for a board's external PSRAM: the
//! window alone takes more than the 4 MiB of SRAM banks), the forward pass's scratch, logits
//! (262,144 of them) and prompt buffer in the 2 MiB SRAM (`.sram`), the cache's metadata in DTCM.
//! All `NOLOAD`: nothing is copied at boot.

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupWindow, GroupedPlan, LayerGroup, Layers, META_ALIGN,
    PageAllocator,
};
use edgekv_llm::{Arch, Gemma3, LlamaConfig, ScratchPlan};
use static_cell::ConstStaticCell;

/// Gemma 3 270M as its GGUF states it (the firmware checks the GGUF it is given against this).
pub const MODEL: LlamaConfig = LlamaConfig {
    layers: 18,
    embed: 640,
    ffn: 2048,
    heads: 4,
    kv_heads: 1,
    head_dim: 256,
    rope_base: 1_000_000.0,
    rms_eps: 1e-6,
    vocab: 262_144,
    context: 32_768,
    bos: 2,
    eos: 1,
    arch: Arch::Gemma3(Gemma3 {
        sliding_window: WINDOW,
        period: PERIOD,
        local_rope_base: 10_000.0,
    }),
};
/// The sliding window of Gemma 3's local layers.
pub const WINDOW: u32 = 512;
/// Every sixth layer is global (llama.cpp's default pattern).
pub const PERIOD: u16 = 6;
/// Bytes of DDR for KV pages.
pub const KV_BYTES: usize = 16 * 1024 * 1024;
/// Tokens per page, and per prefill chunk (the scratch holds this many rows).
pub const CHUNK: u16 = 16;
/// Token ids a new request's prompt may have (the shared document and the request's part).
pub const PROMPT_TOKENS: usize = 1024;
/// Positions a sequence may have.
pub const MAX_TOKENS: u32 = 1024;

const SHAPE: edgekv::Shape = match MODEL.shape() {
    Ok(s) => s,
    Err(_) => panic!("model shape"),
};

/// The layer groups of `LlamaConfig::cache_config`, with `k` and `v` pages.
pub const fn grouped(k: ElementFormat, v: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_formats(k, v)
        .with_window(GroupWindow::new(WINDOW, 0))
        .with_group(
            LayerGroup::new(Layers::Every {
                period: PERIOD,
                first: PERIOD - 1,
            })
            .with_formats(k, v),
        )
        .with_page_tokens(CHUNK)
        .with_chunk_tokens(CHUNK)
}

/// The cache: q8_0 keys and values (ggml's Q8_0 blocks) in both groups, 16-token pages
/// published per chunk; two sequences (a request's and the pages a finished one left cached for
/// prefix reuse).
pub const CONFIG: CacheConfig =
    grouped(ElementFormat::Q8_0, ElementFormat::Q8_0).with_sequences(2, MAX_TOKENS);

/// The pages of each group that fit in [`KV_BYTES`].
pub const PLAN: GroupedPlan = match CONFIG.plan_groups(KV_BYTES, FreeList::META_BITS_PER_PAGE) {
    Ok(p) => p,
    Err(_) => panic!("KV plan"),
};

/// The forward pass's buffers for one chunk of rows.
pub const SCRATCH: ScratchPlan = match ScratchPlan::new(&MODEL, CHUNK as usize, CHUNK) {
    Ok(p) => p,
    Err(_) => panic!("scratch plan"),
};

#[unsafe(link_section = ".gemmakv")]
static mut KV: [MaybeUninit<u8>; KV_BYTES] = [MaybeUninit::uninit(); KV_BYTES];

/// The `.sram` buffers (zeroed at [`take`], not at boot).
struct Sram {
    scratch: [f32; SCRATCH.scratch],
    logits: [f32; SCRATCH.logits_per_row],
    prompt: [u32; PROMPT_TOKENS],
}

#[unsafe(link_section = ".sram")]
static mut SRAM: MaybeUninit<Sram> = MaybeUninit::uninit();

static META: ConstStaticCell<[MaybeUninit<u8>; PLAN.meta_bytes + META_ALIGN]> =
    ConstStaticCell::new([MaybeUninit::uninit(); PLAN.meta_bytes + META_ALIGN]);

/// Every buffer, once.
pub struct Buffers {
    /// KV data arena.
    pub kv: &'static mut [MaybeUninit<u8>],
    /// Cache metadata arena.
    pub meta: &'static mut [MaybeUninit<u8>],
    /// Forward-pass scratch.
    pub scratch: &'static mut [f32],
    /// One row of logits.
    pub logits: &'static mut [f32],
    /// A new request's prompt ids.
    pub prompt: &'static mut [u32],
}

/// The buffers, once (`None` on a second call).
pub fn take() -> Option<Buffers> {
    let meta = META.try_take()?;
    // SAFETY: `META` can be taken once only, so these lines run at most once and make the only
    // references to `KV` and `SRAM` ever created. `KV` holds `MaybeUninit` bytes (no
    // initialization needed); `SRAM` is zeroed before the reference is made, and all-zero bytes
    // are valid f32s and u32s.
    unsafe {
        let sram = addr_of_mut!(SRAM);
        core::ptr::write_bytes(sram, 0, 1);
        let sram = &mut *(*sram).as_mut_ptr();
        Some(Buffers {
            kv: &mut *addr_of_mut!(KV),
            meta,
            scratch: &mut sram.scratch,
            logits: &mut sram.logits,
            prompt: &mut sram.prompt,
        })
    }
}
