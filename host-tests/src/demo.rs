//! The demo session behind `cargo demo`: a multi-turn chat's KV cache for the SmolLM2-135M shape,
//! with a branch (fork) that shares pages, a regenerated reply (truncate), and a contiguous
//! sequence growing for a device that needs one linear tensor. K/V rows are synthetic and every
//! row is read back and checked at the end.

use std::error::Error;
use std::io::Write;

use edgekv::{
    Bitmap, CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator, SeqId,
    SeqMode, Shape,
};

const SHAPE: Shape = Shape::SMOLLM2_135M;
const ROW: usize = SHAPE.kv_heads as usize * SHAPE.head_dim as usize;

/// A deterministic synthetic K or V row for (stream, position, layer, K=0/V=1).
fn synth_row(stream: u32, pos: u32, layer: u16, kv: u32) -> [f32; ROW] {
    let seed =
        stream.wrapping_mul(0x9E37_79B9) ^ pos.wrapping_mul(0x85EB_CA6B) ^ (layer as u32) << 8 ^ kv;
    core::array::from_fn(|i| {
        let x = seed.wrapping_add(i as u32).wrapping_mul(0x27D4_EB2F);
        ((x >> 8) % 2001) as f32 / 1000.0 - 1.0
    })
}

/// Reserves `n` positions and writes their rows for every layer, one token at a time (decode).
fn append<'a, A: PageAllocator<'a>>(
    c: &mut KvCache<'a, A>,
    seq: SeqId,
    stream: u32,
    n: u32,
) -> edgekv::Result<()> {
    for _ in 0..n {
        let pos = c.reserve(seq, 1)?;
        for layer in 0..SHAPE.layers {
            c.write_kv(
                seq,
                layer,
                pos,
                &synth_row(stream, pos, layer, 0),
                &synth_row(stream, pos, layer, 1),
            )?;
        }
    }
    Ok(())
}

/// Checks every row of `seq` against the streams that wrote it: `(stream, until)` segments.
fn verify<'a, A: PageAllocator<'a>>(
    c: &KvCache<'a, A>,
    seq: SeqId,
    segments: &[(u32, u32)],
    format: ElementFormat,
) -> Result<(), Box<dyn Error>> {
    let mut out = [0f32; ROW];
    let mut pos = 0;
    for &(stream, until) in segments {
        while pos < until {
            for layer in 0..SHAPE.layers {
                for (kv, k) in [(edgekv::Kv::K, 0), (edgekv::Kv::V, 1)] {
                    c.read(seq, layer, kv, pos, &mut out)?;
                    // The page format's rounding of what was written, bit for bit.
                    let want = synth_row(stream, pos, layer, k).map(|x| match format {
                        ElementFormat::F16 => half::f16::from_f32(x).to_f32(),
                        ElementFormat::Bf16 => half::bf16::from_f32(x).to_f32(),
                        _ => x,
                    });
                    if out
                        .iter()
                        .zip(&want)
                        .any(|(a, b)| a.to_bits() != b.to_bits())
                    {
                        return Err(format!("row mismatch at position {pos}, layer {layer}").into());
                    }
                }
            }
            pos += 1;
        }
    }
    Ok(())
}

fn report<'a, A: PageAllocator<'a>>(
    w: &mut impl Write,
    label: &str,
    c: &KvCache<'a, A>,
) -> std::io::Result<()> {
    let s = c.stats();
    writeln!(
        w,
        "  {label:<34} tokens {:>5}  pages used {:>3} free {:>3} cached {:>2}  {:>6.1} MiB in use",
        s.tokens,
        s.pages_used,
        s.pages_free,
        s.pages_cached,
        s.bytes_used as f64 / (1 << 20) as f64
    )
}

fn check<'a, A: PageAllocator<'a>>(c: &KvCache<'a, A>) -> Result<(), Box<dyn Error>> {
    let mut scratch = vec![0u16; c.arena_plan().num_pages as usize];
    c.check_invariants(&mut scratch)
        .map_err(|e| format!("invariant broken: {e}"))?;
    Ok(())
}

