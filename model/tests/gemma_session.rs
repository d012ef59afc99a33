//! Gemma 3 270M in a [`Session`]: its 15 sliding-window layers in a layer group of their own
//! (holding only what the 512-token window sees), reuse of a held conversation and of published
//! prefixes equal to a cold prefill bit for bit, past the window. Skipped, with a notice, when
//! the model file is missing (`bash model/fetch-gemma.sh` fetches it).

use edgekv::ElementFormat;
use edgekv_model::{Chat, Llama, Session, SessionArenas, SessionOptions, gemma_path};

/// The model, or `None` with a loud notice (test skipped) when the file is missing.
fn gemma() -> Option<Llama> {
    match Llama::load(gemma_path()) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("SKIPPED: Gemma 3 270M not loaded ({e}); run `bash model/fetch-gemma.sh`");
            None
        }
    }
}

/// The first 640 GPL-3 token ids, BOS first (as llama.cpp tokenized them).
fn gpl3() -> Vec<u32> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gemma_data/gpl3.ids");
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// q8_0 pages of 16 tokens, a rollback of 16 positions in the windowed group.
fn options() -> SessionOptions {
    SessionOptions {
        pages: 48,
        sequences: 2,
        max_tokens: 1024,
        rollback: 16,
        ..SessionOptions::default()
    }
    .with_format(ElementFormat::Q8_0)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The last token's logits of `prompt` prefilled cold in a fresh session.
fn cold(model: &Llama, prompt: &[u32]) -> Vec<f32> {
    let mut arenas = SessionArenas::new(model, &options()).unwrap();
    let mut s = Session::new(model, &mut arenas, options()).unwrap();
    s.start(prompt).unwrap().2
}

/// A conversation continued past the window (truncated back within the rollback, then
/// extended) gives a cold prefill's bits; the windowed group holds only its window's pages;
/// a turn that departs further back than the window can go starts over through the prefix
/// index, reusing the published prefix every group still holds, with a cold start's tokens.
#[test]
fn sessions_reuse_past_the_window_as_cold() {
    let Some(model) = gemma() else { return };
    let text = gpl3();
    let options = options();
    let mut arenas = SessionArenas::new(&model, &options).unwrap();
    let pages = arenas.group_pages().to_vec();
    // The windowed group would take ⌈(512 + 16 + 64 − 2) / 16⌉ + 1 = 38 pages a sequence, for 3
    // sequences (2 and one more for published prefixes): more than the 48 asked for.
    assert_eq!(pages, [48, 48]);
    let mut s = Session::new(&model, &mut arenas, options).unwrap();
    assert_eq!(s.cache().group_count(), 2);

    // Turn 1: 530 tokens, then 6 generated (5 of them fed back).
    let mut chat = Chat::new();
    let first = s.chat_turn_until(&mut chat, &text[..530], 6, &[]).unwrap();
    assert_eq!((first.reused_tokens, first.generated.len()), (0, 6));
    assert_eq!(chat.held().len(), 535);

    // Turn 2 follows the text where the generated tokens depart from it: truncated back up to 5
    // positions (within the rollback), the rest up to 560 prefilled; the last token's logits
    // equal a cold prefill's.
    let seq = chat.sequence().unwrap();
    let same = edgekv::prefix::common_prefix_len(chat.held(), &text[..560]);
    assert!((530..535).contains(&same), "{same}");
    let (kept, logits) = s.continue_prompt(seq, chat.held(), &text[..560]).unwrap();
    assert_eq!(kept as usize, same);
    assert!(same_bits(&logits, &cold(&model, &text[..560])));
    // Pages are released as the sequence grows: at the next token's reservation (560 positions),
    // queries from 560 − 16 (the rollback) on see positions from 544 + 1 − 512 = 33 on, so the
    // windowed group (15 layers) releases pages 0 and 1; the global group holds all 36.
    let used = |s: &Session<'_, '_>, g: usize| s.cache().group(g).unwrap().stats().pages_used;
    assert_eq!((used(&s, 0), used(&s, 1)), (35, 35));
    s.decode(seq, text[560]).unwrap();
    assert_eq!((used(&s, 0), used(&s, 1)), (34, 36));

    // Turn 3 keeps only 40 tokens of it: too far back for the windowed group, so the turn starts
    // a new sequence, reusing what turn 1 published (2 whole pages below 40) in both groups.
    let mut prompt = text[..40].to_vec();
    prompt.extend_from_slice(&text[600..620]);
    let mut held = chat.clone();
    let third = s.chat_turn_until(&mut held, &prompt, 2, &[]).unwrap();
    assert_eq!(third.reused_tokens, 32);
    assert_ne!(held.sequence(), Some(seq));
    let mut cold_arenas = SessionArenas::new(&model, &options).unwrap();
    let mut cold_session = Session::new(&model, &mut cold_arenas, options).unwrap();
    let cold_third = cold_session
        .chat_turn_until(&mut Chat::new(), &prompt, 2, &[])
        .unwrap();
    assert_eq!(cold_third.reused_tokens, 0);
    assert_eq!(third.generated, cold_third.generated);
}
