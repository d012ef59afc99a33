//! A small llama whose weights use every quantized type (the K-quants where rows are 256-value
//! multiples): it loads, runs, and chunked prefill equals one pass bit for bit; a K-quant
//! weight whose rows are not whole super-blocks is refused at parse.

use super::tests::Builder;
use super::*;
use crate::{Activations, Llama, Logits, ScratchPlan};
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator};

/// `rows` rows of `cols` values of `ty`: pseudo-random code bytes, small positive f16 scales
/// (and minimums), Q6_K's i8 scales in ±40.
fn blocks(ty: TensorType, rows: usize, cols: usize, seed: u32) -> Vec<u8> {
    let n = rows * cols / ty.block_values();
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    let mut byte = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 7) as u8
    };
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut out = Vec::new();
    for i in 0..n {
        let mut b: Vec<u8> = (0..ty.block_bytes()).map(|_| byte()).collect();
        let scale = 0.002 + 0.001 * (i % 5) as f32;
        match ty {
            TensorType::Q6_K => {
                b[208..210].copy_from_slice(&f16(scale / 8.0));
                for s in &mut b[192..208] {
                    *s = ((*s % 81) as i8 - 40) as u8;
                }
            }
            TensorType::Q4_K | TensorType::Q5_K => {
                b[0..2].copy_from_slice(&f16(scale / 4.0));
                b[2..4].copy_from_slice(&f16(scale / 2.0));
            }
            TensorType::Q4_1 | TensorType::Q5_1 => {
                b[0..2].copy_from_slice(&f16(scale));
                b[2..4].copy_from_slice(&f16(-8.0 * scale));
            }
            _ => b[0..2].copy_from_slice(&f16(scale)),
        }
        out.extend_from_slice(&b);
    }
    out
}

fn mixed_llama(down: TensorType) -> Builder {
    let (e, f, vocab) = (256usize, 512usize, 8usize);
    let mut b = Builder::new();
    b.str("general.architecture", "llama")
        .u32("llama.block_count", 1)
        .u32("llama.embedding_length", e as u32)
        .u32("llama.feed_forward_length", f as u32)
        .u32("llama.attention.head_count", 2)
        .u32("llama.attention.head_count_kv", 1)
        .u32("llama.rope.dimension_count", 128)
        .f32("llama.rope.freq_base", 10_000.0)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .u32("llama.context_length", 64)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .strings(
            "tokenizer.ggml.tokens",
            &["a", "b", "c", "d", "e", "f", "g", "h"],
        );
    let ones: Vec<u8> = (0..e).flat_map(|_| 1f32.to_le_bytes()).collect();
    b.tensor(
        "token_embd.weight",
        &[e as u64, vocab as u64],
        8,
        blocks(TensorType::Q8_0, vocab, e, 1),
    );
    b.tensor("output_norm.weight", &[e as u64], 0, ones.clone());
    b.tensor("blk.0.attn_norm.weight", &[e as u64], 0, ones.clone());
    b.tensor("blk.0.ffn_norm.weight", &[e as u64], 0, ones);
    for (i, (name, ty, cols, rows)) in [
        ("attn_q", TensorType::Q4_0, e, e),
        ("attn_k", TensorType::Q5_0, e, 128),
        ("attn_v", TensorType::Q5_1, e, 128),
        ("attn_output", TensorType::Q4_K, e, e),
        ("ffn_gate", TensorType::Q5_K, e, f),
        ("ffn_up", TensorType::Q4_1, e, f),
        ("ffn_down", down, f, e),
    ]
    .into_iter()
    .enumerate()
    {
        b.tensor(
            &format!("blk.0.{name}.weight"),
            &[cols as u64, rows as u64],
            ty.id(),
            blocks(ty, rows, cols, i as u32 + 2),
        );
    }
    b
}

fn run(model: &Llama<'_>, chunks: &[&[u32]]) -> Vec<f32> {
    let config = CacheConfig::new(model.config().shape().unwrap())
        .with_formats(ElementFormat::F32, ElementFormat::F32)
        .with_page_tokens(16)
        .with_sequences(1, 64);
    let plan = config
        .plan_pages(4, <FreeList as PageAllocator>::META_BITS_PER_PAGE)
        .unwrap();
    let mut data = HeapArena::new(plan.data_bytes, config.align).unwrap();
    let mut meta = HeapArena::new(plan.meta.total, edgekv::META_ALIGN).unwrap();
    let mut cache: KvCache<'_, FreeList<'_>> =
        KvCache::new(config, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
    let mut scratch = vec![0f32; ScratchPlan::new(model.config(), 8, 16).unwrap().scratch];
    let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let mut all = Vec::new();
    for chunk in chunks {
        let mut out = vec![0f32; 8 * chunk.len()];
        model
            .forward(&mut cache, seq, chunk, &mut scratch, Logits::All, &mut out)
            .unwrap();
        all.extend(out);
    }
    all
}

#[test]
fn every_weight_type_runs_and_chunks_bit_exactly() {
    for down in [TensorType::Q6_K, TensorType::Q4_K, TensorType::Q8_0] {
        let file = mixed_llama(down).build();
        let g = Gguf::parse(&file).unwrap();
        let model = Llama::new(&g).unwrap();
        let tokens = [3u32, 1, 4, 1, 5, 7, 2, 6];
        let whole = run(&model, &[&tokens]);
        assert!(whole.iter().all(|v| v.is_finite()), "{down:?}");
        assert!(
            whole.iter().any(|&v| v != whole[0]),
            "{down:?}: constant logits"
        );
        let pieces = run(&model, &[&tokens[..3], &tokens[3..4], &tokens[4..]]);
        assert_eq!(
            whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            pieces.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{down:?}"
        );
        // The f32-activation reference path agrees to within activation rounding.
        let f32_path = run(
            &model.clone().with_activations(Activations::F32),
            &[&tokens],
        );
        let scale = whole.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (q, r) in whole.iter().zip(&f32_path) {
            assert!((q - r).abs() <= 0.05 * scale, "{down:?}: {q} vs {r}");
        }
    }
}

#[test]
fn k_quant_rows_must_be_whole_super_blocks() {
    // FFN width 640 (a multiple of 32, not of 256): a Q6_K ffn_down with 640-value rows.
    let mut b = Builder::new();
    b.tensor(
        "blk.0.ffn_down.weight",
        &[640, 256],
        TensorType::Q6_K.id(),
        vec![0; 256 * 640 / 256 * 210],
    );
    assert_eq!(
        Gguf::parse(&b.build()).unwrap_err(),
        GgufError::PartialBlock {
            type_id: 14,
            row_len: 640
        }
    );
}

/// A small GGUF with two rows of one block (super-block) of every quantized type: written as a
/// fuzz seed for `fuzz_targets/gguf_parse.rs` when `EDGEKV_WRITE_FUZZ_SEED_TYPES` names a file.
#[test]
fn write_fuzz_seed_types() {
    let mut b = Builder::new();
    for (i, ty) in [
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q5_0,
        TensorType::Q5_1,
        TensorType::Q8_0,
        TensorType::Q4_K,
        TensorType::Q5_K,
        TensorType::Q6_K,
    ]
    .into_iter()
    .enumerate()
    {
        let cols = ty.block_values();
        b.tensor(
            &format!("t{i}"),
            &[cols as u64, 2],
            ty.id(),
            blocks(ty, 2, cols, i as u32 + 11),
        );
    }
    let file = b.build();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.tensor_count(), 8);
    if let Some(path) = std::env::var_os("EDGEKV_WRITE_FUZZ_SEED_TYPES") {
        std::fs::write(path, file).unwrap();
    }
}
