//! `gemma3` metadata: Gemma 3 270M's keys read as llama.cpp reads them, every unsupported or
//! missing key a precise error.

use super::*;
use edgekv::ElementFormat;

/// A GGUF v3 file of metadata only (no tensors), written here byte by byte.
#[derive(Default)]
struct Meta {
    kvs: Vec<(String, u32, Vec<u8>)>,
}

impl Meta {
    fn u32(mut self, k: &str, v: u32) -> Self {
        self.kvs.push((k.into(), 4, v.to_le_bytes().to_vec()));
        self
    }

    fn f32(mut self, k: &str, v: f32) -> Self {
        self.kvs.push((k.into(), 6, v.to_le_bytes().to_vec()));
        self
    }

    fn str(mut self, k: &str, v: &str) -> Self {
        let mut b = (v.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(v.as_bytes());
        self.kvs.push((k.into(), 8, b));
        self
    }

    fn u32s(mut self, k: &str, v: &[u32]) -> Self {
        let mut b = 4u32.to_le_bytes().to_vec();
        b.extend_from_slice(&(v.len() as u64).to_le_bytes());
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
        self.kvs.push((k.into(), 9, b));
        self
    }

    fn without(mut self, k: &str) -> Self {
        self.kvs.retain(|(key, _, _)| key != k);
        self
    }

    fn with_u32(self, k: &str, v: u32) -> Self {
        self.without(k).u32(k, v)
    }

    fn build(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, ty, v) in &self.kvs {
            b.extend_from_slice(&(k.len() as u64).to_le_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(v);
        }
        b.resize(b.len().next_multiple_of(32), 0);
        b
    }
}

/// Gemma 3 270M's metadata (its tokenizer left out).
fn gemma_270m() -> Meta {
    Meta::default()
        .str("general.architecture", "gemma3")
        .u32("gemma3.block_count", 18)
        .u32("gemma3.embedding_length", 640)
        .u32("gemma3.feed_forward_length", 2048)
        .u32("gemma3.attention.head_count", 4)
        .u32("gemma3.attention.head_count_kv", 1)
        .u32("gemma3.attention.key_length", 256)
        .u32("gemma3.attention.value_length", 256)
        .f32("gemma3.rope.freq_base", 1e6)
        .u32("gemma3.attention.sliding_window", 512)
        .f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
        .u32("gemma3.context_length", 32768)
        .u32("tokenizer.ggml.bos_token_id", 2)
        .u32("tokenizer.ggml.eos_token_id", 1)
}

fn read(m: &Meta) -> Result<LlamaConfig> {
    let file = m.build();
    LlamaConfig::from_gguf(&Gguf::parse(&file)?)
}

#[test]
fn gemma_270m_is_read_as_llama_cpp_reads_it() {
    let c = read(&gemma_270m()).unwrap();
    assert_eq!(
        (c.layers, c.embed, c.ffn, c.heads, c.kv_heads, c.head_dim),
        (18, 640, 2048, 4, 1, 256)
    );
    assert_eq!((c.rope_base, c.rms_eps, c.context), (1e6, 1e-6, 32768));
    assert_eq!((c.q_dim(), c.kv_dim()), (1024, 256));
    let Arch::Gemma3(g) = c.arch else {
        panic!("{:?}", c.arch)
    };
    assert_eq!(g.sliding_window, 512);
    let global: Vec<usize> = (0..18).filter(|&l| g.is_global(l)).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!((g.rope_base(5, 1e6), g.rope_base(4, 1e6)), (1e6, 1e4));
    // The sliding layers' own base, when the file names one; a pattern key of 6 is the default.
    let m = gemma_270m()
        .f32("gemma3.rope.freq_base_swa", 5e4)
        .u32("gemma3.attention.sliding_window_pattern", 6)
        .f32("gemma3.final_logit_softcapping", 0.0);
    let Arch::Gemma3(g) = read(&m).unwrap().arch else {
        panic!()
    };
    assert_eq!((g.local_rope_base, g.period), (5e4, 6));
    // Without the base key llama.cpp takes 10,000 for both kinds.
    let c = read(&gemma_270m().without("gemma3.rope.freq_base")).unwrap();
    assert_eq!(c.rope_base, 1e4);
    // The cache layout: sliding layers in the base group with the window, global in group 1.
    let cfg = c
        .cache_config(ElementFormat::F16, ElementFormat::Q8_0)
        .unwrap();
    assert_eq!(cfg.layer_group(0), Some((0, 0)));
    assert_eq!(cfg.layer_group(11), Some((1, 1)));
    assert_eq!(cfg.window.map(|w| w.window), Some(512));
}

#[test]
fn unsupported_and_missing_metadata_are_precise_errors() {
    let unsupported = |m: Meta, why: &'static str| {
        assert_eq!(read(&m), Err(Error::Unsupported(why)), "{why}");
    };
    unsupported(
        gemma_270m().u32("gemma3.attention.sliding_window_pattern", 4),
        "a sliding-window pattern other than 6",
    );
    unsupported(
        gemma_270m().u32s("gemma3.attention.sliding_window_pattern", &[1, 1, 0]),
        "a per-layer sliding-window pattern",
    );
    unsupported(
        gemma_270m().f32("gemma3.final_logit_softcapping", 30.0),
        "logit softcapping",
    );
    unsupported(
        gemma_270m().f32("gemma3.attn_logit_softcapping", 50.0),
        "logit softcapping",
    );
    unsupported(
        gemma_270m().f32("gemma3.rope.scaling.factor", 8.0),
        "scaled RoPE",
    );
    unsupported(
        gemma_270m().u32("gemma3.rope.dimension_count", 128),
        "RoPE over part of the head",
    );
    unsupported(
        gemma_270m().with_u32("gemma3.attention.sliding_window", 0),
        "a sliding window of 0",
    );
    unsupported(
        gemma_270m().with_u32("gemma3.attention.value_length", 128),
        "key and value lengths differ",
    );
    unsupported(
        gemma_270m()
            .with_u32("gemma3.attention.head_count", 3)
            .with_u32("gemma3.attention.head_count_kv", 2),
        "heads and KV heads are not GQA",
    );
    for key in [
        "gemma3.attention.sliding_window",
        "gemma3.attention.key_length",
        "gemma3.attention.layer_norm_rms_epsilon",
        "gemma3.block_count",
        "tokenizer.ggml.bos_token_id",
    ] {
        assert_eq!(
            read(&gemma_270m().without(key)),
            Err(Error::MissingMetadata(key))
        );
    }
    assert_eq!(
        read(&gemma_270m().str("gemma3.attention.sliding_window_pattern", "6")),
        Err(Error::BadMetadata(
            "gemma3.attention.sliding_window_pattern"
        ))
    );
    assert_eq!(
        read(&gemma_270m().str("gemma3.final_logit_softcapping", "30")),
        Err(Error::BadMetadata("gemma3.final_logit_softcapping"))
    );
    assert_eq!(
        read(
            &gemma_270m()
                .without("general.architecture")
                .str("general.architecture", "gemma2")
        ),
        Err(Error::WrongArchitecture)
    );
}
