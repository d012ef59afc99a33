//! Arbitrary bytes parsed as a GGUF file and loaded as a llama model (seeded with a one-block
//! llama written by the reader's unit tests). Parsing and loading must never panic; on success
//! every metadata value, array element and tensor the iterators yield lies inside the input.
#![no_main]

use edgekv_llm::gguf::Value;
use edgekv_llm::{Gguf, Llama};
use libfuzzer_sys::fuzz_target;

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
        n += 1;
    }
    assert_eq!(n, g.tensor_count());
    let _ = Llama::new(&g);
});
