//! The firmware's static memory, sized at compile time from the model's shape: the KV data arena
//! in the two SRAM banks (`.kvram`), the forward pass's scratch, logits and prompt buffer in the
//! 2 MiB SRAM (`.sram`), the cache's metadata in DTCM. All `NOLOAD`: nothing is copied at boot.

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use edgekv::{CacheConfig, ElementFormat, FreeList, META_ALIGN, PageAllocator, Plan};
use edgekv_llm::{LlamaConfig, ScratchPlan};
use static_cell::ConstStaticCell;

/// The model the static buffers are planned for (its GGUF must match).
pub const MODEL: LlamaConfig = LlamaConfig::SMOLLM2_135M;
/// Bytes of SRAM for KV pages (both 2 MiB banks).
pub const KV_BYTES: usize = 4 * 1024 * 1024;
/// Tokens per page, and per prefill chunk (the scratch holds this many rows).
pub const CHUNK: u16 = 16;
/// Token ids a new conversation's prompt may have (system prompt and turn).
pub const PROMPT_TOKENS: usize = 512;

const SHAPE: edgekv::Shape = match MODEL.shape() {
    Ok(s) => s,
    Err(_) => panic!("model shape"),
};

/// The cache: q8_0 keys and values (ggml's Q8_0 blocks), 16-token pages published per chunk.
pub const CONFIG: CacheConfig = CacheConfig::new(SHAPE)
    .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
    .with_page_tokens(CHUNK)
    .with_chunk_tokens(CHUNK)
    .with_sequences(2, PROMPT_TOKENS as u32);

/// The pages that fit in [`KV_BYTES`].
pub const PLAN: Plan = match CONFIG.plan(KV_BYTES, FreeList::META_BITS_PER_PAGE) {
    Ok(p) => p,
    Err(_) => panic!("KV plan"),
};

/// The forward pass's buffers for one chunk of rows.
pub const SCRATCH: ScratchPlan = match ScratchPlan::new(&MODEL, CHUNK as usize, CHUNK) {
    Ok(p) => p,
    Err(_) => panic!("scratch plan"),
};

#[unsafe(link_section = ".kvram")]
static mut KV: [MaybeUninit<u8>; KV_BYTES] = [MaybeUninit::uninit(); KV_BYTES];

/// The `.sram` buffers (zeroed at [`take`], not at boot).
struct Sram {
    scratch: [f32; SCRATCH.scratch],
    logits: [f32; SCRATCH.logits_per_row],
    prompt: [u32; PROMPT_TOKENS],
}

#[unsafe(link_section = ".sram")]
static mut SRAM: MaybeUninit<Sram> = MaybeUninit::uninit();

static META: ConstStaticCell<[MaybeUninit<u8>; PLAN.meta.total + META_ALIGN]> =
    ConstStaticCell::new([MaybeUninit::uninit(); PLAN.meta.total + META_ALIGN]);

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
    /// A new conversation's prompt ids.
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
