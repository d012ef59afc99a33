//! GGUF reader tests: a writer for small files, every error variant, and a tiny llama.

use super::*;
use crate::{Error, Llama, TensorRole};

/// Writes GGUF v3 files for tests.
pub(crate) struct Builder {
    pub(crate) version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    pub(crate) alignment: usize,
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            version: 3,
            kv: Vec::new(),
            n_kv: 0,
            tensors: Vec::new(),
            alignment: 32,
        }
    }

    pub(crate) fn raw(&mut self, key: &str, ty: u32, value: &[u8]) -> &mut Self {
        string(&mut self.kv, key.as_bytes());
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    pub(crate) fn u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.raw(key, 4, &v.to_le_bytes())
    }

    pub(crate) fn f32(&mut self, key: &str, v: f32) -> &mut Self {
        self.raw(key, 6, &v.to_le_bytes())
    }

    pub(crate) fn str(&mut self, key: &str, v: &str) -> &mut Self {
        let mut b = Vec::new();
        string(&mut b, v.as_bytes());
        self.raw(key, 8, &b)
    }

    pub(crate) fn strings(&mut self, key: &str, items: &[&str]) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&(items.len() as u64).to_le_bytes());
        for s in items {
            string(&mut b, s.as_bytes());
        }
        self.raw(key, 9, &b)
    }

    pub(crate) fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.into(), dims.into(), ty, data));
        self
    }

    /// The file; `offset_fix` may rewrite each tensor's offset.
    pub(crate) fn build_with(&self, offset_fix: impl Fn(usize, u64) -> u64) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        let mut offset = 0u64;
        for (i, (name, dims, ty, data)) in self.tensors.iter().enumerate() {
            string(&mut out, name.as_bytes());
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&offset_fix(i, offset).to_le_bytes());
            offset += (data.len() as u64).next_multiple_of(self.alignment as u64);
        }
        out.resize(out.len().next_multiple_of(self.alignment), 0);
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(self.alignment), 0);
        }
        out
    }

    pub(crate) fn build(&self) -> Vec<u8> {
        self.build_with(|_, o| o)
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Q8_0 rows with scale 1/64 and codes from `f`.
fn q8_0(rows: usize, cols: usize, f: impl Fn(usize, usize) -> i8) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..rows {
        for b in 0..cols / 32 {
            out.extend_from_slice(&half::f16::from_f32(1.0 / 64.0).to_le_bytes());
            out.extend((0..32).map(|j| f(r, b * 32 + j) as u8));
        }
    }
    out
}

/// Q4_1 rows with d = 1/32, m = -1/4 and nibbles from `f`.
fn q4_1(rows: usize, cols: usize, f: impl Fn(usize, usize) -> u8) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..rows {
        for b in 0..cols / 32 {
            out.extend_from_slice(&half::f16::from_f32(1.0 / 32.0).to_le_bytes());
            out.extend_from_slice(&half::f16::from_f32(-0.25).to_le_bytes());
            out.extend((0..16).map(|j| f(r, b * 32 + j) & 15 | (f(r, b * 32 + j + 16) & 15) << 4));
        }
    }
    out
}

/// A one-block llama: embedding 64, FFN 64, 2 heads of 32, 1 KV head, vocabulary 8.
pub(crate) fn tiny_llama() -> Builder {
    let (e, f, kv, vocab) = (64usize, 64usize, 32usize, 8usize);
    let mut b = Builder::new();
    b.str("general.architecture", "llama")
        .u32("llama.block_count", 1)
        .u32("llama.embedding_length", e as u32)
        .u32("llama.feed_forward_length", f as u32)
        .u32("llama.attention.head_count", 2)
        .u32("llama.attention.head_count_kv", 1)
        .u32("llama.rope.dimension_count", 32)
        .f32("llama.rope.freq_base", 10_000.0)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .u32("llama.context_length", 64)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .strings(
            "tokenizer.ggml.tokens",
            &["a", "b", "c", "d", "e", "f", "g", "h"],
        );
    let wave = |r: usize, c: usize| ((r * 7 + c * 3) % 15) as u8;
    b.tensor(
        "token_embd.weight",
        &[e as u64, vocab as u64],
        8,
        q8_0(vocab, e, |r, c| ((r * 31 + c * 17) % 101) as i8 - 50),
    );
    b.tensor("output_norm.weight", &[e as u64], 0, f32_bytes(&[1.0; 64]));
    b.tensor(
        "blk.0.attn_norm.weight",
        &[e as u64],
        0,
        f32_bytes(&[1.0; 64]),
    );
    b.tensor(
        "blk.0.ffn_norm.weight",
        &[e as u64],
        0,
        f32_bytes(&[0.5; 64]),
    );
    for (name, cols, rows) in [
        ("attn_q", e, e),
        ("attn_k", e, kv),
        ("attn_v", e, kv),
        ("attn_output", e, e),
        ("ffn_gate", e, f),
        ("ffn_up", e, f),
        ("ffn_down", f, e),
    ] {
        b.tensor(
            &format!("blk.0.{name}.weight"),
            &[cols as u64, rows as u64],
            3,
            q4_1(rows, cols, wave),
        );
    }
    b
}

