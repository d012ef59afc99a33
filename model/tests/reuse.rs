//! Bit-exact prefix reuse through edgekv's prefix index, chunking invariance, bad input.

use crate::common;
use common::{chat_prompt, cold_logits, gpl_tokens, model, options, same_bits};

use edgekv::{ElementFormat, SeqMode};
use edgekv_model::{Chat, Error, Logits, ReuseAlign, Session, SessionArenas, SessionOptions};

/// Prompts sharing the first `len` tokens of `base`, then a tail of their own (from later in the
/// text, so no prompt is a prefix of another).
fn variant(base: &[u32], len: usize, tail: usize) -> Vec<u32> {
    let mut p = base[..len].to_vec();
    p.extend_from_slice(&base[base.len() - tail..]);
    p
}

#[test]
fn logits_do_not_depend_on_chunking() {
    let m = model();
    let prompt = gpl_tokens(150);
    let opts = options(16).with_format(ElementFormat::Q8_0);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let mut all_rows = None;
    for splits in [
        vec![150],
        vec![1, 149],
        vec![64, 64, 22],
        vec![37, 50, 63],
        vec![17; 9],
    ] {
        let seq = s.cache_mut().create_sequence(SeqMode::Paged).unwrap();
        let mut rows = Vec::new();
        let mut at = 0;
        // The splits, then whatever is left.
        for n in splits.iter().copied().chain(core::iter::once(150)) {
            let n = n.min(150 - at);
            if n == 0 {
                continue;
            }
            rows.extend(
                m.forward(s.cache_mut(), seq, &prompt[at..at + n], Logits::All)
                    .unwrap(),
            );
            at += n;
        }
        assert_eq!(at, 150);
        match &all_rows {
            None => all_rows = Some(rows),
            Some(first) => assert!(same_bits(first, &rows), "splits {splits:?}"),
        }
        s.cache_mut().free_sequence(seq).unwrap();
    }
}

/// Publishes `base` in a session, then for each shared length starts a prompt that shares it:
/// the reused tokens and logits must equal a cold prefill's bit for bit. Returns how many
/// lengths reused something.
fn reuse_matrix(format: ElementFormat, reuse: ReuseAlign, lengths: &[usize]) -> usize {
    let m = model();
    let base = gpl_tokens(260);
    let opts = SessionOptions {
        reuse,
        ..options(64).with_format(format)
    };
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let (seq, reused, _) = s.start(&base[..200]).unwrap();
    assert_eq!(reused, 0);
    s.cache_mut().free_sequence(seq).unwrap();
    let mut reusing = 0;
    for &len in lengths {
        let prompt = variant(&base, len, 40);
        let (seq, reused, warm) = s.start(&prompt).unwrap();
        let grid = match reuse {
            ReuseAlign::Chunk => 64,
            ReuseAlign::Page => 16,
        };
        assert_eq!(reused as usize, len.min(200) / grid * grid, "shared {len}");
        reusing += usize::from(reused > 0);
        let cold = cold_logits(opts, &prompt);
        assert!(
            same_bits(&warm, &cold),
            "{format:?} {reuse:?}: shared {len}, reused {reused}: logits differ from cold"
        );
        s.cache_mut().free_sequence(seq).unwrap();
    }
    reusing
}

#[test]
fn reuse_is_bit_exact_int8() {
    // On and off the page (16) and chunk (64) grids: below one page, one page exactly, just past
    // a chunk, mid-prompt, the whole published prompt. (Each length costs a cold prefill; the
    // wider matrix is `reuse_is_bit_exact_full_matrix`.)
    let lengths = [5, 16, 65, 150, 200];
    assert_eq!(
        reuse_matrix(ElementFormat::Q8_0, ReuseAlign::Page, &lengths),
        4
    );
    assert_eq!(
        reuse_matrix(ElementFormat::Q8_0, ReuseAlign::Chunk, &[63, 64, 129, 200]),
        3
    );
}

#[test]
#[ignore = "full matrix: about 10 minutes; run with --ignored"]
fn reuse_is_bit_exact_full_matrix() {
    let lengths: Vec<usize> = (1..=200)
        .step_by(13)
        .chain([16, 32, 64, 128, 192])
        .collect();
    for format in [ElementFormat::F32, ElementFormat::F16, ElementFormat::Q8_0] {
        for reuse in [ReuseAlign::Page, ReuseAlign::Chunk] {
            reuse_matrix(format, reuse, &lengths);
        }
    }
}

#[test]
fn greedy_after_reuse_equals_cold() {
    let m = model();
    let eos = m.config().eos;
    let opts = options(64);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let first = chat_prompt("Name three colours of the rainbow.");
    let (seq, _, _) = s.start(&first).unwrap();
    s.cache_mut().free_sequence(seq).unwrap();
    for question in ["Name three fruits.", "What is two plus two?"] {
        let prompt = chat_prompt(question);
        let (seq, reused, logits) = s.start(&prompt).unwrap();
        assert!(reused > 0);
        let warm = s.generate(seq, &logits, 40, &[eos]).unwrap();
        s.cache_mut().free_sequence(seq).unwrap();

        let mut cold_arenas = SessionArenas::new(m, &opts).unwrap();
        let mut c = Session::new(m, &mut cold_arenas, opts).unwrap();
        let (cseq, creused, clogits) = c.start(&prompt).unwrap();
        assert_eq!(creused, 0);
        let cold = c.generate(cseq, &clogits, 40, &[eos]).unwrap();
        assert_eq!(warm, cold, "{question}");
    }
}