/// Runs the demo, writing its report to `w`.
pub fn run(w: &mut impl Write) -> Result<(), Box<dyn Error>> {
    let cfg = CacheConfig::new(SHAPE)
        .with_formats(ElementFormat::F16, ElementFormat::F16)
        .with_sequences(4, 2048);
    let data_bytes = 48 << 20;
    let plan = KvCache::<FreeList>::plan(&cfg, data_bytes)?;
    writeln!(
        w,
        "edgekv demo — SmolLM2-135M shape (30 layers, 3 KV heads, head_dim 64), f16 pages of 16 tokens"
    )?;
    writeln!(
        w,
        "  plan for a {} MiB data arena: {} pages = {} tokens, {} bytes per token, {} B metadata",
        data_bytes >> 20,
        plan.num_pages,
        plan.token_capacity(),
        plan.geometry.page_bytes / cfg.page_tokens as usize,
        plan.meta.total
    )?;
    let sizes = cfg.bytes_for(2048, 2, FreeList::META_BITS_PER_PAGE)?;
    writeln!(
        w,
        "  two 2048-token conversations need {} pages: {:.1} MiB data + {} B metadata",
        sizes.pages,
        sizes.data as f64 / (1 << 20) as f64,
        sizes.meta
    )?;

    let mut data = HeapArena::new(data_bytes, cfg.align)?;
    let mut meta = HeapArena::new(plan.meta.total, 64)?;
    let mut c: KvCache<'_> = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;

    writeln!(w, "\nchat (paged, free-list allocator)")?;
    let chat = c.create_sequence(SeqMode::Paged)?;
    let mut segments = Vec::new(); // (stream, until) of the chat
    let turns = [(1u32, 57u32, 40u32), (2, 33, 75), (3, 120, 22)];
    for (turn, prompt, reply) in turns {
        append(&mut c, chat, turn * 10, prompt)?;
        segments.push((turn * 10, c.seq_len(chat)?));
        append(&mut c, chat, turn * 10 + 1, reply)?;
        segments.push((turn * 10 + 1, c.seq_len(chat)?));
        report(
            w,
            &format!("turn {turn}: +{prompt} prompt +{reply} reply"),
            &c,
        )?;
    }

    // Two candidate replies to the next prompt: the fork shares every full page.
    append(&mut c, chat, 40, 18)?;
    segments.push((40, c.seq_len(chat)?));
    let alt = c.fork(chat)?;
    let shared = c
        .page_table(chat)?
        .iter()
        .zip(c.page_table(alt)?)
        .filter(|(a, b)| a == b)
        .count();
    report(
        w,
        &format!("fork for a 2nd candidate ({shared} shared)"),
        &c,
    )?;
    append(&mut c, chat, 41, 30)?;
    append(&mut c, alt, 42, 30)?;
    report(w, "both candidates decoded 30 tokens", &c)?;
    c.free_sequence(chat)?;
    let chat = alt;
    segments.push((42, c.seq_len(chat)?));
    report(w, "kept the 2nd candidate", &c)?;

    // Regenerate the last reply: truncate to the prompt and decode again.
    let prompt_end = segments[segments.len() - 2].1;
    c.truncate(chat, prompt_end)?;
    report(w, "truncated the reply", &c)?;
    append(&mut c, chat, 43, 25)?;
    let last = segments.len() - 1;
    segments[last] = (43, c.seq_len(chat)?);
    report(w, "regenerated 25 tokens", &c)?;
    verify(&c, chat, &segments, cfg.k_format)?;
    check(&c)?;
    writeln!(
        w,
        "  all {} positions × 30 layers × K/V read back bit-exact (f16 rounding of what was written)",
        c.seq_len(chat)?
    )?;

    // A device that needs one linear tensor per layer: a contiguous sequence grows geometrically.
    writeln!(w, "\ncontiguous sequence for an NPU (bitmap allocator)")?;
    let mut data2 = HeapArena::new(data_bytes, cfg.align)?;
    let plan2 = KvCache::<Bitmap>::plan(&cfg, data_bytes)?;
    let mut meta2 = HeapArena::new(plan2.meta.total, 64)?;
    let mut d: KvCache<'_, Bitmap<'_>> =
        KvCache::new(cfg, data2.as_uninit_mut(), meta2.as_uninit_mut())?;
    let npu = d.create_sequence(SeqMode::Contiguous)?;
    let mut growths = 0;
    let mut cap = 0;
    for _ in 0..1000 {
        append(&mut d, npu, 7, 1)?;
        let info = d.sequence(npu)?;
        if info.capacity != cap {
            growths += 1;
            cap = info.capacity;
            let first = d.page_table(npu)?[0];
            writeln!(
                w,
                "  at token {:>4}: capacity {:>4} tokens, one run from page {first}",
                info.len, cap
            )?;
        }
    }
    verify(&d, npu, &[(7, 1000)], cfg.k_format)?;
    check(&d)?;
    writeln!(w, "  1000 tokens, {growths} growth events, data intact")?;
    writeln!(w, "\ndemo ok")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn demo_runs_and_checks_itself() {
        let mut out = Vec::new();
        super::run(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("demo ok\n"), "{text}");
        assert!(text.contains("7 growth events"), "{text}");
    }
}
