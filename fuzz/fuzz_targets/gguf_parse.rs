//! Arbitrary bytes parsed as a GGUF file and loaded as a llama model (seeded with a one-block
//! llama and a file with two rows of every quantized weight type, written by the reader's unit
//! tests). Parsing and loading must never panic; on success every metadata value, array element
//! and tensor the iterators yield lies inside the input, and the first row of every tensor (of
//! every type: F32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) dequantizes, and its
//! quantized rows multiply with an activation row of their type, without panicking.
#![no_main]

use edgekv_llm::gguf::{Tensor, Value};
use edgekv_llm::matmul::{Matrix, dot_dequantized, dot_quant, matmul_quant};
use edgekv_llm::quant::{ActivationType, QuantRow, dequantize_row, quantize_activation, sums_len};
use edgekv_llm::{Gguf, Llama};
use libfuzzer_sys::fuzz_target;

/// Rows this wide or wider are only parsed (bounds the work per input).
const MAX_COLS: usize = 1 << 14;
/// At most this many rows are multiplied per tensor.
const MAX_ROWS: usize = 8;

fn touch(v: &Value<'_>, data: &[u8]) {
    match v {
        Value::String(s) => assert!(inside(s, data)),
        Value::Array(a) => {
            let n = a.iter().inspect(|e| touch(e, data)).count();
            assert_eq!(n as u64, a.len());
            let _ = a.get(a.len().saturating_sub(1));
            let _ = a.get(a.len());
        }
        _ => {
            let _ = (v.as_u64(), v.as_f32());
        }
    }
}

fn inside(s: &[u8], data: &[u8]) -> bool {
    let (a, b) = (s.as_ptr() as usize, data.as_ptr() as usize);
    s.is_empty() || (a >= b && a + s.len() <= b + data.len())
}

/// The tensor's first row dequantized (the reader validated whole blocks, so it must succeed),
/// then its rows multiplied with that row quantized to the type's activation type.
fn rows(t: &Tensor<'_>) {
    let cols = t.dims[0];
    if cols > MAX_COLS {
        return;
    }
    let row_bytes =
        t.ty.row_bytes(cols)
            .expect("a parsed tensor has whole-block rows");
    let mut v = vec![0f32; cols];
    dequantize_row(t.ty, &t.data[..row_bytes], &mut v).expect("a parsed row dequantizes");
    let x: Vec<f32> = v
        .iter()
        .map(|&x| if x.is_finite() { x } else { 1.0 })
        .collect();
    let _ = dot_dequantized(&t.data[..row_bytes], t.ty, &x);
    let Some(act) = ActivationType::for_weights(t.ty) else {
        return;
    };
    let (mut qs, mut d, mut s) = (
        vec![0i8; cols],
        vec![0f32; cols / act.block_values()],
        vec![0f32; sums_len(cols)],
    );
    quantize_activation(act, &x, &mut qs, &mut d, &mut s);
    let _ = dot_quant(t.ty, &t.data[..row_bytes], &QuantRow::of(act, &qs, &d, &s));
    let n = t.dims[1].min(MAX_ROWS);
    let head = Tensor {
        dims: [cols, n, 1, 1],
        data: &t.data[..n * row_bytes],
        ..*t
    };
    let m = Matrix::new(&head, cols, n).expect("the first rows are a matrix");
    let mut out = vec![0f32; n];
    matmul_quant(&m, &qs, &d, &s, 1, &mut out);
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    assert_eq!(g.metadata().count() as u64, g.metadata_count());
    for (_, v) in g.metadata() {
        touch(&v, data);
    }
    let mut n = 0u64;
    for t in g.tensors() {
        assert!(inside(t.data, data));
        assert_eq!(
            g.tensor(t.name).map(|u| u.data.as_ptr()),
            Some(t.data.as_ptr())
        );
        rows(&t);
        n += 1;
    }
    assert_eq!(n, g.tensor_count());
    let _ = Llama::new(&g);
});
