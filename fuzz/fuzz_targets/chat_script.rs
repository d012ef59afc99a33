//! Arbitrary words decoded as a chat script (what a board reads from its host): decoding must
//! never panic; a decoded script re-encodes to exactly the input words.
#![no_main]

use edgekv_llm::chat::{Turn, wire};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut turns = [Turn::default(); 8];
    if let Ok(script) = wire::decode(&words, &mut turns) {
        let mut out = vec![0u32; wire::encoded_len(&script)];
        let n = wire::encode(&script, &mut out).expect("re-encode");
        assert_eq!(&out[..n], &words[..]);
    }
});