#[test]
fn minimal_file_parses_and_reads_values() {
    let mut b = Builder::new();
    b.u32("a", 7)
        .raw("b", 10, &u64::MAX.to_le_bytes())
        .raw("c", 12, &1.5f64.to_le_bytes())
        .raw("d", 7, &[1])
        .raw("e", 1, &[0xff])
        .raw("f", 3, &(-3i16).to_le_bytes())
        .strings("g", &["x", "yz"])
        .tensor("t", &[32, 2], 0, vec![0; 256]);
    let file = b.build();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.metadata_count(), 7);
    assert_eq!(g.tensor_count(), 1);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.get("a"), Some(Value::U32(7)));
    assert_eq!(g.get("b").unwrap().as_u64(), Some(u64::MAX));
    assert_eq!(g.get("c").unwrap().as_f32(), Some(1.5));
    assert_eq!(g.get("d"), Some(Value::Bool(true)));
    assert_eq!(g.get("e"), Some(Value::I8(-1)));
    assert_eq!(g.get("e").unwrap().as_u64(), None);
    assert_eq!(g.get("f"), Some(Value::I16(-3)));
    let arr = g.get("g").unwrap().as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr.element_type(), ValueType::String);
    assert_eq!(arr.get(1), Some(Value::String(b"yz")));
    assert_eq!(arr.iter().count(), 2);
    assert_eq!(g.get("missing"), None);
    let t = g.tensor("t").unwrap();
    assert_eq!((t.row_len(), t.rows(), t.data.len()), (32, 2, 256));
    assert_eq!(
        t.data.as_ptr() as usize - file.as_ptr() as usize,
        g.data_offset()
    );
}

#[test]
fn alignment_from_metadata() {
    let mut b = Builder::new();
    b.alignment = 64;
    b.u32("general.alignment", 64)
        .tensor("a", &[1], 0, vec![1; 4])
        .tensor("b", &[1], 0, vec![2; 4]);
    let file = b.build();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    assert_eq!(g.tensor("b").unwrap().data, &[2; 4]);
}

#[test]
fn every_header_error() {
    let file = tiny_llama().build();
    // Truncation anywhere before the end of the tensor table is Truncated; past it (inside the
    // data) the tensors fall out of bounds. Never a panic.
    let g = Gguf::parse(&file).unwrap();
    for cut in 0..file.len() {
        let e = Gguf::parse(&file[..cut]).unwrap_err();
        if cut < g.data_offset() - 32 {
            assert!(matches!(e, GgufError::Truncated { .. }), "{cut}: {e:?}");
        } else {
            assert!(
                matches!(
                    e,
                    GgufError::Truncated { .. } | GgufError::TensorOutOfBounds
                ),
                "{cut}: {e:?}"
            );
        }
    }
    let mut bad = file.clone();
    bad[0] = b'X';
    assert_eq!(Gguf::parse(&bad).unwrap_err(), GgufError::BadMagic);
    let mut b = tiny_llama();
    b.version = 2;
    assert_eq!(
        Gguf::parse(&b.build()).unwrap_err(),
        GgufError::UnsupportedVersion(2)
    );
}

/// An array header: element type and count.
fn array_head(ty: u32, len: u64) -> Vec<u8> {
    let mut v = ty.to_le_bytes().to_vec();
    v.extend_from_slice(&len.to_le_bytes());
    v
}

/// A string value's bytes.
fn gguf_string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

