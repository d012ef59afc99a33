//! Fidelity of KV page formats on real text: teacher-forced perplexity, KL divergence against a
//! reference format and top-1 agreement (DESIGN.md, "Fidelity measurement").

use crate::session::argmax;
use crate::{Error, KvStorage, Llama, Logits, Result, Session, SessionArenas, SessionOptions};

/// One format's figures over a text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fidelity {
    /// Perplexity over the predictions of tokens 1..n.
    pub perplexity: f64,
    /// Mean KL(p_ref ‖ p_format) over all n positions (softmax in f64).
    pub kl_mean: f64,
    /// Largest per-position KL.
    pub kl_max: f64,
    /// Fraction of positions whose most likely next token equals the reference's.
    pub top1: f64,
}

/// Log-softmax of one row in f64.
pub(crate) fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    row.iter().map(|&v| v as f64 - log_z).collect()
}

/// KL(p ‖ q) from log-probabilities.
fn kl(log_p: &[f64], log_q: &[f64]) -> f64 {
    log_p
        .iter()
        .zip(log_q)
        .map(|(&lp, &lq)| lp.exp() * (lp - lq))
        .sum()
}

#[derive(Default)]
struct Tally {
    nll: f64,
    predictions: usize,
    kl_sum: f64,
    kl_max: f64,
    agree: usize,
    positions: usize,
}

impl Tally {
    /// One position: this format's logits `row` and log-probabilities `lp` against the
    /// reference's log-probabilities and top token; `next` is the token that follows (none at
    /// the text's end).
    fn add(
        &mut self,
        reference: &[f64],
        ref_top: u32,
        row: &[f32],
        lp: &[f64],
        next: Option<usize>,
    ) {
        if let Some(next) = next {
            self.nll -= lp[next];
            self.predictions += 1;
        }
        let d = kl(reference, lp);
        self.kl_sum += d;
        self.kl_max = self.kl_max.max(d);
        self.agree += usize::from(argmax(row) == ref_top);
        self.positions += 1;
    }

    fn finish(&self) -> Fidelity {
        Fidelity {
            perplexity: (self.nll / self.predictions.max(1) as f64).exp(),
            kl_mean: self.kl_sum / self.positions.max(1) as f64,
            kl_max: self.kl_max,
            top1: self.agree as f64 / self.positions.max(1) as f64,
        }
    }
}

/// Teacher-forces `tokens` (no BOS added) through one session per KV storage (a format for K
/// and V, or a [`KvStorage`] with formats and rotations per half), `chunk` tokens at a time in
/// lockstep, and returns the reference's figures (its KL is 0, top-1 1) and each one's against
/// it. `base` gives everything but the KV storage.
pub fn compare<K: Copy + Into<KvStorage>>(
    model: &Llama,
    tokens: &[u32],
    base: SessionOptions,
    reference: impl Into<KvStorage>,
    formats: &[K],
) -> Result<(Fidelity, Vec<Fidelity>)> {
    if tokens.len() < 2 {
        return Err(Error::Input("need at least two tokens".into()));
    }
    let n = u32::try_from(tokens.len()).map_err(|_| Error::Input("text too long".into()))?;
    let pages = n.div_ceil(base.page_tokens as u32) as u16;
    let options: Vec<SessionOptions> = core::iter::once(reference.into())
        .chain(formats.iter().map(|&f| f.into()))
        .map(|kv| SessionOptions {
            pages,
            sequences: 1,
            max_tokens: n.max(base.max_tokens),
            ..base.with_kv(kv)
        })
        .collect();
    let mut arenas = options
        .iter()
        .map(|o| SessionArenas::new(model, o))
        .collect::<Result<Vec<_>>>()?;
    let mut sessions = Vec::with_capacity(options.len());
    for (a, o) in arenas.iter_mut().zip(&options) {
        let mut s = Session::new(model, a, *o)?;
        let seq = s.cache_mut().create_sequence(edgekv::SeqMode::Paged)?;
        sessions.push((s, seq));
    }
    let mut tallies: Vec<Tally> = options.iter().map(|_| Tally::default()).collect();
    let vocab = model.config().vocab;
    let chunk = base.prefill_chunk.max(1) as usize;
    for (c, block) in tokens.chunks(chunk).enumerate() {
        let mut rows = Vec::with_capacity(sessions.len());
        for (s, seq) in sessions.iter_mut() {
            rows.push(s.prefill(*seq, block, Logits::All)?);
        }
        for i in 0..block.len() {
            let pos = c * chunk + i;
            let next = tokens.get(pos + 1).map(|&t| t as usize);
            let reference = log_softmax(&rows[0][i * vocab..][..vocab]);
            let ref_top = argmax(&rows[0][i * vocab..][..vocab]);
            for (k, t) in tallies.iter_mut().enumerate() {
                let row = &rows[k][i * vocab..][..vocab];
                let own;
                let lp: &[f64] = if k == 0 {
                    &reference
                } else {
                    own = log_softmax(row);
                    &own
                };
                t.add(&reference, ref_top, row, lp, next);
            }
        }
    }
    let mut figures = tallies.iter().map(Tally::finish);
    let reference = figures.next().unwrap_or(Fidelity {
        perplexity: f64::NAN,
        kl_mean: 0.0,
        kl_max: 0.0,
        top1: 1.0,
    });
    Ok((reference, figures.collect()))
}

/// The figures of `rows` against `reference` (both token-major, `vocab` logits per position, the
/// positions of `tokens`, which give the perplexity's targets): e.g. this crate's forward pass
/// against another implementation's logits for the same text.
pub fn compare_rows(
    reference: &[f32],
    rows: &[f32],
    vocab: usize,
    tokens: &[u32],
) -> Result<Fidelity> {
    let n = tokens.len();
    if vocab == 0 || reference.len() != n * vocab || rows.len() != n * vocab {
        return Err(Error::Input(format!(
            "{} and {} logits for {n} positions of {vocab}",
            reference.len(),
            rows.len()
        )));
    }
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(Error::Input(format!(
            "token {bad} is outside the vocabulary"
        )));
    }
    let mut t = Tally::default();
    for (pos, (r, row)) in reference
        .chunks_exact(vocab)
        .zip(rows.chunks_exact(vocab))
        .enumerate()
    {
        let next = tokens.get(pos + 1).map(|&t| t as usize);
        t.add(&log_softmax(r), argmax(r), row, &log_softmax(row), next);
    }
    Ok(t.finish())
}

#[cfg(test)]
mod tests {
    use super::{kl, log_softmax};

    #[test]
    fn log_softmax_normalizes_and_kl_is_zero_only_for_equal_rows() {
        let a = log_softmax(&[1.0, 2.0, 3.0, -100.0]);
        let total: f64 = a.iter().map(|v| v.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert_eq!(kl(&a, &a), 0.0);
        // Shifting logits changes nothing.
        let b = log_softmax(&[11.0, 12.0, 13.0, -90.0]);
        assert!(kl(&a, &b).abs() < 1e-12);
        let c = log_softmax(&[3.0, 2.0, 1.0, -100.0]);
        assert!(kl(&a, &c) > 0.5);
        // KL of two-point distributions by hand: p = (0.5, 0.5), q = (0.25, 0.75).
        let (p, q) = ([0.5f64.ln(), 0.5f64.ln()], [0.25f64.ln(), 0.75f64.ln()]);
        let want = 0.5 * (0.5f64 / 0.25).ln() + 0.5 * (0.5f64 / 0.75).ln();
        assert!((kl(&p, &q) - want).abs() < 1e-15);
    }
}
