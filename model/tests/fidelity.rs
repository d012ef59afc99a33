//! Fidelity of quantized KV on real text, on a short stretch (the README's table is the
//! 2048-token run of `examples/fidelity.rs`). Bounds: on 2048 tokens int8 Q8_0 measured mean KL
//! 5.5e-3 against f16 KV over a floor of 4.0e-3 (f32 KV against f16 KV); these bounds leave
//! roughly 3x for a shorter, noisier stretch.

use crate::common;
use common::{gpl_tokens, model};

use edgekv::ElementFormat;
use edgekv_model::{Error, SessionOptions, fidelity};

#[test]
fn int8_kv_stays_close_to_f16_kv() {
    let tokens = gpl_tokens(256);
    let (reference, figures) = fidelity::compare(
        model(),
        &tokens,
        SessionOptions::default(),
        ElementFormat::F16,
        &[ElementFormat::F32, ElementFormat::Q8_0],
    )
    .unwrap();
    let (f32_kv, int8) = (figures[0], figures[1]);
    eprintln!("f16 {reference:?}\nf32 {f32_kv:?}\nint8 {int8:?}");
    assert!(reference.perplexity.is_finite() && reference.perplexity > 1.0);
    assert_eq!((reference.kl_mean, reference.top1), (0.0, 1.0));
    for f in [f32_kv, int8] {
        assert!(f.kl_mean > 0.0 && f.kl_mean < 2e-2, "{f:?}");
        assert!(f.top1 > 0.9, "{f:?}");
        assert!(
            (f.perplexity / reference.perplexity - 1.0).abs() < 0.03,
            "{f:?}"
        );
    }
}

#[test]
fn fidelity_needs_two_tokens() {
    let r = fidelity::compare(
        model(),
        &[1],
        SessionOptions::default(),
        ElementFormat::F16,
        &[ElementFormat::Q8_0],
    );
    assert!(matches!(r, Err(Error::Input(_))));
}

#[test]
fn a_missing_model_file_is_a_clear_error() {
    match edgekv_model::Llama::load("/nonexistent/model.gguf") {
        Err(Error::Model(m)) => assert!(m.contains("fetch-model.sh"), "{m}"),
        other => panic!("{other:?}"),
    }
}