#[test]
fn nested_arrays_to_the_limit_parse_and_read_back() {
    // [["ab", "c"], ["xyz"]]: arrays of strings inside an array, walked without recursion.
    let mut v = array_head(9, 2);
    v.extend(array_head(8, 2));
    v.extend(gguf_string("ab"));
    v.extend(gguf_string("c"));
    v.extend(array_head(8, 1));
    v.extend(gguf_string("xyz"));
    let mut b = Builder::new();
    b.raw("k", 9, &v);
    b.raw("after", 4, &7u32.to_le_bytes());
    let bytes = b.build();
    let g = Gguf::parse(&bytes).expect("nested arrays");
    let Some(Value::Array(outer)) = g.get("k") else {
        panic!("an array")
    };
    let inner: Vec<Vec<Value<'_>>> = outer
        .iter()
        .map(|e| match e {
            Value::Array(a) => a.iter().collect(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        inner,
        [
            vec![Value::String(b"ab"), Value::String(b"c")],
            vec![Value::String(b"xyz")]
        ]
    );
    assert_eq!(g.get("after"), Some(Value::U32(7)));
    // Nested exactly MAX_NESTING deep, strings innermost: accepted.
    let mut v = Vec::new();
    for _ in 0..MAX_NESTING - 1 {
        v.extend(array_head(9, 1));
    }
    v.extend(array_head(8, 1));
    v.extend(gguf_string("deep"));
    let mut b = Builder::new();
    b.raw("k", 9, &v);
    assert!(Gguf::parse(&b.build()).is_ok());
    // The same, cut inside the innermost string: truncated, not a panic.
    let mut b = Builder::new();
    b.raw("k", 9, &v[..v.len() - 2]);
    assert!(Gguf::parse(&b.build()).is_err());
}

#[test]
fn every_value_error() {
    let parse = |b: &Builder| Gguf::parse(&b.build()).map(|_| ());
    let mut b = Builder::new();
    b.raw("k", 13, &[]);
    assert_eq!(parse(&b), Err(GgufError::BadValueType(13)));
    let mut b = Builder::new();
    b.raw("k", 9, &[99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse(&b), Err(GgufError::BadValueType(99)));
    // Arrays of arrays, nested five deep.
    let mut v = Vec::new();
    for _ in 0..5 {
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    v.extend_from_slice(&4u32.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    let mut b = Builder::new();
    b.raw("k", 9, &v);
    assert_eq!(parse(&b), Err(GgufError::NestingTooDeep));
    // A huge fixed-size array count.
    let mut v = 4u32.to_le_bytes().to_vec();
    v.extend_from_slice(&u64::MAX.to_le_bytes());
    let mut b = Builder::new();
    b.raw("k", 9, &v);
    assert!(matches!(parse(&b), Err(GgufError::Truncated { .. })));
    // A string longer than the file.
    let mut b = Builder::new();
    b.raw("k", 8, &(1u64 << 40).to_le_bytes());
    assert!(matches!(parse(&b), Err(GgufError::Truncated { .. })));
    // Keys must be UTF-8.
    let mut b = Builder::new();
    b.u32("\u{1}", 0);
    let mut file = b.build();
    file[32] = 0xff;
    assert_eq!(Gguf::parse(&file).unwrap_err(), GgufError::BadUtf8);
    // Alignment: not a power of two, or not a u32.
    let mut b = Builder::new();
    b.u32("general.alignment", 24);
    assert_eq!(parse(&b), Err(GgufError::BadAlignment(24)));
    let mut b = Builder::new();
    b.u32("general.alignment", 0);
    assert_eq!(parse(&b), Err(GgufError::BadAlignment(0)));
    let mut b = Builder::new();
    b.str("general.alignment", "32");
    assert_eq!(parse(&b), Err(GgufError::BadAlignment(0)));
}

#[test]
fn every_tensor_error() {
    let parse = |b: &Builder| Gguf::parse(&b.build()).map(|_| ());
    let mut b = Builder::new();
    b.tensor("t", &[], 0, vec![]);
    assert_eq!(parse(&b), Err(GgufError::BadDimensions(0)));
    let mut b = Builder::new();
    b.tensor("t", &[1, 1, 1, 1, 1], 0, vec![0; 4]);
    assert_eq!(parse(&b), Err(GgufError::BadDimensions(5)));
    let mut b = Builder::new();
    b.tensor("t", &[32, 0], 0, vec![]);
    assert_eq!(parse(&b), Err(GgufError::BadShape));
    let mut b = Builder::new();
    b.tensor("t", &[48], 3, vec![0; 40]);
    let partial = |type_id, row_len| Err(GgufError::PartialBlock { type_id, row_len });
    assert_eq!(parse(&b), partial(3, 48));
    // K-quant rows are whole 256-value super-blocks: 640 values are not (Gemma 3's width).
    for (id, bytes) in [(12, 144), (13, 176), (14, 210)] {
        let mut b = Builder::new();
        b.tensor("t", &[640, 2], id, vec![0; 6 * bytes]);
        assert_eq!(parse(&b), partial(id, 640));
        let mut b = Builder::new();
        b.tensor("t", &[128], id, vec![0; bytes]);
        assert_eq!(parse(&b), partial(id, 128));
    }
    for (id, bytes) in [(2, 18), (6, 22), (7, 24)] {
        let mut b = Builder::new();
        b.tensor("t", &[16], id, vec![0; bytes]);
        assert_eq!(parse(&b), partial(id, 16));
    }
    // Ids ggml has but this reader does not (Q8_1, Q2_K, Q3_K, Q8_K, IQ2_XXS) or ggml lacks.
    for id in [1, 4, 5, 9, 10, 11, 15, 16, 39, 1000] {
        let mut b = Builder::new();
        b.tensor("t", &[256], id, vec![0; 512]);
        assert_eq!(parse(&b), Err(GgufError::UnsupportedTensorType(id)));
    }
    // Data cut one byte short of a whole K-quant tensor.
    for (id, bytes) in [(2, 18), (6, 22), (7, 24), (12, 144), (13, 176), (14, 210)] {
        let values = if id >= 12 { 256 } else { 32 };
        let mut b = Builder::new();
        b.tensor("t", &[values, 2], id, vec![0; 2 * bytes]);
        let file = b.build();
        let parsed = Gguf::parse(&file).unwrap();
        assert_eq!(parsed.tensor("t").unwrap().data.len(), 2 * bytes);
        let short = &file[..file.len() - (file.len() - parsed.data_offset() - 2 * bytes) - 1];
        assert_eq!(
            Gguf::parse(short).unwrap_err(),
            GgufError::TensorOutOfBounds
        );
    }
    let mut b = Builder::new();
    b.tensor("t", &[u64::MAX / 2, 4], 0, vec![0; 4]);
    assert_eq!(parse(&b), Err(GgufError::Overflow));
    let mut b = Builder::new();
    b.tensor("t", &[1 << 20], 0, vec![0; 4]);
    assert_eq!(parse(&b), Err(GgufError::TensorOutOfBounds));
    let mut b = Builder::new();
    b.tensor("t", &[1], 0, vec![0; 4]);
    let file = b.build_with(|_, o| o + 4);
    assert_eq!(Gguf::parse(&file).unwrap_err(), GgufError::MisalignedTensor);
    let file = b.build_with(|_, _| u64::MAX - 31);
    assert_eq!(
        Gguf::parse(&file).unwrap_err(),
        GgufError::TensorOutOfBounds
    );
    let mut b = Builder::new();
    b.tensor("t", &[1], 0, vec![0; 4])
        .tensor("t", &[1], 0, vec![0; 4]);
    assert_eq!(parse(&b), Err(GgufError::DuplicateTensor));
}

#[test]
fn model_errors() {
    let load = |file: &[u8]| Llama::new(&Gguf::parse(file).unwrap()).map(|_| ());
    assert_eq!(load(&tiny_llama().build()), Ok(()));
    // Wrong architecture.
    let mut b = tiny_llama();
    b.str("general.architecture", "gpt2");
    // The first key wins in lookups, so rebuild with the other architecture first.
    let mut c = Builder::new();
    c.str("general.architecture", "gpt2");
    assert_eq!(load(&c.build()), Err(Error::WrongArchitecture));
    assert_eq!(
        load(&Builder::new().build()),
        Err(Error::MissingMetadata("general.architecture"))
    );
    let mut c = Builder::new();
    c.str("general.architecture", "llama");
    assert_eq!(
        load(&c.build()),
        Err(Error::MissingMetadata("llama.attention.head_count"))
    );
    c.str("llama.attention.head_count", "nine");
    assert_eq!(
        load(&c.build()),
        Err(Error::BadMetadata("llama.attention.head_count"))
    );
    // A missing tensor and a tensor of the wrong shape.
    let mut b = tiny_llama();
    b.tensors.retain(|t| t.0 != "blk.0.ffn_up.weight");
    assert_eq!(
        load(&b.build()),
        Err(Error::MissingTensor {
            layer: Some(0),
            role: TensorRole::FfnUp
        })
    );
    let mut b = tiny_llama();
    for t in &mut b.tensors {
        if t.0 == "blk.0.attn_k.weight" {
            t.1 = vec![32, 64];
        }
    }
    assert_eq!(
        load(&b.build()),
        Err(Error::TensorMismatch {
            layer: Some(0),
            role: TensorRole::AttnK
        })
    );
}

#[test]
fn tiny_llama_runs_and_chunks_bit_exactly() {
    use crate::{Logits, ScratchPlan};
    use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator};
    let file = tiny_llama().build();
    let g = Gguf::parse(&file).unwrap();
    let model = Llama::new(&g).unwrap();
    assert_eq!(model.config().vocab, 8);
    let config = CacheConfig::new(model.config().shape().unwrap())
        .with_formats(ElementFormat::F32, ElementFormat::F32)
        .with_page_tokens(16)
        .with_sequences(2, 64);
    let plan = config
        .plan_pages(8, <FreeList as PageAllocator>::META_BITS_PER_PAGE)
        .unwrap();
    let mut data = HeapArena::new(plan.data_bytes, config.align).unwrap();
    let mut meta = HeapArena::new(plan.meta.total, edgekv::META_ALIGN).unwrap();
    let mut cache: KvCache<'_, FreeList<'_>> =
        KvCache::new(config, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
    let tokens = [3u32, 1, 4, 1, 5, 7, 2, 6];
    let mut scratch = vec![0f32; ScratchPlan::new(model.config(), 8, 16).unwrap().scratch];
    let a = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let mut all = vec![0f32; 64];
    model
        .forward(&mut cache, a, &tokens, &mut scratch, Logits::All, &mut all)
        .unwrap();
    assert!(all.iter().all(|v| v.is_finite()));
    let b = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let mut one = vec![0f32; 8];
    for (i, &t) in tokens.iter().enumerate() {
        model
            .forward(&mut cache, b, &[t], &mut scratch, Logits::Last, &mut one)
            .unwrap();
        assert_eq!(one, all[i * 8..][..8], "row {i}");
    }
    // Bad input leaves the sequence as it was.
    let len = cache.seq_len(b).unwrap();
    assert_eq!(
        model.forward(&mut cache, b, &[8], &mut scratch, Logits::Last, &mut one),
        Err(Error::TokenOutOfRange(8))
    );
    assert_eq!(
        model.forward(&mut cache, b, &[], &mut scratch, Logits::Last, &mut one),
        Err(Error::Empty)
    );
    assert!(matches!(
        model.forward(
            &mut cache,
            b,
            &[1],
            &mut scratch[..10],
            Logits::Last,
            &mut one
        ),
        Err(Error::BufferTooSmall { .. })
    ));
    assert!(matches!(
        model.forward(
            &mut cache,
            b,
            &[1],
            &mut scratch,
            Logits::Last,
            &mut one[..7]
        ),
        Err(Error::BufferTooSmall { .. })
    ));
    // Planned for 8 rows; the room of attention's block of rows fits a few more.
    let most = ScratchPlan::rows_for(model.config(), scratch.len(), 16);
    assert!(most >= 8, "{most}");
    assert_eq!(
        model.forward(
            &mut cache,
            b,
            &vec![1; most + 1],
            &mut scratch,
            Logits::None,
            &mut one
        ),
        Err(Error::TooManyRows)
    );
    let long = [1u32; 57];
    assert_eq!(
        model.forward(&mut cache, b, &long, &mut scratch, Logits::None, &mut one),
        Err(Error::ContextFull)
    );
    assert_eq!(cache.seq_len(b).unwrap(), len);
}

/// Writes the tiny llama as the fuzz seed when `EDGEKV_WRITE_FUZZ_SEED` names a file.
#[test]
fn write_fuzz_seed() {
    if let Some(path) = std::env::var_os("EDGEKV_WRITE_FUZZ_SEED") {
        std::fs::write(path, tiny_llama().build()).unwrap();
    }
}
