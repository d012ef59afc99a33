//! `teacher_force`, the library side of the `teacher-force` binary, on SmolLM2-135M: its
//! reductions agree with the full rows it keeps, a shorter run is a prefix of a longer one bit
//! for bit, and bad input is refused.

use crate::common;
use common::{gpl_tokens, model};

use edgekv::ElementFormat;
use edgekv_model::teacher_force;

#[test]
fn reductions_match_the_kept_rows_and_runs_extend_bit_for_bit() {
    let model = model();
    let tokens = gpl_tokens(130);
    let f16 = (ElementFormat::F16, ElementFormat::F16);
    let long = teacher_force(model, &tokens, f16, &[129, 0, 64]).unwrap();
    assert_eq!(long.top1.len(), 130);
    assert_eq!(long.next_logprob.len(), 129);
    let kept: Vec<usize> = long.logits.iter().map(|(p, _)| *p).collect();
    assert_eq!(kept, [129, 0, 64], "rows in the order asked");
    for (p, row) in &long.logits {
        let best = (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b });
        assert_eq!(long.top1[*p] as usize, best, "top-1 at {p}");
        if let Some(&next) = tokens.get(p + 1) {
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            let lp = (row[next as usize] as f64 - max - z.ln()) as f32;
            assert_eq!(
                long.next_logprob[*p].to_bits(),
                lp.to_bits(),
                "log-prob at {p}"
            );
        }
    }
    let ppl = long.perplexity();
    assert!(ppl > 1.0 && ppl < 100.0, "perplexity {ppl}");
    // 70 tokens: a chunk and a part; the same bits as the longer run's first 70 positions.
    let short = teacher_force(model, &tokens[..70], f16, &[64]).unwrap();
    assert_eq!(short.top1, long.top1[..70]);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&short.next_logprob), bits(&long.next_logprob[..69]));
    assert_eq!(bits(&short.logits[0].1), bits(&long.logits[2].1));
}

#[test]
fn bad_input_is_refused() {
    let model = model();
    let f16 = (ElementFormat::F16, ElementFormat::F16);
    assert!(teacher_force(model, &[], f16, &[]).is_err());
    let vocab = model.config().vocab as u32;
    assert!(teacher_force(model, &[1, vocab], f16, &[]).is_err());
    assert!(teacher_force(model, &[1, 2], f16, &[2]).is_err());
}
