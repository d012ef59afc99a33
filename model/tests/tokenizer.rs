//! The tokenizer built from the GGUF's vocabulary and merges.

use crate::common;
use common::tokenizer;

#[test]
fn ids_match_llama_cpp() {
    // llama.cpp's ids for this text (../shared/MODEL-NOTES.md).
    let ids = tokenizer()
        .encode("Hello, world! The quick brown fox.")
        .unwrap();
    assert_eq!(ids, [19556, 28, 905, 17, 378, 2365, 6354, 16438, 30]);
}

#[test]
fn control_tokens_are_single_ids() {
    let t = tokenizer();
    assert_eq!(t.token_id("<|im_start|>"), Some(1));
    assert_eq!(t.token_id("<|im_end|>"), Some(2));
    let ids = t.encode("<|im_start|>user\nHi<|im_end|>").unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(ids.iter().filter(|&&i| i <= 16).count(), 2);
}

#[test]
fn digits_are_split_one_by_one() {
    let t = tokenizer();
    let ids = t.encode("12345").unwrap();
    assert_eq!(ids.len(), 5);
    for (i, d) in "12345".chars().enumerate() {
        assert_eq!(t.decode(&ids[i..i + 1]).unwrap(), d.to_string());
    }
}

#[test]
fn text_round_trips() {
    let t = tokenizer();
    for text in [
        "",
        " leading space",
        "tabs\tand\r\nCRLF  double  spaces",
        "don't we'll they're I'M",
        "Unicode: naïve café, Ελληνικά, 日本語, emoji 🦀",
        "fn main() { println!(\"{}\", 2 + 2); }",
        "https://example.com/a?b=c&d=e#f",
        "<|im_start|>assistant\nSure.<|im_end|>",
    ] {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "ids {ids:?}");
    }
}

/// The Cortex-M55 chat's script (text and ids), as the task runner hands it to the board.
#[allow(dead_code)]
mod chat_script {
    include!("../../xtask/src/chat_script.rs");
}

#[test]
fn the_board_chat_script_ids_are_the_tokenizers() {
    let t = tokenizer();
    assert_eq!(
        t.encode(chat_script::SYSTEM).unwrap(),
        chat_script::SYSTEM_IDS,
        "system prompt"
    );
    for (text, ids, _, _) in chat_script::TURNS {
        assert_eq!(t.encode(text).unwrap(), ids, "turn {text:?}");
    }
    assert_eq!(t.token_id("<|im_end|>"), Some(chat_script::STOP[0]));
}