/// Unaligned reuse (the prompt's first `len` tokens computed in a call that ends there, the rest
/// in another) against a cold prefill: how often logits change. In this stack never, because
/// every row is computed alone; candle-transformers' reference changes (tests/reference.rs).
#[test]
fn unaligned_reuse_never_changes_logits() {
    let m = model();
    let prompt = gpl_tokens(120);
    let opts = options(16);
    let cold = cold_logits(opts, &prompt);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let mut changed = 0;
    let cuts = [1, 7, 31, 50, 63, 65, 77, 99, 111, 119];
    for cut in cuts {
        let seq = s.cache_mut().create_sequence(SeqMode::Paged).unwrap();
        m.forward(s.cache_mut(), seq, &prompt[..cut], Logits::None)
            .unwrap();
        let warm = s.prefill(seq, &prompt[cut..], Logits::Last).unwrap();
        changed += usize::from(!same_bits(&warm, &cold));
        s.cache_mut().free_sequence(seq).unwrap();
    }
    eprintln!(
        "unaligned reuse changed logits in {changed} of {} cuts",
        cuts.len()
    );
    assert_eq!(changed, 0);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let m = model();
    let opts = options(8);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let seq = s.cache_mut().create_sequence(SeqMode::Paged).unwrap();
    s.prefill(seq, &[1, 2, 3], Logits::None).unwrap();
    let before = s.cache().stats();

    assert!(matches!(
        s.prefill(seq, &[], Logits::Last),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        m.forward(s.cache_mut(), seq, &[5, 49_152], Logits::Last),
        Err(Error::Input(_))
    ));
    // 8 pages hold 128 positions: a longer prompt runs out of pages part way.
    let long = gpl_tokens(200);
    assert!(matches!(
        s.prefill(seq, &long, Logits::Last),
        Err(Error::Cache(edgekv::Error::OutOfPages))
    ));
    assert!(matches!(s.start(&[]), Err(Error::Input(_))));
    assert_eq!(s.cache().seq_len(seq).unwrap(), 3);
    assert_eq!(s.cache().stats(), before);

    // Options that do not fit the arenas, and a chunk off the page grid.
    let other = SessionOptions { pages: 9, ..opts };
    assert!(matches!(
        Session::new(m, &mut arenas, other),
        Err(Error::Input(_))
    ));
    let bad = SessionOptions {
        prefill_chunk: 24,
        ..opts
    };
    assert!(matches!(SessionArenas::new(m, &bad), Err(Error::Input(_))));
}

#[test]
fn chat_turns_reuse_the_conversation_bit_exactly() {
    let m = model();
    let t = common::tokenizer();
    let opts = options(64);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let mut chat = Chat::new();
    let mut text = String::from(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    );
    for (turn, user) in ["Name a planet.", "Name another one."].iter().enumerate() {
        text += &format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
        let ids = t.encode(&text).unwrap();
        let held = chat.held().len();
        let report = s.chat_turn(&mut chat, &ids, 24).unwrap();
        if turn == 0 {
            assert_eq!(report.reused_tokens, 0);
        } else {
            // The previous prompt and reply (as far as re-tokenizing the reply gives the same ids).
            let common = edgekv::prefix::common_prefix_len(&chat.held()[..held], &ids);
            assert!(common > held / 2);
            assert_eq!(report.reused_tokens as usize, common);
        }
        // The same conversation in a fresh cache generates the same reply.
        let mut cold_arenas = SessionArenas::new(m, &opts).unwrap();
        let mut c = Session::new(m, &mut cold_arenas, opts).unwrap();
        let cold = c.chat_turn(&mut Chat::new(), &ids, 24).unwrap();
        assert_eq!(report.generated, cold.generated, "turn {turn}");
        text += &t.decode(&report.generated).unwrap();
        text += "<|im_end|>\n";
    }
}

#[test]
fn continue_prompt_refuses_bad_input() {
    let m = model();
    let opts = options(8);
    let mut arenas = SessionArenas::new(m, &opts).unwrap();
    let mut s = Session::new(m, &mut arenas, opts).unwrap();
    let (seq, _, _) = s.start(&[1, 2, 3]).unwrap();
    assert!(matches!(
        s.continue_prompt(seq, &[1, 2, 3, 4], &[1, 2, 3, 4, 5]),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        s.continue_prompt(seq, &[1, 2, 3], &[]),
        Err(Error::Input(_))
    ));
    assert_eq!(s.cache().seq_len(seq).unwrap(), 3);
    // The whole prompt held: the last token is recomputed.
    let (kept, _) = s.continue_prompt(seq, &[1, 2, 3], &[1, 2, 3]).unwrap();
    assert_eq!(kept, 2);
    assert_eq!(s.cache().seq_len(seq).unwrap(), 3);
}
