//! `edgekv snapshot` and `edgekv inspect`: write the parity system prompt's snapshot image (the
//! one the QEMU firmware restores), and check any image by restoring it in a matching cache.

use std::fs;
use std::mem::MaybeUninit;
use std::path::Path;

use edgekv::snapshot::{HEADER_BYTES, Header, RamFlash, SliceFlash};
use edgekv::{CacheConfig, FreeList, HeapArena, KvCache, META_ALIGN, PageAllocator};
use edgekv_parity::{Arenas, DATA_BYTES, META_BYTES, WORK_F32, snapshot};

/// Writes the parity system prompt's image (48 tokens, SmolLM2 shape, 2 layers, Q8_0 K, f16 V)
/// to `out`; returns its header.
pub fn write_system_prompt(out: &Path) -> Result<Header, String> {
    let mut data = vec![MaybeUninit::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut mem = vec![0u8; 256 * 1024];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    let header = snapshot::write_image(&mut arenas, &mut flash).map_err(|e| e.to_string())?;
    let tmp = out.with_extension("tmp");
    fs::write(&tmp, &mem[..header.image as usize])
        .and_then(|()| fs::rename(&tmp, out))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(header)
}

/// Reads an image, checks it completely (header, CRC, sizes) by restoring it into a cache of
/// its own configuration, and describes it. `fingerprint`: the one it must carry, if given.
pub fn inspect(image: &Path, fingerprint: Option<u64>) -> Result<String, String> {
    let bytes = fs::read(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let head: &[u8; HEADER_BYTES] = bytes
        .get(..HEADER_BYTES)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| format!("{}: shorter than a header", image.display()))?;
    let header = Header::decode(head).map_err(|e| format!("{}: {e}", image.display()))?;
    let config = CacheConfig::new(header.shape)
        .with_page_tokens(header.page_tokens)
        .with_formats(header.k_format, header.v_format)
        .with_sequences(1, header.tokens.max(1));
    let bits = <FreeList as PageAllocator>::META_BITS_PER_PAGE;
    let plan = config
        .plan_pages(header.pages.max(1) as usize, bits)
        .map_err(|e| e.to_string())?;
    let mut data = HeapArena::new(plan.data_bytes, config.align).map_err(|e| e.to_string())?;
    let mut meta = HeapArena::new(plan.meta.total, META_ALIGN).map_err(|e| e.to_string())?;
    let mut cache: KvCache = KvCache::new(config, data.as_uninit_mut(), meta.as_uninit_mut())
        .map_err(|e| e.to_string())?;
    let mut tokens = vec![0u32; header.tokens as usize];
    let want = fingerprint.unwrap_or(header.fingerprint);
    cache
        .restore(&mut SliceFlash(&bytes), 0, want, &mut tokens)
        .map_err(|e| format!("{}: {e}", image.display()))?;
    let shown: Vec<String> = tokens.iter().take(8).map(u32::to_string).collect();
    Ok(format!(
        "{}: edgekv snapshot v1, {} B ({} B of file), CRC ok\n\
         fingerprint {:016x}\n\
         shape {} layers x {} kv heads x {}, {} tokens/page, K {:?}, V {:?}\n\
         {} tokens in {} pages (payload {} B): {}{}",
        image.display(),
        header.image,
        bytes.len(),
        header.fingerprint,
        header.shape.layers,
        header.shape.kv_heads,
        header.shape.head_dim,
        header.page_tokens,
        header.k_format,
        header.v_format,
        header.tokens,
        header.pages,
        header.payload,
        shown.join(" "),
        if tokens.len() > 8 { " …" } else { "" },
    ))
}
